"""TAH-Quant (He et al., arXiv 2506.01352) as plain torch: the contract, written to be read.

    packed = quantize_packed(x, cfg, seed)               # x (..., D) -> TahPacked
    y = dequantize_packed(packed, x.shape, cfg, dtype)

and under them, per tile (T tiles of G = cfg.tile_size elements, v (T, G) fp32):
find_pivots, swap_pivots, hadamard, tile_grid, tile_keys, allocate_bits, quantize,
dequantize, pack, unpack. `seed` is what `aqsgd.quant.draw_seed` draws (unused under
round-to-nearest); the public calls in `aqsgd.quant.tah` check the arguments.
`aqsgd.quant.tah_torch` and the Triton kernels give the same bytes (tests/aqsgd/quant/
test_tah.py, test_tah_triton_kernels.py). Arithmetic as the quantizer contract
(docs/architecture/quant.md, "Quantizer"); the method and every choice the paper left open,
with its reason: docs/compressors.md, "TAH-Quant".
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from aqsgd.quant.config import FP16_MAX, SCALE_MARGIN
from aqsgd.quant.reference import uniform
from aqsgd.quant.tah_config import (
    ENTROPY_BINS,
    FIXED_ONE,
    TahConfig,
    TahPacked,
    code_bits,
    entropy_table,
    from_tiles,
    gain_table,
    to_tiles,
)

__all__ = [
    "allocate_bits",
    "dequantize",
    "dequantize_packed",
    "find_pivots",
    "hadamard",
    "pack",
    "quantize",
    "quantize_packed",
    "swap_pivots",
    "tile_grid",
    "tile_keys",
    "unpack",
]


def find_pivots(v: torch.Tensor) -> torch.Tensor:
    """(T,) int64: position of each tile's element of largest magnitude (first on ties)."""
    return v.abs().argmax(dim=1)


def swap_pivots(v: torch.Tensor, pivots: torch.Tensor) -> torch.Tensor:
    """A copy of v (T, G) with column 0 and column pivots[t] swapped in every row t; its
    own inverse."""
    out = v.clone()
    rows = torch.arange(v.shape[0], device=v.device)
    out[rows, 0] = v[rows, pivots]
    out[rows, pivots] = v[rows, 0]
    return out


def hadamard(v: torch.Tensor) -> torch.Tensor:
    """Orthonormal Walsh-Hadamard transform of every row of v (T, G), G a power of two:
    butterflies at strides 1, 2, ..., G/2, then times fp32(1/sqrt(G)). Its own inverse."""
    n_tiles, size = v.shape
    y = v
    stride = 1
    while stride < size:
        pairs = y.reshape(n_tiles, size // (2 * stride), 2, stride)  # (T, blocks, 2, stride)
        a, b = pairs[:, :, 0], pairs[:, :, 1]
        y = torch.stack([a + b, a - b], dim=2).reshape(n_tiles, size)
        stride *= 2
    return y * torch.tensor(1.0 / math.sqrt(size), dtype=torch.float32, device=v.device)


def tile_grid(y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each tile's (centre, half-width) as fp16 (T,): c16 = fp16 of (lo + hi) / 2 and
    s16 = max |y - c16| times the contract's margin, rounded to fp16 (never below)."""
    lo, hi = y.amin(dim=1), y.amax(dim=1)
    c16 = ((lo + hi) * 0.5).clamp(-FP16_MAX, FP16_MAX).to(torch.float16)
    c = c16.float()
    stat = torch.maximum(hi - c, c - lo)
    s16 = (stat * SCALE_MARGIN).clamp(max=FP16_MAX).to(torch.float16)
    return c16, s16


def tile_keys(y: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """(T,) int64: G times each tile's entropy per element at a common resolution, in
    units of 2**-16 bit, up to a constant shared by all tiles: G * log2(range) minus the
    sum over the 16 bins of c * log2(c). `table` is tah_config.entropy_table(G)."""
    size = y.shape[1]
    lo, hi = y.amin(dim=1), y.amax(dim=1)
    width = hi - lo  # >= +0
    nbins = torch.full_like(width, float(ENTROPY_BINS))
    inv = torch.where(width == 0, 0.0, nbins / width)  # tensor / tensor: one IEEE division
    bins = torch.floor((y - lo[:, None]) * inv[:, None]).clamp(0, ENTROPY_BINS - 1).long()
    counts = torch.zeros(y.shape[0], ENTROPY_BINS, dtype=torch.int64, device=y.device)
    counts.scatter_add_(1, bins, torch.ones_like(bins))
    sum_clogc = table[counts].sum(dim=1)
    # Mitchell's log2: the fp32 bits of a value >= 0 read as exponent.mantissa
    log2_width = (width.view(torch.int32).long() >> 7) - 127 * FIXED_ONE
    return size * log2_width - sum_clogc


def allocate_bits(keys: torch.Tensor, shape: Sequence[int], cfg: TahConfig) -> torch.Tensor:
    """(T,) uint8 widths: min_bits each, plus the budget's extra bits given to the (tile,
    step b -> b + 1) of largest gain G * (2 h_t + g(b)) = 2 keys_t + G * g(b), ties to the
    lower tile. Sum of widths * G == code_bits(shape, cfg) exactly. Shared by every
    backend (it is one small selection over T * (max_bits - min_bits) integers)."""
    n_tiles = keys.numel()
    levels = cfg.max_bits - cfg.min_bits
    extra = code_bits(shape, cfg) // cfg.tile_size - cfg.min_bits * n_tiles
    bits = torch.full((n_tiles,), cfg.min_bits, dtype=torch.int64, device=keys.device)
    if extra == 0:
        return bits.to(torch.uint8)
    n = n_tiles * levels
    if n >= 1 << 28:  # keeps the unique int64 keys below from overflowing
        raise ValueError(f"TAH-Quant allocates at most 2**28 (tile, level) pairs, got {n}")
    steps = gain_table(keys.device)[cfg.min_bits: cfg.max_bits]  # g(b), b = min..max-1
    worth = 2 * keys[:, None] + cfg.tile_size * steps  # (T, levels), falling along a row
    # unique keys: worth first, then the lower flat index (tile-major) wins a tie
    order = torch.arange(n, device=keys.device).view(n_tiles, levels)
    unique = worth * n + (n - 1 - order)
    threshold = unique.flatten().kthvalue(n - extra + 1).values  # the extra-th largest
    return (bits + (unique >= threshold).sum(dim=1)).to(torch.uint8)


def _levels(bits: torch.Tensor) -> torch.Tensor:
    """(T,) fp32: 2**b - 1 per tile."""
    return ((1 << bits.long()) - 1).float()


def quantize(y: torch.Tensor, c16: torch.Tensor, s16: torch.Tensor, bits: torch.Tensor,
             cfg: TahConfig, seed: int = 0) -> torch.Tensor:
    """(T, G) uint8 codes of the coefficients y on each tile's symmetric grid."""
    levels = _levels(bits)  # (T,)
    half = levels * 0.5
    s = s16.float()
    inv = torch.where(s == 0, 0.0, half / s)  # tensor / tensor: one IEEE division
    t = (y - c16.float()[:, None]) * inv[:, None] + half[:, None]
    u = uniform(seed, y.numel(), y.device).view(y.shape) if cfg.stochastic else 0.5
    r = torch.floor(t + u)
    return torch.minimum(r.clamp(min=0), levels[:, None]).to(torch.uint8)


def dequantize(codes: torch.Tensor, c16: torch.Tensor, s16: torch.Tensor,
               bits: torch.Tensor) -> torch.Tensor:
    """(T, G) fp32 coefficients: (code - h) * (s / h) + c."""
    half = _levels(bits) * 0.5
    step = s16.float() / half  # tensor / tensor
    return (codes.float() - half[:, None]) * step[:, None] + c16.float()[:, None]


def pack(codes: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    """The code stream: tile t's G codes of bits[t] bits each, bit j of a code at stream bit
    (its position) * bits[t] + j, tiles in order; stream bit i is bit i % 8 of byte i // 8."""
    width = int(bits.max())
    planes = (codes.long()[:, :, None] >> torch.arange(width, device=codes.device)) & 1
    used = torch.arange(width, device=codes.device) < bits.long()[:, None, None]  # (T, 1, W)
    stream = planes[used.expand_as(planes)]  # tile, code, bit: row-major order
    weights = 1 << torch.arange(8, device=codes.device)
    return (stream.view(-1, 8) * weights).sum(dim=1).to(torch.uint8)


def unpack(packed: torch.Tensor, bits: torch.Tensor, size: int) -> torch.Tensor:
    """(T, G) uint8 codes of a stream made by `pack`."""
    width = int(bits.max())
    stream = (packed.long()[:, None] >> torch.arange(8, device=packed.device)) & 1
    planes = torch.zeros(bits.numel(), size, width, dtype=torch.int64, device=packed.device)
    used = torch.arange(width, device=packed.device) < bits.long()[:, None, None]
    planes[used.expand_as(planes)] = stream.reshape(-1)
    weights = 1 << torch.arange(width, device=packed.device)
    return (planes * weights).sum(dim=2).to(torch.uint8)


def quantize_packed(x: torch.Tensor, cfg: TahConfig, seed: int = 0) -> TahPacked:
    """x (fp32/fp16/bf16, rows zero-padded to a multiple of tile_size) -> TahPacked."""
    v = to_tiles(x, cfg).float()  # (T, G)
    pivots = torch.zeros(0, dtype=torch.uint8, device=x.device)
    if cfg.pivot_swap:
        where = find_pivots(v)
        v = swap_pivots(v, where)
        pivots = where.to(torch.uint8)
    y = hadamard(v) if cfg.hadamard else v
    c16, s16 = tile_grid(y)
    keys = tile_keys(y, entropy_table(cfg.tile_size, x.device))
    bits = allocate_bits(keys, x.shape, cfg)
    codes = quantize(y, c16, s16, bits, cfg, seed)
    return TahPacked(pack(codes, bits), c16, s16, bits, pivots)


def dequantize_packed(packed: TahPacked, shape: Sequence[int], cfg: TahConfig,
                      dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """TahPacked -> values of `shape` in `dtype` (computed in fp32, rounded once)."""
    codes = unpack(packed.codes, packed.bits, cfg.tile_size)
    y = dequantize(codes, packed.centers, packed.scales, packed.bits)
    v = hadamard(y) if cfg.hadamard else y
    if cfg.pivot_swap:
        v = swap_pivots(v, packed.pivots.long())
    return from_tiles(v.to(dtype), shape)
