"""What TAH-Quant as published fixes before any arithmetic: the config, the layout of a
tensor's tokens and tiles, and the wire (aqsgd.quant.tahpub does the arithmetic).

    cfg = TahPubConfig(high_bits=4, low_bits=3, tile_size=64, high_share=0.8)
    lay = layout((8, 64, 128), cfg)     # 8 sequences of 64 tokens of 128 channels
    lay.low_tokens                      # 12 of each sequence's 64 get low_bits
    wire_spec((8, 64, 128), cfg)        # [(shape, dtype)] of TahPubPacked, worst case
    wire_nbytes((8, 64, 128), cfg)      # 36288: codes 31232, fp16s 4096, maps 192, pivots 768

A tensor (N, *S) is N sequences of L = prod(S[:-1]) tokens (1 when S is one-dimensional)
of D = S[-1] channels; each token's channels are cut into tiles of `tile_size`, the last
zero-padded. Only the pivot indices depend on the data (one per transformed tile): the
wire holds room for every tile's, as the published receive buffer does. Imports torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Annotated, NamedTuple

import torch
from pydantic import Field

from aqsgd.quant.bitpack import packed_nbytes
from aqsgd.quant.config import Bits
from aqsgd.quant.tah_config import MAX_TILE, MIN_TILE
from specfile.declared import check_fields

__all__ = ["Layout", "TahPubConfig", "TahPubPacked", "layout", "wire_nbytes", "wire_spec"]


@dataclass(frozen=True)
class TahPubConfig:
    """TAH-Quant as its authors' public code runs it (its defaults): each sequence's
    lowest-entropy tokens get `low_bits`, the rest `high_bits`; tiles whose largest
    magnitude is at least twice the second get the pivot swap and the Hadamard
    transform; every tile is coded from its minimum on 2**bits levels."""

    high_bits: Bits = 4
    low_bits: Bits = 3
    tile_size: Annotated[int, Field(ge=MIN_TILE, le=MAX_TILE, description=(
        "channels per tile, a power of two; rows are zero-padded to a multiple"))] = 64
    high_share: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False, description=(
        "share of each sequence's tokens coded with high_bits (the highest-entropy "
        "ones; the low count is floor(L x (1 - share)), the share read as written)"))] = 0.8

    def __post_init__(self) -> None:
        check_fields(self)
        if self.low_bits > self.high_bits:
            raise ValueError(f"TahPubConfig.low_bits must be <= high_bits={self.high_bits}, "
                             f"got {self.low_bits}")
        if self.tile_size & (self.tile_size - 1):
            raise ValueError(f"TahPubConfig.tile_size must be a power of two (the Hadamard "
                             f"transform's size), got {self.tile_size}")

    @property
    def pivot_bits(self) -> int:
        """Bits of a pivot index: log2(tile_size)."""
        return (self.tile_size - 1).bit_length()


class TahPubPacked(NamedTuple):
    """The wire of one tensor, in order (`wire_spec` gives the shapes); tokens reordered
    per sequence, low-width ones first, both groups in their original order."""

    codes_low: torch.Tensor  # uint8: low_bits codes of the low tokens' tiles
    codes_high: torch.Tensor  # uint8: high_bits codes of the high tokens' tiles
    zeros: torch.Tensor  # fp16 (T,): each tile's minimum, the code 0
    scales: torch.Tensor  # fp16 (T,): (max - min) / (2**bits - 1), one code step
    token_map: torch.Tensor  # uint8: 1 bit a token (N x L, original order), 1 = low width
    tile_map: torch.Tensor  # uint8: 1 bit a tile, 1 = pivot swap and Hadamard applied
    pivots: torch.Tensor  # uint8: pivot_bits a transformed tile, room for all T


class Layout(NamedTuple):
    """The tokens and tiles of a tensor (N, *S)."""

    seqs: int  # N
    tokens: int  # L, tokens per sequence
    width: int  # D, channels per token
    low_tokens: int  # of each sequence's L, coded with low_bits
    tiles_per_token: int

    @property
    def n_tiles(self) -> int:
        return self.seqs * self.tokens * self.tiles_per_token

    def codes(self, tokens: int, cfg: TahPubConfig) -> int:
        """Codes of `tokens` tokens of every sequence (padding included)."""
        return self.seqs * tokens * self.tiles_per_token * cfg.tile_size


def layout(shape: Sequence[int], cfg: TahPubConfig) -> Layout:
    """The Layout of a tensor of `shape` (N, *S), S at least one dimension."""
    shape = tuple(int(d) for d in shape)
    if len(shape) < 2 or math.prod(shape) == 0:
        raise ValueError(f"x must be (N, ..., D) with at least one element, got shape {shape}")
    tokens = math.prod(shape[1:-1])
    low = math.floor(tokens * (1 - Fraction(str(cfg.high_share))))
    return Layout(shape[0], tokens, shape[-1], low, -(-shape[-1] // cfg.tile_size))


def wire_spec(shape: Sequence[int], cfg: TahPubConfig) -> list[tuple[tuple[int, ...],
                                                                     torch.dtype]]:
    """[(shape, dtype)] of the TahPubPacked fields for a tensor of `shape`: exact but for
    the pivots, sized for every tile transformed (the published worst case)."""
    lay = layout(shape, cfg)
    n_tiles = lay.n_tiles
    return [
        ((packed_nbytes(lay.codes(lay.low_tokens, cfg), cfg.low_bits),), torch.uint8),
        ((packed_nbytes(lay.codes(lay.tokens - lay.low_tokens, cfg), cfg.high_bits),),
         torch.uint8),
        ((n_tiles,), torch.float16),
        ((n_tiles,), torch.float16),
        ((packed_nbytes(lay.seqs * lay.tokens, 1),), torch.uint8),
        ((packed_nbytes(n_tiles, 1),), torch.uint8),
        ((packed_nbytes(n_tiles, cfg.pivot_bits),), torch.uint8),
    ]


def wire_nbytes(shape: Sequence[int], cfg: TahPubConfig) -> int:
    """Bytes of the wire of a tensor of `shape`, whatever its values (worst case)."""
    return sum(math.prod(s) * torch.empty((), dtype=d).element_size()
               for s, d in wire_spec(shape, cfg))
