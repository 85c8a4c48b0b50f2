"""TAH-Quant as its authors' public code runs it, in plain torch (CPU or CUDA; no kernel):

    cfg = TahPubConfig()                       # high 4 bits, low 3, tiles of 64, share 0.8
    packed = quantize(x, cfg)                  # x (N, *S) -> TahPubPacked
    y = dequantize(packed, x.shape, cfg)       # fp32 (N, *S)

and under them, each one step: token_entropy, token_map, token_order (per-token widths),
transform_map, transform, untransform (pivot swap and Hadamard on some tiles),
tile_affine, quantize_tiles, dequantize_tiles (asymmetric from the tile's minimum).
Rounding is to nearest, ties to even (torch.round), as the published code rounds. The
layout and the wire: aqsgd.quant.tahpub_config. The suite's own reading of the paper is
aqsgd.quant.tah; how the two differ and why: docs/tahquant-pub.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from aqsgd.quant.backends import check_part
from aqsgd.quant.bitpack import pack, unpack
from aqsgd.quant.config import FP16_MAX
from aqsgd.quant.tah_config import from_tiles, to_tiles
from aqsgd.quant.tah_reference import find_pivots, hadamard, swap_pivots
from aqsgd.quant.tahpub_config import TahPubConfig, TahPubPacked, layout, wire_spec

__all__ = ["EPS", "dequantize", "dequantize_tiles", "quantize", "quantize_tiles",
           "tile_affine", "token_entropy", "token_map", "token_order", "transform",
           "transform_map", "untransform"]

EPS = 1e-30  # the published code's guard against 0 / 0 and log(0)


def token_entropy(x: torch.Tensor) -> torch.Tensor:
    """(N, L) fp32: the entropy (nats) of each token's magnitudes normalised to sum 1
    over its D channels; x (N, L, D)."""
    a = x.float().abs()
    p = a / (a.sum(dim=-1, keepdim=True) + EPS)
    return -(p * (p + EPS).log()).sum(dim=-1)


def token_map(entropy: torch.Tensor, low_tokens: int) -> torch.Tensor:
    """(N, L) bool, True for the `low_tokens` tokens of lowest entropy in each sequence
    (ties to the earlier token): those get low_bits."""
    lowest = torch.argsort(entropy, dim=1, stable=True)[:, :low_tokens]
    low = torch.zeros(entropy.shape, dtype=torch.bool, device=entropy.device)
    return low.scatter_(1, lowest, True)


def token_order(low: torch.Tensor) -> torch.Tensor:
    """(N, L) int64: the positions of each sequence's tokens as they travel, low-width
    tokens first, each group in its original order."""
    return torch.argsort((~low).to(torch.int32), dim=1, stable=True)


def transform_map(tiles: torch.Tensor) -> torch.Tensor:
    """(T,) bool: the tiles (T, G) whose largest magnitude is at least twice the second
    (an all-zero tile counts: 0 >= 2 x 0, as published)."""
    size = tiles.abs()
    first, where = size.max(dim=1)  # (T,): topk(2) is 3x slower on CPU
    second = size.scatter(1, where[:, None], -1.0).amax(dim=1)  # a tie counts as second
    return first >= 2 * second


def transform(tiles: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(tiles with each `mask` tile's largest element swapped to the front and the tile
    Hadamard transformed, the pivots' positions (k,) int64 in tile order)."""
    chosen = tiles[mask]  # (k, G)
    pivots = find_pivots(chosen)
    out = tiles.clone()
    out[mask] = hadamard(swap_pivots(chosen, pivots))
    return out, pivots


def untransform(tiles: torch.Tensor, mask: torch.Tensor, pivots: torch.Tensor) -> torch.Tensor:
    """`transform` undone: the Hadamard transform (its own inverse), then the swap."""
    out = tiles.clone()
    out[mask] = swap_pivots(hadamard(tiles[mask]), pivots)
    return out


def tile_affine(tiles: torch.Tensor, bits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each tile's (zero point, scale) as fp16 (T,): its minimum, and (max - min) /
    (2**bits - 1) with `bits` (T,) the tile's width; within fp16's finite range."""
    lo, hi = tiles.amin(dim=1), tiles.amax(dim=1)
    levels = ((1 << bits.long()) - 1).float()
    zero16 = lo.clamp(-FP16_MAX, FP16_MAX).to(torch.float16)
    scale16 = ((hi - lo) / levels).clamp(max=FP16_MAX).to(torch.float16)
    return zero16, scale16


def quantize_tiles(tiles: torch.Tensor, zero16: torch.Tensor, scale16: torch.Tensor,
                   bits: torch.Tensor) -> torch.Tensor:
    """uint8 codes (T, G): round((v - zero) / scale) within 0..2**bits - 1, against the
    fp16 zero point and scale the receiver gets; a tile of scale 0 codes 0."""
    zero, scale = zero16.float()[:, None], scale16.float()[:, None]
    steps = torch.where(scale > 0, (tiles - zero) / scale.where(scale > 0, 1.0), 0.0)
    top = ((1 << bits.long()) - 1).float()[:, None]
    return torch.round(steps).clamp(min=0).minimum(top).to(torch.uint8)


def dequantize_tiles(codes: torch.Tensor, zero16: torch.Tensor,
                     scale16: torch.Tensor) -> torch.Tensor:
    """fp32 (T, G): code x scale + zero."""
    return codes.float() * scale16.float()[:, None] + zero16.float()[:, None]


def _sequences(shape: Sequence[int], cfg: TahPubConfig):
    lay = layout(shape, cfg)
    return lay, (lay.seqs, lay.tokens, lay.width)


def quantize(x: torch.Tensor, cfg: TahPubConfig) -> TahPubPacked:
    """x (N, *S) (fp32/fp16/bf16) -> TahPubPacked, its parts as `wire_spec` says."""
    lay, seq_shape = _sequences(x.shape, cfg)
    x = x.float().reshape(seq_shape)  # (N, L, D)
    low = token_map(token_entropy(x), lay.low_tokens)  # (N, L)
    order = token_order(low)
    moved = x.gather(1, order[:, :, None].expand(seq_shape))  # (N, L, D), low tokens first
    tiles = to_tiles(moved, cfg)  # (T, G), T = N x L x tiles_per_token
    mask = transform_map(tiles)
    tiles, pivots = transform(tiles, mask)
    token_bits = torch.full((lay.seqs, lay.tokens, lay.tiles_per_token), cfg.high_bits,
                            dtype=torch.uint8, device=x.device)
    token_bits[:, : lay.low_tokens] = cfg.low_bits
    bits = token_bits.reshape(-1)  # (T,)
    zero16, scale16 = tile_affine(tiles, bits)
    codes = quantize_tiles(tiles, zero16, scale16, bits)
    codes = codes.reshape(lay.seqs, lay.tokens, -1)  # (N, L, tiles_per_token x G)
    room = torch.zeros(lay.n_tiles, dtype=torch.uint8, device=x.device)
    room[: pivots.numel()] = pivots.to(torch.uint8)
    return TahPubPacked(pack(codes[:, : lay.low_tokens], cfg.low_bits),
                        pack(codes[:, lay.low_tokens:], cfg.high_bits), zero16, scale16,
                        pack(low.to(torch.uint8), 1), pack(mask.to(torch.uint8), 1),
                        pack(room, cfg.pivot_bits))


def dequantize(packed: TahPubPacked, shape: Sequence[int], cfg: TahPubConfig) -> torch.Tensor:
    """TahPubPacked of a tensor of `shape` -> its values, fp32."""
    lay, seq_shape = _sequences(shape, cfg)
    packed = TahPubPacked(*packed)
    device = packed.zeros.device
    for name, part, (want, dtype) in zip(TahPubPacked._fields, packed,
                                         wire_spec(shape, cfg), strict=True):
        check_part(part, name, want, dtype, device, f" for shape {tuple(shape)}")
    per_token = lay.tiles_per_token * cfg.tile_size
    n_low, n_high = lay.codes(lay.low_tokens, cfg), lay.codes(lay.tokens - lay.low_tokens, cfg)
    codes = torch.cat([
        unpack(packed.codes_low, cfg.low_bits, n_low).reshape(lay.seqs, -1, per_token),
        unpack(packed.codes_high, cfg.high_bits, n_high).reshape(lay.seqs, -1, per_token),
    ], dim=1).reshape(-1, cfg.tile_size)  # (T, G)
    tiles = dequantize_tiles(codes, packed.zeros, packed.scales)
    mask = unpack(packed.tile_map, 1, lay.n_tiles).bool()
    pivots = unpack(packed.pivots, cfg.pivot_bits, lay.n_tiles)[: int(mask.sum())].long()
    tiles = untransform(tiles, mask, pivots)
    low = unpack(packed.token_map, 1, lay.seqs * lay.tokens).bool().reshape(seq_shape[:2])
    order = token_order(low)
    moved = from_tiles(tiles, seq_shape)  # (N, L, D), low tokens first
    out = torch.empty_like(moved).scatter_(1, order[:, :, None].expand(seq_shape), moved)
    return out.reshape(tuple(shape))
