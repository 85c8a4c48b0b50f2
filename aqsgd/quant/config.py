"""What the quantizer contract fixes before any arithmetic: the config, shapes, seeds.

`QuantConfig` says how a tensor is quantized; `scale_shape` gives the shape of its fp16
scales; `draw_seed` turns the caller's generator into the one stochastic-rounding seed of
a call. The constants below are the contract's numbers (docs/architecture/quant.md,
"Quantizer"), shared by the reference, the CPU path and the Triton kernels.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Literal

import torch
from pydantic import Field

from specfile.declared import check_fields

__all__ = [
    "Bits",
    "CACHE_DTYPES",
    "FP16_MAX",
    "GOLDEN32",
    "GRANULARITIES",
    "GRIDS",
    "INPUT_DTYPES",
    "QuantConfig",
    "ROUNDINGS",
    "SCALE_DTYPE",
    "SCALE_MARGIN",
    "SCALE_METHODS",
    "SEED_HIGH",
    "draw_seed",
    "scale_shape",
]

GRANULARITIES = ("channel", "token", "group")
SCALE_METHODS = ("maxabs", "l2")
ROUNDINGS = ("nearest", "stochastic")
GRIDS = ("reference", "symmetric")

INPUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
CACHE_DTYPES = (torch.float32, torch.float16)
SCALE_DTYPE = torch.float16
FP16_MAX = 65504.0
SCALE_MARGIN = 1.0 + 2.0**-10  # fp16 rounding of stat * margin is never below stat
SEED_HIGH = 2**31 - 1  # seeds are drawn from [0, SEED_HIGH)
GOLDEN32 = 0x9E3779B9  # seed_mix = seed * GOLDEN32 mod 2**32


Bits = Annotated[int, Field(ge=1, le=8, description="code width in bits")]


@dataclass(frozen=True)
class QuantConfig:
    """How a tensor is quantized; see docs/architecture/quant.md "Quantizer" for the arithmetic.
    A config file's direction (`forward.bits`, `forward.granularity`, ...) writes these
    keys beside the direction's own (aqsgd.compress.message.CompressionConfig)."""

    bits: Bits = 4
    granularity: Annotated[Literal[GRANULARITIES], Field(description=(
        "one scale per last-dim channel (over all other dims), per token (row of the last "
        "dim), or per group_size consecutive elements"))] = "channel"
    group_size: Annotated[int, Field(ge=1, description=(
        "elements per scale with granularity 'group'"))] = 128
    rounding: Annotated[Literal[ROUNDINGS], Field(description=(
        "floor(t + 0.5), or floor(t + u) with u from a seeded hash"))] = "nearest"
    grid: Annotated[Literal[GRIDS], Field(description=(
        "'reference': asymmetric, [-Q, Q-1] * s/Q as in the paper's code; 'symmetric': "
        "2**bits mid-rise levels spanning [-s, s]"))] = "reference"
    scale_method: Annotated[Literal[SCALE_METHODS], Field(description=(
        "the scale statistic: max |v| or 2 * RMS"))] = "maxabs"

    def __post_init__(self) -> None:
        check_fields(self)

    @property
    def symmetric(self) -> bool:
        return self.grid == "symmetric"

    @property
    def stochastic(self) -> bool:
        return self.rounding == "stochastic"

    @property
    def code_max(self) -> int:
        """Largest code, 2**bits - 1."""
        return (1 << self.bits) - 1

    @property
    def center(self) -> float:
        """The value subtracted from a code before scaling: Q (reference) or L/2 (symmetric)."""
        return self.code_max / 2 if self.symmetric else float(1 << (self.bits - 1))


def scale_shape(shape: Sequence[int], cfg: QuantConfig) -> tuple[int, ...]:
    """Shape of the fp16 scales for a tensor of `shape`: (D,), shape[:-1] or (numel // G,)."""
    shape = tuple(int(d) for d in shape)
    numel = math.prod(shape)
    if numel == 0:
        raise ValueError(f"x must have at least one element, got shape {shape}")
    if cfg.granularity == "channel":
        if len(shape) < 2:
            raise ValueError(f"granularity 'channel' needs x with ndim >= 2, got shape {shape}")
        return (shape[-1],)
    if cfg.granularity == "token":
        if len(shape) < 1:
            raise ValueError(f"granularity 'token' needs x with ndim >= 1, got shape {shape}")
        return shape[:-1]
    if numel % cfg.group_size:
        raise ValueError(
            f"group_size={cfg.group_size} must divide x.numel()={numel} (shape {shape})")
    return (numel // cfg.group_size,)


def draw_seed(generator: torch.Generator | None, cfg: QuantConfig) -> int:
    """The stochastic-rounding seed of one call, drawn from `generator`; 0 for nearest."""
    if not cfg.stochastic:
        return 0
    if generator is None:
        raise ValueError("rounding='stochastic' needs an explicit torch.Generator, "
                         "got generator=None")
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    seed = torch.randint(0, SEED_HIGH, (1,), generator=generator, device=generator.device)
    return int(seed.item())
