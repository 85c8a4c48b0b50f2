"""Triton kernels of TAH-Quant (device code only; launched by
`aqsgd.quant.tah_triton_launch`, imported only when a call goes to Triton).

Each reproduces `aqsgd.quant.tah_reference` bit for bit with the rounding rules of
`aqsgd.quant.triton_kernels` (whose bf16 load/store and hash helpers it calls): a program
holds ROWS whole tiles as a (ROWS, G) block; `hadamard_kernel` (the transform alone),
`stats_kernel` (pivot, transform, fp16 centre and half-width, entropy key),
`encode_kernel` (the transform again, codes, packing per octet) and `decode_kernel`.
How each works: docs/architecture/quant.md, "The Triton kernels".
"""

from __future__ import annotations

import triton
import triton.language as tl

from aqsgd.quant.triton_kernels import _load_f32, _store_f32, _uniform

__all__ = ["decode_kernel", "encode_kernel", "hadamard_kernel", "stats_kernel"]


# ---------------------------------------------------------------------------
# Device helpers
# ---------------------------------------------------------------------------


@triton.jit
def _butterflies(v, ROWS: tl.constexpr, G: tl.constexpr, LOG_G: tl.constexpr):
    """Unnormalised Walsh-Hadamard transform of every row of v (ROWS, G)."""
    for level in tl.static_range(LOG_G):
        stride: tl.constexpr = 1 << level
        w = tl.reshape(v, (ROWS, G // (2 * stride), 2, stride))
        a, b = tl.split(tl.permute(w, (0, 1, 3, 2)))  # (ROWS, G / 2s, s) each
        w = tl.permute(tl.join(a + b, a - b), (0, 1, 3, 2))
        v = tl.reshape(w, (ROWS, G))
    return v


@triton.jit
def _swapped(col, pivot):
    """Column that trades places with `col` when column 0 and column `pivot` swap."""
    return tl.where(col == 0, pivot, tl.where(col == pivot, 0, col))


@triton.jit
def _levels(bits):
    """2**b - 1 as fp32 (exact), for int32 widths."""
    return ((1 << bits) - 1).to(tl.float32)


@triton.jit
def _load_tiles(x_ptr, row, col, mask, pivot, G: tl.constexpr, LOG_G: tl.constexpr,
                ROWS: tl.constexpr, NORM: tl.constexpr, HADAMARD: tl.constexpr,
                PIVOT: tl.constexpr, X_BF16: tl.constexpr):
    """The coefficients of the tiles: x with column 0 and column `pivot` swapped, then
    the orthonormal transform."""
    if PIVOT:
        src = _swapped(col, pivot)
    else:
        src = col
    v = _load_f32(x_ptr + row * G + src, mask, X_BF16)
    if HADAMARD:
        v = _butterflies(v, ROWS, G, LOG_G) * NORM
    return v


# ---------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------


@triton.jit
def hadamard_kernel(x_ptr, y_ptr, n_tiles, G: tl.constexpr, LOG_G: tl.constexpr,
                    ROWS: tl.constexpr, NORM: tl.constexpr, IDX64: tl.constexpr):
    """y (T, G) fp32 = the orthonormal Walsh-Hadamard transform of every row of x."""
    pid = tl.program_id(0)
    if IDX64:
        pid = pid.to(tl.int64)
    row = (pid * ROWS + tl.arange(0, ROWS))[:, None]  # (ROWS, 1)
    col = tl.arange(0, G)[None, :]  # (1, G)
    mask = (row < n_tiles) & (col < G)
    v = tl.load(x_ptr + row * G + col, mask=mask, other=0.0)
    tl.store(y_ptr + row * G + col, _butterflies(v, ROWS, G, LOG_G) * NORM, mask=mask)


@triton.jit
def stats_kernel(x_ptr, centre_ptr, scale_ptr, pivot_ptr, key_ptr, table_ptr, n_tiles,
                 G: tl.constexpr, LOG_G: tl.constexpr, ROWS: tl.constexpr,
                 NORM: tl.constexpr, BINS: tl.constexpr, HADAMARD: tl.constexpr,
                 PIVOT: tl.constexpr, X_BF16: tl.constexpr, IDX64: tl.constexpr):
    """Per tile: pivot position (uint8), fp16 centre and half-width, int64 entropy key."""
    pid = tl.program_id(0)
    if IDX64:
        pid = pid.to(tl.int64)
    tile = pid * ROWS + tl.arange(0, ROWS)  # (ROWS,)
    row = tile[:, None]
    col = tl.arange(0, G)[None, :]
    mask = (row < n_tiles) & (col < G)
    ok = tile < n_tiles
    pivot = col  # unread without PIVOT
    if PIVOT:
        raw = _load_f32(x_ptr + row * G + col, mask, X_BF16)
        where = tl.argmax(tl.abs(raw), axis=1, tie_break_left=True)  # (ROWS,)
        tl.store(pivot_ptr + tile, where.to(tl.uint8), mask=ok)
        pivot = where[:, None]
    y = _load_tiles(x_ptr, row, col, mask, pivot, G, LOG_G, ROWS, NORM, HADAMARD, PIVOT,
                    X_BF16)

    lo = tl.min(y, axis=1)
    hi = tl.max(y, axis=1)
    c16 = tl.minimum(tl.maximum((lo + hi) * 0.5, -65504.0), 65504.0).to(tl.float16)
    c = c16.to(tl.float32)
    stat = tl.maximum(hi - c, c - lo)
    s16 = tl.minimum(stat * 1.0009765625, 65504.0).to(tl.float16)  # 1 + 2**-10
    tl.store(centre_ptr + tile, c16, mask=ok)
    tl.store(scale_ptr + tile, s16, mask=ok)

    width = hi - lo  # >= +0
    safe = tl.where(width == 0.0, 1.0, width)
    inv = tl.where(width == 0.0, 0.0, tl.math.div_rn(tl.full(width.shape, BINS, tl.float32),
                                                     safe))
    scaled = (y - lo[:, None]) * inv[:, None]
    bins = tl.minimum(tl.maximum(scaled, 0.0), BINS - 1.0).to(tl.int32)  # >= 0: trunc = floor
    sum_clogc = tl.zeros((ROWS,), tl.int64)
    for k in tl.static_range(BINS):
        count = tl.sum((bins == k).to(tl.int32), axis=1)  # (ROWS,)
        sum_clogc += tl.load(table_ptr + count, mask=ok, other=0)
    log2_width = (width.to(tl.int32, bitcast=True) >> 7).to(tl.int64) - 127 * 65536
    tl.store(key_ptr + tile, G * log2_width - sum_clogc, mask=ok)


@triton.jit(do_not_specialize=["seed_mix"])
def encode_kernel(x_ptr, centre_ptr, scale_ptr, bits_ptr, pivot_ptr, offset_ptr, out_ptr,
                  n_tiles, seed_mix, G: tl.constexpr, LOG_G: tl.constexpr,
                  ROWS: tl.constexpr, NORM: tl.constexpr, HADAMARD: tl.constexpr,
                  PIVOT: tl.constexpr, STOCHASTIC: tl.constexpr, X_BF16: tl.constexpr,
                  IDX64: tl.constexpr):
    """Codes of every tile on its own grid, packed at the tile's byte offset."""
    pid = tl.program_id(0)
    if IDX64:
        pid = pid.to(tl.int64)
    tile = pid * ROWS + tl.arange(0, ROWS)  # (ROWS,)
    row = tile[:, None]
    col = tl.arange(0, G)[None, :]
    mask = (row < n_tiles) & (col < G)
    ok = tile < n_tiles
    pivot = col
    if PIVOT:
        pivot = tl.load(pivot_ptr + tile, mask=ok, other=0).to(tl.int32)[:, None]
    y = _load_tiles(x_ptr, row, col, mask, pivot, G, LOG_G, ROWS, NORM, HADAMARD, PIVOT,
                    X_BF16)

    bits = tl.load(bits_ptr + tile, mask=ok, other=1).to(tl.int32)  # (ROWS,)
    levels = _levels(bits)
    half = levels * 0.5
    s = tl.load(scale_ptr + tile, mask=ok, other=0.0).to(tl.float32)
    safe = tl.where(s == 0.0, 1.0, s)
    inv = tl.where(s == 0.0, 0.0, tl.math.div_rn(half, safe))
    c = tl.load(centre_ptr + tile, mask=ok, other=0.0).to(tl.float32)
    t = (y - c[:, None]) * inv[:, None] + half[:, None]  # two roundings (no FMA)
    if STOCHASTIC:
        t = t + _uniform(row * G + col, seed_mix.to(tl.uint32, bitcast=True))
    else:
        t = t + 0.5
    # clamp(floor(t), 0, L) == trunc(clamp(t, 0, L)) for an integer L
    codes = tl.minimum(tl.maximum(t, 0.0), levels[:, None]).to(tl.int32)
    codes = tl.where(mask, codes, 0)

    OCTETS: tl.constexpr = G // 8
    lane = tl.arange(0, 8)[None, None, :]  # (1, 1, 8)
    octet = tl.arange(0, OCTETS)[None, :, None]  # (1, OCTETS, 1)
    b3 = bits[:, None, None]  # (ROWS, 1, 1)
    c3 = tl.reshape(codes, (ROWS, OCTETS, 8))
    words = tl.sum(c3.to(tl.uint64) << (lane * b3).to(tl.uint64), axis=2)  # (ROWS, OCTETS)
    data = ((tl.expand_dims(words, 2) >> (lane * 8).to(tl.uint64)) & 0xFF).to(tl.uint8)
    start = tl.load(offset_ptr + tile, mask=ok, other=0)[:, None, None]
    keep = (tile[:, None, None] < n_tiles) & (lane < b3)  # an octet fills b bytes
    tl.store(out_ptr + start + octet * b3 + lane, data, mask=keep)


@triton.jit
def decode_kernel(codes_ptr, centre_ptr, scale_ptr, bits_ptr, pivot_ptr, offset_ptr, out_ptr,
                  n_tiles, G: tl.constexpr, LOG_G: tl.constexpr, ROWS: tl.constexpr,
                  NORM: tl.constexpr, HADAMARD: tl.constexpr, PIVOT: tl.constexpr,
                  OUT_BF16: tl.constexpr, IDX64: tl.constexpr):
    """Values of every tile: unpack, dequantize, inverse transform, swap back, store."""
    pid = tl.program_id(0)
    if IDX64:
        pid = pid.to(tl.int64)
    tile = pid * ROWS + tl.arange(0, ROWS)  # (ROWS,)
    ok = tile < n_tiles
    OCTETS: tl.constexpr = G // 8
    lane = tl.arange(0, 8)[None, None, :]
    octet = tl.arange(0, OCTETS)[None, :, None]
    bits = tl.load(bits_ptr + tile, mask=ok, other=1).to(tl.int32)
    b3 = bits[:, None, None]
    start = tl.load(offset_ptr + tile, mask=ok, other=0)[:, None, None]
    keep = (tile[:, None, None] < n_tiles) & (lane < b3)
    raw = tl.load(codes_ptr + start + octet * b3 + lane, mask=keep, other=0)  # bytes
    words = tl.sum(raw.to(tl.uint64) << (lane * 8).to(tl.uint64), axis=2)  # (ROWS, OCTETS)
    field = (1 << b3) - 1  # (ROWS, 1, 1)
    c3 = (tl.expand_dims(words, 2) >> (lane * b3).to(tl.uint64)) & field.to(tl.uint64)
    codes = tl.reshape(c3.to(tl.int32), (ROWS, G))

    half = _levels(bits) * 0.5
    s = tl.load(scale_ptr + tile, mask=ok, other=0.0).to(tl.float32)
    step = tl.math.div_rn(s, half)
    c = tl.load(centre_ptr + tile, mask=ok, other=0.0).to(tl.float32)
    v = (codes.to(tl.float32) - half[:, None]) * step[:, None] + c[:, None]
    if HADAMARD:
        v = _butterflies(v, ROWS, G, LOG_G) * NORM

    row = tile[:, None]
    col = tl.arange(0, G)[None, :]
    mask = (row < n_tiles) & (col < G)
    dst = col
    if PIVOT:
        pivot = tl.load(pivot_ptr + tile, mask=ok, other=0).to(tl.int32)[:, None]
        dst = _swapped(col, pivot)
    _store_f32(out_ptr + row * G + dst, v, mask, OUT_BF16)
