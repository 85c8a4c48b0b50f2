"""Triton kernels of the AQ-SGD / DirectQ quantizer (device code only; launched by
`aqsgd.quant.triton_launch`, which `aqsgd.quant` imports only when a call goes to Triton,
so importing `aqsgd` never imports Triton; the PTX audit of bench.micro.gpu_check
compiles them too).

Each kernel is mirrored by a function of `aqsgd.quant.reference` and gives its bytes:
fp32 arithmetic, fp16 scales, divisions by `tl.math.div_rn`, no fused multiply-add,
bf16 loads and stores written out by hand. The packing into octets, the passes over
memory and why each rule holds: docs/architecture/quant.md, "The Triton kernels".
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = [
    "col_finalize_kernel",
    "col_partial_kernel",
    "decode_flat_kernel",
    "decode_rows_kernel",
    "encode_flat_kernel",
    "encode_rows_kernel",
    "row_scales_kernel",
]


# ---------------------------------------------------------------------------
# Device helpers
# ---------------------------------------------------------------------------


@triton.jit
def _load_f32(ptrs, mask, IS_BF16: tl.constexpr):
    # bf16 tensors arrive as int16 views: widen the bits by hand (exact).
    raw = tl.load(ptrs, mask=mask, other=0)
    if IS_BF16:
        return (raw.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
    else:
        return raw.to(tl.float32)


@triton.jit
def _store_f32(ptrs, value, mask, IS_BF16: tl.constexpr):
    # fp32 -> the pointer's dtype with round-to-nearest-even, as torch's .to().
    if IS_BF16:
        b = value.to(tl.uint32, bitcast=True)
        rounded = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
        rounded = tl.where(value != value, 0x7FC0, rounded)  # NaN stays a quiet NaN
        tl.store(ptrs, rounded.to(tl.uint16).to(tl.int16, bitcast=True), mask=mask)
    else:
        tl.store(ptrs, value.to(ptrs.dtype.element_ty), mask=mask)


@triton.jit
def _uniform(idx, seed_mix):
    # u in [0, 1) from lowbias32 of (low 32 bits of the flat index) ^ seed_mix.
    h = idx.to(tl.uint32) ^ seed_mix
    h ^= h >> 16
    h *= 0x7FEB352D
    h ^= h >> 15
    h *= 0x846CA68B
    h ^= h >> 16
    return (h >> 8).to(tl.float32) * 5.9604644775390625e-08  # 2**-24


@triton.jit
def _scale_from_stat(stat, BITS: tl.constexpr, SYMMETRIC: tl.constexpr):
    """stat (fp32) -> (fp16 scale, fp32 inv, fp32 dequantization step)."""
    s16 = tl.minimum(stat * 1.0009765625, 65504.0).to(tl.float16)  # 1 + 2**-10
    s = s16.to(tl.float32)
    nonzero = s != 0.0
    safe = tl.where(nonzero, s, 1.0)
    if SYMMETRIC:
        half: tl.constexpr = ((1 << BITS) - 1) / 2
        inv = tl.math.div_rn(tl.full(s.shape, half, tl.float32), safe)
        step = tl.math.div_rn(s, tl.full(s.shape, half, tl.float32))
    else:
        q: tl.constexpr = 1 << (BITS - 1)
        inv = tl.math.div_rn(tl.full(s.shape, q, tl.float32), safe)
        step = s * (1.0 / q)  # exact: 1/q is a power of two and s is an fp16 value
    return s16, tl.where(nonzero, inv, 0.0), step


@triton.jit
def _step_from_scale(s16, BITS: tl.constexpr, SYMMETRIC: tl.constexpr):
    s = s16.to(tl.float32)
    if SYMMETRIC:
        half: tl.constexpr = ((1 << BITS) - 1) / 2
        return tl.math.div_rn(s, tl.full(s.shape, half, tl.float32))
    else:
        q: tl.constexpr = 1 << (BITS - 1)
        return s * (1.0 / q)


@triton.jit
def _floor_clamp(y, LO: tl.constexpr, HI: tl.constexpr):
    """clamp(floor(y), LO, HI) as int32, for integers LO < HI.

    Not tl.floor: on NVIDIA it lowers to cvt.rmi.ftz, which flushes a negative
    subnormal y to -0 (floor 0, where torch gives -1). Clamping first keeps y in
    [LO, HI + 1], where truncation toward zero and one correction are exact, and
    floor commutes with clamping to integer bounds.
    """
    y = tl.minimum(tl.maximum(y, LO * 1.0), HI + 1.0)
    i = y.to(tl.int32)  # truncates toward zero
    i = i - (i.to(tl.float32) > y).to(tl.int32)
    return tl.minimum(i, HI)


@triton.jit
def _quantize(v, inv, idx, seed_mix, BITS: tl.constexpr, SYMMETRIC: tl.constexpr,
              STOCHASTIC: tl.constexpr):
    """fp32 values and their inv -> unsigned codes (int32)."""
    if SYMMETRIC:
        half: tl.constexpr = ((1 << BITS) - 1) / 2
        t = v * inv + half  # two roundings, as torch (the launch disables FMA)
    else:
        t = v * inv
    if STOCHASTIC:
        y = t + _uniform(idx, seed_mix)
    else:
        y = t + 0.5
    if SYMMETRIC:
        return _floor_clamp(y, 0, (1 << BITS) - 1)
    else:
        return _floor_clamp(y, -(1 << (BITS - 1)), (1 << (BITS - 1)) - 1) + (1 << (BITS - 1))


@triton.jit
def _dequantize(codes, step, BITS: tl.constexpr, SYMMETRIC: tl.constexpr):
    if SYMMETRIC:
        half: tl.constexpr = ((1 << BITS) - 1) / 2
        return (codes.to(tl.float32) - half) * step
    else:
        return (codes - (1 << (BITS - 1))).to(tl.float32) * step


@triton.jit
def _octet_words(codes, lane, BITS: tl.constexpr, AXIS: tl.constexpr):
    # codes (..., 8) int32, lane (..., 8) = 0..7 on axis AXIS -> (...) uint64 stream words
    return tl.sum(codes.to(tl.uint64) << (lane * BITS).to(tl.uint64), axis=AXIS)


@triton.jit
def _word_bytes(words, lane, AXIS: tl.constexpr):
    # words (...) uint64 -> (..., 8) uint8 on axis AXIS, little-endian
    return ((tl.expand_dims(words, AXIS) >> (lane * 8).to(tl.uint64)) & 0xFF).to(tl.uint8)


# ---------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------


@triton.jit(do_not_specialize=["seed_mix"])
def encode_rows_kernel(
    x_ptr, m_ptr, scale_ptr, inv_ptr, step_ptr, out_ptr, n_rows, span, seed_mix,
    BITS: tl.constexpr, SYMMETRIC: tl.constexpr, STOCHASTIC: tl.constexpr, L2: tl.constexpr,
    COL_SCALES: tl.constexpr, HAS_M: tl.constexpr, X_BF16: tl.constexpr, M_BF16: tl.constexpr,
    ROWS: tl.constexpr, OCTETS: tl.constexpr, IDX64: tl.constexpr,
):
    """Whole rows of a (rows, span) view; rows pack to whole bytes (span * BITS % 8 == 0).

    COL_SCALES False (token/group): one pass: row statistic, fp16 scale, quantize, pack,
    m update. COL_SCALES True (channel, second pass): inv/step per column come from the
    statistics pass, loaded once per program; no integer division per element.
    """
    pid = tl.program_id(0)
    if IDX64:
        pid = pid.to(tl.int64)
    row = (pid * ROWS + tl.arange(0, ROWS))[:, None, None]  # (ROWS, 1, 1)
    octet = tl.arange(0, OCTETS)[None, :, None]  # (1, OCTETS, 1)
    lane = tl.arange(0, 8)[None, None, :]  # (1, 1, 8)
    col = octet * 8 + lane  # (1, OCTETS, 8): position inside the row
    mask = (row < n_rows) & (col < span)
    idx = row * span + col  # (ROWS, OCTETS, 8) flat element index

    v = _load_f32(x_ptr + idx, mask, X_BF16)
    if HAS_M:
        mv = _load_f32(m_ptr + idx, mask, M_BF16)
        v = v - mv
    if COL_SCALES:
        inv = tl.load(inv_ptr + col, mask=col < span, other=0.0)  # (1, OCTETS, 8)
        step = tl.load(step_ptr + col, mask=col < span, other=0.0)
    else:
        if L2:
            sq = tl.sum(tl.sum(v * v, axis=2), axis=1)  # (ROWS,)
            stat = 2.0 * tl.sqrt_rn(tl.math.div_rn(sq, tl.full(sq.shape, span, tl.float32)))
        else:
            stat = tl.max(tl.max(tl.abs(v), axis=2), axis=1)  # (ROWS,)
        s16, inv_r, step_r = _scale_from_stat(stat, BITS, SYMMETRIC)
        row1 = pid * ROWS + tl.arange(0, ROWS)
        tl.store(scale_ptr + row1, s16, mask=row1 < n_rows)
        inv = inv_r[:, None, None]  # (ROWS, 1, 1)
        step = step_r[:, None, None]

    seed_u = seed_mix.to(tl.uint32, bitcast=True)
    codes = _quantize(v, inv, idx, seed_u, BITS, SYMMETRIC, STOCHASTIC)
    codes = tl.where(mask, codes, 0)
    if HAS_M:
        deq = _dequantize(codes, step, BITS, SYMMETRIC)
        _store_f32(m_ptr + idx, mv + deq, mask, M_BF16)

    words = _octet_words(codes, lane, BITS, 2)  # (ROWS, OCTETS)
    data = _word_bytes(words, lane, 2)  # (ROWS, OCTETS, 8), lane = byte within the octet
    byte = row * (span * BITS // 8) + octet * BITS + lane
    # byte `lane` of an octet exists when it holds bits of a code inside the row
    keep = (row < n_rows) & (lane < BITS) & (octet * (8 * BITS) + lane * 8 < span * BITS)
    tl.store(out_ptr + byte, data, mask=keep)


@triton.jit
def _accumulate_stat(acc, x_ptr, m_ptr, idx, mask, L2: tl.constexpr, HAS_M: tl.constexpr,
                     X_BF16: tl.constexpr, M_BF16: tl.constexpr):
    """acc folded with one tile of v = x (- m) in fp32: max|v| or, for L2, sum v*v."""
    v = _load_f32(x_ptr + idx, mask, X_BF16)
    if HAS_M:
        v = v - _load_f32(m_ptr + idx, mask, M_BF16)
    if L2:
        acc += v * v
    else:
        acc = tl.maximum(acc, tl.abs(v))
    return acc


@triton.jit
def row_scales_kernel(
    x_ptr, m_ptr, scale_ptr, inv_ptr, step_ptr, n_rows, span,
    BITS: tl.constexpr, SYMMETRIC: tl.constexpr, L2: tl.constexpr,
    HAS_M: tl.constexpr, X_BF16: tl.constexpr, M_BF16: tl.constexpr,
    ROWS: tl.constexpr, COLS: tl.constexpr, IDX64: tl.constexpr,
):
    """Token/group scales when the one-pass kernel does not apply: loop over columns."""
    pid = tl.program_id(0)
    if IDX64:
        pid = pid.to(tl.int64)
    row = pid * ROWS + tl.arange(0, ROWS)  # (ROWS,)
    acc = tl.zeros((ROWS, COLS), tl.float32)
    for c0 in range(0, span, COLS):
        col = c0 + tl.arange(0, COLS)[None, :]
        mask = (row[:, None] < n_rows) & (col < span)
        idx = row[:, None] * span + col
        acc = _accumulate_stat(acc, x_ptr, m_ptr, idx, mask, L2, HAS_M, X_BF16, M_BF16)
    if L2:
        sq = tl.sum(acc, axis=1)
        stat = 2.0 * tl.sqrt_rn(tl.math.div_rn(sq, tl.full(sq.shape, span, tl.float32)))
    else:
        stat = tl.max(acc, axis=1)
    s16, inv, step = _scale_from_stat(stat, BITS, SYMMETRIC)
    ok = row < n_rows
    tl.store(scale_ptr + row, s16, mask=ok)
    tl.store(inv_ptr + row, inv, mask=ok)
    tl.store(step_ptr + row, step, mask=ok)


@triton.jit
def col_partial_kernel(
    x_ptr, m_ptr, part_ptr, n_rows, n_cols, rows_per_prog,
    L2: tl.constexpr, HAS_M: tl.constexpr, X_BF16: tl.constexpr, M_BF16: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, IDX64: tl.constexpr,
):
    """Partial column max|v| (or sum v*v) of one row block -> part[row_block, col]."""
    rb = tl.program_id(0)
    cb = tl.program_id(1)
    if IDX64:
        rb = rb.to(tl.int64)
    col = cb * BLOCK_C + tl.arange(0, BLOCK_C)  # (BLOCK_C,)
    r_start = rb * rows_per_prog
    r_end = tl.minimum(r_start + rows_per_prog, n_rows)
    acc = tl.zeros((BLOCK_R, BLOCK_C), tl.float32)
    for r0 in range(r_start, r_end, BLOCK_R):
        row = r0 + tl.arange(0, BLOCK_R)[:, None]
        mask = (row < r_end) & (col[None, :] < n_cols)
        idx = row * n_cols + col[None, :]
        acc = _accumulate_stat(acc, x_ptr, m_ptr, idx, mask, L2, HAS_M, X_BF16, M_BF16)
    if L2:
        part = tl.sum(acc, axis=0)
    else:
        part = tl.max(acc, axis=0)
    tl.store(part_ptr + rb * n_cols + col, part, mask=col < n_cols)


@triton.jit
def col_finalize_kernel(
    part_ptr, scale_ptr, inv_ptr, step_ptr, n_blocks, n_rows, n_cols,
    BITS: tl.constexpr, SYMMETRIC: tl.constexpr, L2: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """Reduce the partial statistics in row-block order (deterministic) -> scales."""
    col = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    ok = col < n_cols
    acc = tl.zeros((BLOCK_C,), tl.float32)
    for b in range(0, n_blocks):
        part = tl.load(part_ptr + b * n_cols + col, mask=ok, other=0.0)
        if L2:
            acc += part
        else:
            acc = tl.maximum(acc, part)
    if L2:
        stat = 2.0 * tl.sqrt_rn(tl.math.div_rn(acc, tl.full(acc.shape, n_rows, tl.float32)))
    else:
        stat = acc
    s16, inv, step = _scale_from_stat(stat, BITS, SYMMETRIC)
    tl.store(scale_ptr + col, s16, mask=ok)
    tl.store(inv_ptr + col, inv, mask=ok)
    tl.store(step_ptr + col, step, mask=ok)


@triton.jit(do_not_specialize=["seed_mix"])
def encode_flat_kernel(
    x_ptr, m_ptr, inv_ptr, step_ptr, out_ptr, n, n_bytes, span, seed_mix,
    BY_ROW: tl.constexpr, BITS: tl.constexpr, SYMMETRIC: tl.constexpr,
    STOCHASTIC: tl.constexpr, HAS_M: tl.constexpr, X_BF16: tl.constexpr,
    M_BF16: tl.constexpr, OCTETS: tl.constexpr, IDX64: tl.constexpr,
):
    """Quantize + pack octets of the flat stream with precomputed per-scale inv/step."""
    pid = tl.program_id(0)
    if IDX64:
        pid = pid.to(tl.int64)
    octet = (pid * OCTETS + tl.arange(0, OCTETS))[:, None]  # (OCTETS, 1)
    lane = tl.arange(0, 8)[None, :]  # (1, 8)
    idx = octet * 8 + lane  # (OCTETS, 8)
    mask = idx < n
    v = _load_f32(x_ptr + idx, mask, X_BF16)
    if HAS_M:
        mv = _load_f32(m_ptr + idx, mask, M_BF16)
        v = v - mv
    if BY_ROW:
        sidx = idx // span
    else:
        sidx = idx % span
    inv = tl.load(inv_ptr + sidx, mask=mask, other=0.0)
    codes = _quantize(v, inv, idx, seed_mix.to(tl.uint32, bitcast=True), BITS, SYMMETRIC,
                      STOCHASTIC)
    codes = tl.where(mask, codes, 0)
    if HAS_M:
        step = tl.load(step_ptr + sidx, mask=mask, other=0.0)
        _store_f32(m_ptr + idx, mv + _dequantize(codes, step, BITS, SYMMETRIC), mask, M_BF16)
    data = _word_bytes(_octet_words(codes, lane, BITS, 1), lane, 1)  # (OCTETS, 8)
    byte = octet * BITS + lane
    tl.store(out_ptr + byte, data, mask=(lane < BITS) & (byte < n_bytes))


@triton.jit
def decode_rows_kernel(
    packed_ptr, scale_ptr, out_ptr, n_rows, span,
    BITS: tl.constexpr, SYMMETRIC: tl.constexpr, COL_SCALES: tl.constexpr,
    ACCUMULATE: tl.constexpr, OUT_BF16: tl.constexpr,
    ROWS: tl.constexpr, OCTETS: tl.constexpr, IDX64: tl.constexpr,
):
    """Unpack + dequantize whole rows (span * BITS % 8 == 0): the scale and its step are
    loaded once per row (token/group) or once per program (channel columns)."""
    pid = tl.program_id(0)
    if IDX64:
        pid = pid.to(tl.int64)
    row1 = pid * ROWS + tl.arange(0, ROWS)  # (ROWS,)
    row = row1[:, None, None]  # (ROWS, 1, 1)
    octet = tl.arange(0, OCTETS)[None, :, None]  # (1, OCTETS, 1)
    lane = tl.arange(0, 8)[None, None, :]  # (1, 1, 8)
    byte = row * (span * BITS // 8) + octet * BITS + lane
    keep = (row < n_rows) & (lane < BITS) & (octet * (8 * BITS) + lane * 8 < span * BITS)
    raw = tl.load(packed_ptr + byte, mask=keep, other=0)  # (ROWS, OCTETS, 8) bytes
    words = tl.sum(raw.to(tl.uint64) << (lane * 8).to(tl.uint64), axis=2)  # (ROWS, OCTETS)
    codes = ((tl.expand_dims(words, 2) >> (lane * BITS).to(tl.uint64))
             & ((1 << BITS) - 1)).to(tl.int32)  # (ROWS, OCTETS, 8), lane = code in octet
    col = octet * 8 + lane
    mask = (row < n_rows) & (col < span)
    idx = row * span + col
    if COL_SCALES:
        step = _step_from_scale(tl.load(scale_ptr + col, mask=col < span, other=0.0),
                                BITS, SYMMETRIC)  # (1, OCTETS, 8)
    else:
        s16 = tl.load(scale_ptr + row1, mask=row1 < n_rows, other=0.0)
        step = _step_from_scale(s16, BITS, SYMMETRIC)[:, None, None]  # (ROWS, 1, 1)
    value = _dequantize(codes, step, BITS, SYMMETRIC)
    if ACCUMULATE:
        value = _load_f32(out_ptr + idx, mask, OUT_BF16) + value
    _store_f32(out_ptr + idx, value, mask, OUT_BF16)


@triton.jit
def decode_flat_kernel(
    packed_ptr, scale_ptr, out_ptr, n, n_bytes, span,
    BY_ROW: tl.constexpr, BITS: tl.constexpr, SYMMETRIC: tl.constexpr,
    ACCUMULATE: tl.constexpr, OUT_BF16: tl.constexpr, OCTETS: tl.constexpr,
    IDX64: tl.constexpr,
):
    """Unpack + dequantize: out = deQ (ACCUMULATE: out += deQ, in out's dtype)."""
    pid = tl.program_id(0)
    if IDX64:
        pid = pid.to(tl.int64)
    octet = (pid * OCTETS + tl.arange(0, OCTETS))[:, None]  # (OCTETS, 1)
    lane = tl.arange(0, 8)[None, :]  # (1, 8)
    byte = octet * BITS + lane
    raw = tl.load(packed_ptr + byte, mask=(lane < BITS) & (byte < n_bytes), other=0)
    words = tl.sum(raw.to(tl.uint64) << (lane * 8).to(tl.uint64), axis=1)  # (OCTETS,)
    codes = ((words[:, None] >> (lane * BITS).to(tl.uint64)) & ((1 << BITS) - 1)).to(tl.int32)
    idx = octet * 8 + lane  # (OCTETS, 8)
    mask = idx < n
    if BY_ROW:
        sidx = idx // span
    else:
        sidx = idx % span
    s16 = tl.load(scale_ptr + sidx, mask=mask, other=0.0)
    value = _dequantize(codes, _step_from_scale(s16, BITS, SYMMETRIC), BITS, SYMMETRIC)
    if ACCUMULATE:
        value = _load_f32(out_ptr + idx, mask, OUT_BF16) + value
    _store_f32(out_ptr + idx, value, mask, OUT_BF16)
