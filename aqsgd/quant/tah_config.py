"""What TAH-Quant's contract fixes before any arithmetic: the config, the tiles, the wire.

`TahConfig` says how a tensor is quantized (the method and every choice made for it:
docs/compressors.md, "TAH-Quant"); `tile_count` and `code_bits` give the tiles of a shape
and the code bits the budget grants them; `to_tiles` / `from_tiles` cut a tensor into
tiles (rows zero-padded to a multiple of the tile) and back; `TahPacked` is what travels;
`tah_wire_spec` and `tah_wire_nbytes` give its tensors and its exact size from shape and
config alone (the bit allocation is adaptive per tile but its total is fixed, so the size
never depends on the data). Imports torch only.

    cfg = TahConfig(bits=3.0, tile_size=64, min_bits=2, max_bits=4)
    tah_wire_nbytes((16, 64, 128), cfg)   # 49152 code bytes + 2048 tiles * 6 bytes = 61440
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Annotated, Literal, NamedTuple

import torch
from pydantic import Field

from aqsgd.quant.config import ROUNDINGS, Bits
from specfile.declared import check_fields

__all__ = [
    "ENTROPY_BINS",
    "FIXED_ONE",
    "MAX_TILE",
    "MIN_TILE",
    "TahConfig",
    "TahPacked",
    "code_bits",
    "entropy_table",
    "gain_table",
    "from_tiles",
    "tile_count",
    "to_tiles",
    "tah_wire_nbytes",
    "tah_wire_spec",
]

MIN_TILE = 8  # a tile of 8k codes of b bits fills whole bytes: every tile starts on a byte
MAX_TILE = 256  # the pivot's position inside a tile travels as one uint8
ENTROPY_BINS = 16  # histogram bins of the tile entropy estimate
FIXED_ONE = 1 << 16  # entropy and log2 are compared as integers in units of 2**-16 bit


@dataclass(frozen=True)
class TahConfig:
    """TAH-Quant: tiles of `tile_size` channels of one token, each rotated by a Hadamard
    transform (after swapping its largest element, the pivot, to the front), then coded
    on its own symmetric grid with `min_bits`..`max_bits` bits chosen by the tile's
    entropy so that the codes average at most `bits` bits per element."""

    bits: Annotated[float, Field(ge=1, le=8, allow_inf_nan=False, description=(
        "the budget: average code bits per element, in [min_bits, max_bits] (the fp16 "
        "centre and scale, width and pivot of each tile travel beside the codes)"))] = 3.0
    tile_size: Annotated[int, Field(ge=MIN_TILE, le=MAX_TILE, description=(
        "channels per tile, a power of two; rows are zero-padded to a multiple"))] = 64
    min_bits: Bits = 2
    max_bits: Bits = 4
    hadamard: Annotated[bool, Field(description="rotate each tile by a Hadamard transform")] = True
    pivot_swap: Annotated[bool, Field(description=(
        "swap the tile's largest element to the front first (needs hadamard)"))] = True
    rounding: Annotated[Literal[ROUNDINGS], Field(description=(
        "the quantizer contract's rounding; 'stochastic' needs a generator"))] = "nearest"

    def __post_init__(self) -> None:
        check_fields(self)
        if self.min_bits > self.max_bits:
            raise ValueError(f"TahConfig.min_bits must be <= max_bits={self.max_bits}, "
                             f"got {self.min_bits}")
        if not self.min_bits <= self.bits <= self.max_bits:
            raise ValueError(f"TahConfig.bits must be in [min_bits={self.min_bits}, "
                             f"max_bits={self.max_bits}], got {self.bits}")
        if self.tile_size & (self.tile_size - 1):
            raise ValueError(f"TahConfig.tile_size must be a power of two (the Hadamard "
                             f"transform's size), got {self.tile_size}")
        if self.pivot_swap and not self.hadamard:
            raise ValueError("TahConfig.pivot_swap=True needs hadamard=True (the swap only "
                             "helps the transform), got hadamard=False")

    @property
    def stochastic(self) -> bool:
        return self.rounding == "stochastic"


class TahPacked(NamedTuple):
    """The wire of one tensor of T tiles (`tah_wire_spec` gives the shapes)."""

    codes: torch.Tensor  # uint8 (code_bits // 8,): tile t's codes, b_t bits each, in order
    centers: torch.Tensor  # fp16 (T,): middle of each tile's coefficient range
    scales: torch.Tensor  # fp16 (T,): half-width of each tile's grid around its centre
    bits: torch.Tensor  # uint8 (T,): code width b_t of each tile
    pivots: torch.Tensor  # uint8 (T,) position the pivot came from; (0,) without pivot_swap


def tile_count(shape: Sequence[int], cfg: TahConfig) -> int:
    """Tiles of a tensor of `shape`: ceil(D / tile_size) per row of the last dimension D,
    so no tile spans two tokens."""
    shape = tuple(int(d) for d in shape)
    if not shape or math.prod(shape) == 0:
        raise ValueError(f"x must have at least one dimension and one element, got shape {shape}")
    return math.prod(shape[:-1]) * -(-shape[-1] // cfg.tile_size)


def to_tiles(x: torch.Tensor, cfg: TahConfig) -> torch.Tensor:
    """x (..., D) as (T, G) tiles in x's dtype: a view when G divides D, else a copy with
    every row zero-padded to a multiple of G."""
    width, size = x.shape[-1], cfg.tile_size
    rows = x.reshape(-1, width)
    if width % size:
        rows = torch.nn.functional.pad(rows, (0, size - width % size))
    return rows.reshape(-1, size)


def from_tiles(tiles: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """The (T, G) tiles of a tensor of `shape` as that tensor, row padding dropped."""
    shape = tuple(int(d) for d in shape)
    rows = tiles.reshape(math.prod(shape[:-1]), -1)
    if rows.shape[1] != shape[-1]:
        rows = rows[:, : shape[-1]].contiguous()
    return rows.view(shape)


def code_bits(shape: Sequence[int], cfg: TahConfig) -> int:
    """Code bits of a tensor of `shape`: tile_size * floor(bits * T), exact (the budget's
    float taken at its exact value), so bits per element never exceed `cfg.bits`."""
    n_tiles = tile_count(shape, cfg)
    return cfg.tile_size * math.floor(Fraction(cfg.bits) * n_tiles)


def tah_wire_spec(shape: Sequence[int],
                  cfg: TahConfig) -> list[tuple[tuple[int, ...], torch.dtype]]:
    """[(shape, dtype)] of the TahPacked fields, in order, for a tensor of `shape`."""
    n_tiles = tile_count(shape, cfg)
    return [
        ((code_bits(shape, cfg) // 8,), torch.uint8),
        ((n_tiles,), torch.float16),
        ((n_tiles,), torch.float16),
        ((n_tiles,), torch.uint8),
        ((n_tiles if cfg.pivot_swap else 0,), torch.uint8),
    ]


def tah_wire_nbytes(shape: Sequence[int], cfg: TahConfig) -> int:
    """Exact bytes of the wire of a tensor of `shape`, whatever its values:
    code_bits / 8 + T * (2 + 2 + 1 (+ 1 with pivot_swap))."""
    return sum(math.prod(s) * torch.empty((), dtype=d).element_size()
               for s, d in tah_wire_spec(shape, cfg))


def entropy_table(tile_size: int, device=None) -> torch.Tensor:
    """(tile_size + 1,) int64: round(c * log2(c) * 2**16) for bin counts c = 0..tile_size
    (0 for c = 0, 1); the tile entropy estimate sums it (see tah_reference.tile_keys)."""
    values = [0] + [round(c * math.log2(c) * FIXED_ONE) for c in range(1, tile_size + 1)]
    return torch.tensor(values, dtype=torch.int64, device=device)


def gain_table(device=None) -> torch.Tensor:
    """(8,) int64: for b = 1..7 (index b; index 0 unused), round(log2(1/(2**b - 1)**2 -
    1/(2**(b+1) - 1)**2) * 2**16): log2 of how much one more bit shrinks the squared step
    of a grid of 2**b levels over a given range (tah_reference.allocate_bits)."""
    values = [0] + [round(math.log2((2**b - 1) ** -2 - (2 ** (b + 1) - 1) ** -2) * FIXED_ONE)
                    for b in range(1, 8)]
    return torch.tensor(values, dtype=torch.int64, device=device)
