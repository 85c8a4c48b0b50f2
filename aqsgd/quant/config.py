"""What the quantizer contract fixes before any arithmetic: the config, shapes, seeds.

`QuantConfig` says how a tensor is quantized; `scale_shape` gives the shape of its fp16
scales; `draw_seed` turns the caller's generator into the one stochastic-rounding seed of
a call. The constants below are the contract's numbers (docs/ARCHITECTURE.md,
"Quantizer"), shared by the reference, the CPU path and the Triton kernels.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Literal

import torch
from pydantic import ConfigDict, Field, TypeAdapter, ValidationError

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
    "check_fields",
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


@functools.cache
def _declared(cls: type) -> dict[str, tuple[TypeAdapter, str, bool]]:
    """Each field's validator (its declared, constrained type, checked strictly), the words
    saying what it expects, and whether it is a tuple whose items are what is declared."""
    out = {}
    for f in dataclasses.fields(cls):
        hint = typing.get_type_hints(cls, include_extras=True)[f.name]
        items = typing.get_origin(hint) is tuple
        if items:  # tuple[X, ...]: each item is checked as an X
            hint = typing.get_args(hint)[0]
        if dataclasses.is_dataclass(hint):  # checked by its own __post_init__
            continue
        out[f.name] = (TypeAdapter(hint, config=ConfigDict(strict=True)), _expected(hint), items)
    return out


def _expected(hint) -> str:
    base, *meta = typing.get_args(hint) if typing.get_origin(hint) is Annotated else (hint,)
    if typing.get_origin(base) is Literal:
        return f"one of {list(typing.get_args(base))}"
    bounds = {k: getattr(m, k) for info in meta for m in getattr(info, "metadata", [info])
              for k in ("ge", "le") if getattr(m, k, None) is not None}
    what = {int: "an int", float: "a number", bool: "a bool", str: "a str"}.get(base, str(base))
    if "ge" in bounds and "le" in bounds:
        low, high = bounds["ge"], bounds["le"]
        return f"{what} in {low}..{high}" if base is int else f"{what} in [{low}, {high}]"
    return f"{what} >= {bounds['ge']}" if "ge" in bounds else what


def check_fields(obj) -> None:
    """Check every field of dataclass `obj` against its declaration (the type and range a
    config file is validated against, so code and files meet one rule); a tuple field's
    items one by one. Raises TypeError (a wrong type) or ValueError naming `Class.field`
    (`Class.field[]` for an item), what it expects and the value."""
    for name, (adapter, expected, items) in _declared(type(obj)).items():
        value = getattr(obj, name)
        where = f"{type(obj).__name__}.{name}" + ("[]" if items else "")
        for v in value if items else (value,):
            try:
                adapter.validate_python(v)
            except ValidationError as e:
                if e.errors()[0]["type"].endswith("_type"):
                    raise TypeError(f"{where} must be {expected}, got {v!r} "
                                    f"({type(v).__name__})") from None
                raise ValueError(f"{where} must be {expected}, got {v!r}") from None


@dataclass(frozen=True)
class QuantConfig:
    """How a tensor is quantized; see docs/ARCHITECTURE.md "Quantizer" for the arithmetic.
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
