"""What the quantizer contract fixes before any arithmetic: the config, shapes, seeds.

`QuantConfig` says how a tensor is quantized; `scale_shape` gives the shape of its fp16
scales; `draw_seed` turns the caller's generator into the one stochastic-rounding seed of
a call. The constants below are the contract's numbers (docs/ARCHITECTURE.md,
"Quantizer"), shared by the reference, the CPU path and the Triton kernels.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

__all__ = [
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


def _check_choice(field: str, value, choices: Sequence[str]) -> None:
    if not isinstance(value, str):
        kind = type(value).__name__
        raise TypeError(f"QuantConfig.{field} must be a str, got {value!r} ({kind})")
    if value not in choices:
        raise ValueError(f"QuantConfig.{field} must be one of {list(choices)}, got {value!r}")


def _check_int(field: str, value, low: int, high: int | None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{field} must be an int, got {value!r} ({type(value).__name__})")
    if value < low or (high is not None and value > high):
        bound = f"{low}..{high}" if high is not None else f">= {low}"
        raise ValueError(f"{field} must be in {bound}, got {value}")


@dataclass(frozen=True)
class QuantConfig:
    """How a tensor is quantized; see docs/ARCHITECTURE.md "Quantizer" for the arithmetic.

    bits: code width 1..8. granularity: one scale per last-dim channel (over all other
    dims), per token (row of the last dim), or per `group_size` consecutive elements.
    scale_method: max |v| or 2 * RMS. rounding: floor(t + 0.5) or floor(t + u), u from a
    seeded hash. grid: "reference" (asymmetric, [-Q, Q-1] * s/Q as in the paper's code)
    or "symmetric" (2**bits mid-rise levels spanning [-s, s]).
    """

    bits: int = 4
    granularity: str = "channel"
    group_size: int = 128
    scale_method: str = "maxabs"
    rounding: str = "nearest"
    grid: str = "reference"

    def __post_init__(self) -> None:
        _check_int("QuantConfig.bits", self.bits, 1, 8)
        _check_choice("granularity", self.granularity, GRANULARITIES)
        _check_int("QuantConfig.group_size", self.group_size, 1, None)
        _check_choice("scale_method", self.scale_method, SCALE_METHODS)
        _check_choice("rounding", self.rounding, ROUNDINGS)
        _check_choice("grid", self.grid, GRIDS)

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
