"""The quantizer's torch path: chunked, in place; bit for bit the reference.

`backend="torch"` runs it, and "auto" where the fused kernels (`aqsgd.quant.fused`)
cannot be built or on CUDA without Triton; the four calls have the signatures of
`aqsgd.quant.reference`, arguments already checked and the seed already drawn:

    packed, scales = quantize_packed(x, cfg, seed)
    y = dequantize_packed(packed, scales, shape, cfg, dtype)
    packed, scales = aqsgd_encode(x, m, cfg, seed)      # m += deQ in place
    aqsgd_decode(packed, scales, m, cfg)                # m += deQ in place

Each chunk of rows holds whole octets of codes, so its bytes start on a byte of the
stream (the chunked unpacking is `aqsgd.quant.cpu_unpack`). Why it stays beside the fused
path, measured, and how it is fast: docs/architecture/quant.md, "Quantizer".
"""

from __future__ import annotations

import math

import torch

from aqsgd.quant.bitpack import (
    BYTE_WIDTHS,
    lane_views,
    pack_into,
    pack_lanes,
    packed_nbytes,
    padded_bytes,
)
from aqsgd.quant.config import (
    FP16_MAX,
    GOLDEN32,
    SCALE_DTYPE,
    SCALE_MARGIN,
    QuantConfig,
    scale_shape,
)
from aqsgd.quant.cpu_unpack import chunk_levels, levels_of, pair_values

__all__ = ["aqsgd_decode", "aqsgd_encode", "dequantize_packed", "quantize_packed"]

CHUNK_ELEMENTS = 1 << 17  # 512 KiB of fp32 per chunk: a chain of in-place passes stays in L2
INT_CLAMP_MIN_ELEMENTS = 1 << 15  # smaller tensors clamp levels in fp32 (_levels_fit)


# ---------------------------------------------------------------------------
# Views and chunks
# ---------------------------------------------------------------------------


def _rows(x: torch.Tensor, cfg: QuantConfig) -> tuple[torch.Tensor, int]:
    """2-D view whose scale groups are columns (channel: (N, D), reduce dim 0) or rows
    (token: (R, D); group: (numel // G, G); reduce dim 1), in flat row-major order."""
    if cfg.granularity == "channel":
        return x.reshape(-1, x.shape[-1]), 0
    span = x.shape[-1] if cfg.granularity == "token" else cfg.group_size
    return x.reshape(-1, span), 1


def _rows_per_chunk_of(shape: tuple[int, int], device: torch.device) -> int:
    """Rows per chunk of a (R, C) view: about CHUNK_ELEMENTS elements, a multiple of 8,
    on CPU; everything at once on a GPU, where chunks would only add kernel launches."""
    if device.type != "cpu":
        return max(1, shape[0])
    align = 8 // math.gcd(shape[1], 8)  # chunks of whole octets of elements
    per = max(1, CHUNK_ELEMENTS // max(1, shape[1]))
    return max(align, per - per % align)


def _rows_per_chunk(rows: torch.Tensor) -> int:
    return _rows_per_chunk_of(tuple(rows.shape), rows.device)


def _row_ranges_of(shape: tuple[int, int], device: torch.device):
    """(r0, r1) over the row chunks of a (R, C) view."""
    per = _rows_per_chunk_of(shape, device)
    for r0 in range(0, shape[0], per):
        yield r0, min(r0 + per, shape[0])


def _row_ranges(rows: torch.Tensor):
    return _row_ranges_of(tuple(rows.shape), rows.device)


# ---------------------------------------------------------------------------
# Scales
# ---------------------------------------------------------------------------


def _statistic(rows: torch.Tensor, dim: int, cfg: QuantConfig, chunk_of=None) -> torch.Tensor:
    """fp32 max |v| or 2 * sqrt(mean(v * v)) over `dim` of the (R, C) view; `chunk_of(r0,
    r1)`, when given, computes rows r0:r1 of the values (max-abs only)."""
    if cfg.scale_method == "l2":
        v = rows.float()
        return (v * v).mean(dim).sqrt_().mul_(2.0)
    # max and -min in the input dtype are exact and cheaper than abs() then max; chunks of
    # rows keep the second reduction's reads in cache
    ranges = list(_row_ranges(rows))
    dtype = rows.dtype if chunk_of is None else torch.float32
    if dim == 1:  # one (max, min) per row
        high = torch.empty(rows.shape[0], dtype=dtype, device=rows.device)
        low = torch.empty_like(high)
    else:  # one (max, min) row per chunk, reduced at the end
        high = torch.empty((len(ranges), rows.shape[1]), dtype=dtype, device=rows.device)
        low = torch.empty_like(high)
    per = ranges[0][1]
    # views made in one call each, not sliced per chunk
    if len(ranges) == 1:
        highs, lows = (high,), (low,)
        if dim == 0:
            highs, lows = (high[0],), (low[0],)
        chunks = (rows,) if chunk_of is None else (chunk_of(0, rows.shape[0]),)
    else:
        highs, lows = (high.split(per), low.split(per)) if dim == 1 else (high.unbind(),
                                                                          low.unbind())
        chunks = rows.split(per) if chunk_of is None else (chunk_of(r0, r1) for r0, r1 in ranges)
    for chunk, high_k, low_k in zip(chunks, highs, lows, strict=True):
        torch.amax(chunk, dim, out=high_k)
        torch.amin(chunk, dim, out=low_k)
    if dim == 0:
        high, low = (high[0], low[0]) if len(ranges) == 1 else (high.amax(0), low.amin(0))
    # max(0, -0) may be -0: the contract's max |v| is +0
    return torch.maximum(high, low.neg_()).float().abs_()


def _scales_from_stat(stat: torch.Tensor) -> torch.Tensor:
    return stat.mul_(SCALE_MARGIN).clamp_(max=FP16_MAX).to(SCALE_DTYPE)


def _factors(scales: torch.Tensor, cfg: QuantConfig, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(inv, step) in fp32, shaped to broadcast over the (R, C) view.

    inv = Q / s (or h / s) by one IEEE division per scale and 0 where s == 0; step = s / Q
    (or s / h). Both divide tensor by tensor: torch computes `scalar / tensor` as
    reciprocal * scalar, and on CUDA `tensor / scalar` as a multiplication, either of
    which rounds differently from the contract's single division.
    """
    s = scales.reshape(-1).float()
    center = torch.full_like(s, cfg.center)
    inv = torch.where(s == 0, 0.0, center / s)
    step = s / center
    shape = (1, -1) if dim == 0 else (-1, 1)
    return inv.view(shape), step.view(shape)


# ---------------------------------------------------------------------------
# Codes
# ---------------------------------------------------------------------------


def _mul32_(h: torch.Tensor, const: int) -> torch.Tensor:
    """h * const mod 2**32 for int64 h in [0, 2**32), without int64 overflow."""
    hi = h * (const >> 16)
    hi.bitwise_and_(0xFFFF).bitwise_left_shift_(16)
    h.mul_(const & 0xFFFF).add_(hi).bitwise_and_(0xFFFFFFFF)
    return h


def _uniform(seed: int, start: int, count: int, device) -> torch.Tensor:
    """u in [0, 1) for flat indices [start, start + count): lowbias32 of
    (index mod 2**32) ^ mix(seed), top 24 bits, exactly as the contract says. (count,) fp32."""
    h = torch.arange(start, start + count, dtype=torch.int64, device=device)
    h.bitwise_and_(0xFFFFFFFF).bitwise_xor_((seed * GOLDEN32) % 2**32)
    h.bitwise_xor_(h >> 16)
    _mul32_(h, 0x7FEB352D).bitwise_xor_(h >> 15)
    _mul32_(h, 0x846CA68B).bitwise_xor_(h >> 16)
    return h.bitwise_right_shift_(8).float().mul_(2.0**-24)


def _levels_(work: torch.Tensor, inv: torch.Tensor | None, cfg: QuantConfig, seed: int,
             start: int, clamp: bool = True) -> torch.Tensor:
    """In place on fp32 `work` (rows, C) holding v, or v * inv when `inv` is None: -> the
    integer levels as floats, c - Q in [-Q, Q-1] (reference grid) or c in [0, L]
    (symmetric). `start` is the flat index of work[0, 0] (stochastic rounding keys on it)."""
    if inv is not None:
        work.mul_(inv)
    if cfg.symmetric:
        work.add_(cfg.code_max / 2)
    if cfg.stochastic:
        work.add_(_uniform(seed, start, work.numel(), work.device).view_as(work))
    else:
        work.add_(0.5)
    work.floor_()
    if not clamp:
        return work
    low = 0 if cfg.symmetric else -(1 << (cfg.bits - 1))
    return work.clamp_(low, low + cfg.code_max)


def _store_codes(levels: torch.Tensor, codes: torch.Tensor, cfg: QuantConfig) -> None:
    """uint8 `codes` (flat, levels.numel()) <- the codes of fp32 `levels`. Reference grid:
    the level goes to int8 exactly, and adding Q in uint8 arithmetic (mod 256) turns its
    two's complement byte into c = level + Q, a byte op instead of an fp32 one."""
    if cfg.symmetric:
        codes.view(levels.shape).copy_(levels)
        return
    codes.view(torch.int8).view(levels.shape).copy_(levels)
    codes.add_(1 << (cfg.bits - 1))


def _levels_fit(stat: torch.Tensor, scales: torch.Tensor, cfg: QuantConfig) -> bool:
    """Can the unclamped levels go to integers unchecked? With max-abs scales, a scale at
    least its group's max |v| (or zero) bounds |v * inv| by Q (or h) up to two ulps, so
    floor(t + 0.5) or floor(t + u) stays within one of the grid's ends: [-Q-1, Q+1] or
    [-1, L+1]. It fails where stat saturated at 65504 or an fp16-subnormal scale rounded
    below stat (and on NaN): those calls clamp in fp32."""
    if cfg.scale_method != "maxabs" or not _int8_levels(cfg):
        return False
    s = scales.reshape(-1).float()
    return bool(((s >= stat.reshape(-1)) | (s == 0)).all())


def _int8_levels(cfg: QuantConfig) -> bool:
    """Do all unclamped levels (see _levels_fit) fit int8? The reference grid up to 7 bits
    ([-65, 65]), the symmetric one up to 6 ([-1, 64]). (Wider ones through int16 measured
    no faster than the fp32 clamp: its conversions do not vectorise as well.)"""
    return cfg.bits <= (6 if cfg.symmetric else 7)


def _store_int_codes(levels: torch.Tensor, codes: torch.Tensor, cfg: QuantConfig) -> None:
    """uint8 `codes` (flat, levels.numel()) <- the codes of fp32 unclamped integer
    `levels` (bounded as _levels_fit says): converted exactly to int8, clamped there and
    offset by Q in byte arithmetic, two cheap byte passes instead of an fp32 clamp."""
    low = 0 if cfg.symmetric else -(1 << (cfg.bits - 1))
    ints = codes.view(torch.int8).view(levels.shape)
    ints.copy_(levels).clamp_(low, low + cfg.code_max)
    if low:
        codes.sub_(low)  # uint8: two's complement byte of the level + Q


# ---------------------------------------------------------------------------
# Quantize and pack, chunk by chunk
# ---------------------------------------------------------------------------


def _quantize_pack_rows(rows: torch.Tensor, scales: torch.Tensor, dim: int, cfg: QuantConfig,
                        seed: int, m_rows: torch.Tensor | None = None,
                        int_levels: bool = False, chunk_of=None) -> torch.Tensor:
    """The packed stream of the (R, C) view `rows`, chunk by chunk: each chunk's codes are
    packed while still in cache, into their own bytes of the stream (chunks hold whole
    octets of codes). With `m_rows`, `rows` is an owned fp32 delta, worked on in place,
    and m_rows += deQ(codes) chunk by chunk (the AQ-SGD sender); `chunk_of(r0, r1)`,
    when given, computes that delta's rows r0:r1 into an fp32 work chunk instead.
    `int_levels`: the levels are bounded (_levels_fit), so they are clamped as integers."""
    n, width, bits = rows.numel(), rows.shape[1], cfg.bits
    inv, step = _factors(scales, cfg, dim)
    device = rows.device
    packed = torch.empty(packed_nbytes(n, bits), dtype=torch.uint8, device=device)
    per = min(_rows_per_chunk(rows), rows.shape[0])
    cap = padded_bytes(per * width)
    # 8-bit codes are the stream: written straight into it
    codes = None if bits == 8 else torch.empty(cap, dtype=torch.uint8, device=device)
    scratch = torch.empty(cap, dtype=torch.uint8, device=device) if bits in BYTE_WIDTHS else None
    work = None if m_rows is not None else torch.empty((per, width), device=device)
    views = {}  # rows in a chunk -> its buffers' views: the full size and the last one

    def views_of(r: int):
        if r not in views:
            count = r * width
            chunk = None if codes is None else codes[: padded_bytes(count)]
            lanes = None if scratch is None else lane_views(codes, scratch, count, bits)
            views[r] = (None if work is None else work[:r], chunk,
                        None if chunk is None else chunk[:count], lanes)
        return views[r]

    # chunk views made in one call each (per-chunk Python slicing is a large part of the
    # time at this size)
    one = per >= rows.shape[0]  # a single chunk (small tensors): no splitting overhead
    row_chunks = (rows,) if one else rows.split(per)
    # all chunks but the last hold whole octets of codes (per * width % 8 == 0)
    stream_chunks = (packed,) if one else packed.split(packed_nbytes(per * width, bits))
    m_chunks = row_chunks if m_rows is None else (m_rows,) if one else m_rows.split(per)
    inv_chunks = None if dim == 0 else (inv,) if one else inv.split(per)
    step_chunks = None if dim == 0 else (step,) if one else step.split(per)
    # backwards: the statistics pass just read the last chunks, which are still in cache
    for i in reversed(range(len(row_chunks))):
        src = row_chunks[i]
        r = src.shape[0]
        r0, count = i * per, r * width
        start = r0 * width  # start % 8 == 0 (_rows_per_chunk)
        inv_k = inv if inv_chunks is None else inv_chunks[i]
        work_k, chunk, chunk_codes, lanes = views_of(r)
        if m_rows is None:
            w = torch.mul(src, inv_k, out=work_k)  # fp32 v * inv
            _levels_(w, None, cfg, seed, start, clamp=not int_levels)
        else:
            delta = src if chunk_of is None else chunk_of(r0, r0 + r)
            w = _levels_(delta, inv_k, cfg, seed, start)
        if chunk is None:
            chunk_codes = stream_chunks[i]
        if int_levels and m_rows is None:
            _store_int_codes(w, chunk_codes, cfg)
        else:
            _store_codes(w, chunk_codes, cfg)
        if m_rows is not None:  # deQ = (c - center) * step in fp32, then m + deQ
            if cfg.symmetric:
                w.sub_(cfg.center)
            m_chunks[i].add_(w.mul_(step if step_chunks is None else step_chunks[i]))
        if chunk is None:
            continue
        if count % 8:  # only the last chunk has padding codes
            chunk[count:] = 0
        if lanes is None:
            pack_into(chunk, count, bits, stream_chunks[i])
        else:
            pack_lanes(*lanes, bits, stream_chunks[i])
    return packed


def quantize_packed(x: torch.Tensor, cfg: QuantConfig,
                    seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x (contiguous) -> (packed uint8 stream, fp16 scales of scale_shape(x.shape, cfg))."""
    rows, dim = _rows(x, cfg)
    stat = _statistic(rows, dim, cfg)
    scales = _scales_from_stat(stat.clone())
    # the bound check costs a few small ops and a sync: worth it on large tensors only
    int_levels = x.numel() >= INT_CLAMP_MIN_ELEMENTS and _levels_fit(stat, scales, cfg)
    packed = _quantize_pack_rows(rows, scales, dim, cfg, seed, int_levels=int_levels)
    return packed, scales.reshape(scale_shape(x.shape, cfg))


# ---------------------------------------------------------------------------
# Unpack and dequantize, chunk by chunk
# ---------------------------------------------------------------------------


def _values_into(levels: torch.Tensor, step: torch.Tensor, cfg: QuantConfig,
                 out: torch.Tensor) -> torch.Tensor:
    """out = (c - center) * step; `levels` is c - Q as int8 (reference) or c as uint8."""
    out.copy_(levels)
    if cfg.symmetric:
        out.sub_(cfg.code_max / 2)
    return out.mul_(step)


def _value_chunks(packed: torch.Tensor, scales: torch.Tensor, rows_shape, cfg: QuantConfig,
                  dim: int, dest: torch.Tensor | None = None):
    """(r0, r1, fp32 values (c - center) * step of rows r0:r1 of the (R, C) view), written
    into the fp32 (R, C) `dest` when given, else into a work chunk."""
    _, step = _factors(scales, cfg, dim)
    n, width = math.prod(rows_shape), rows_shape[1]
    chunk_rows = min(_rows_per_chunk_of(rows_shape, packed.device), rows_shape[0])
    if cfg.bits == 4:
        for r0, r1, floats in pair_values(packed, n, cfg, chunk_rows, width, dest):
            yield r0, r1, floats.mul_(step if dim == 0 else step[r0:r1])
        return
    work = torch.empty((chunk_rows, width), device=packed.device) if dest is None else None
    if cfg.bits in BYTE_WIDTHS or cfg.bits == 8:
        chunks = chunk_levels(packed, n, cfg, chunk_rows, width)
    else:
        levels = levels_of(packed, n, cfg).view(rows_shape)
        chunks = ((r0, r1, levels[r0:r1]) for r0, r1 in _row_ranges_of(rows_shape, packed.device))
    for r0, r1, lv in chunks:
        out = work[: r1 - r0] if dest is None else dest[r0:r1]
        yield r0, r1, _values_into(lv, step if dim == 0 else step[r0:r1], cfg, out)


def dequantize_packed(packed: torch.Tensor, scales: torch.Tensor, shape, cfg: QuantConfig,
                      dtype: torch.dtype) -> torch.Tensor:
    """(packed, scales) -> values of `shape` in `dtype` (fp32 arithmetic, one rounding)."""
    out = torch.empty(shape, dtype=dtype, device=packed.device)
    rows, dim = _rows(out, cfg)
    dest = rows if dtype == torch.float32 else None
    for r0, r1, values in _value_chunks(packed, scales, rows.shape, cfg, dim, dest):
        if dest is None:
            rows[r0:r1].copy_(values)  # fp32 arithmetic, one rounding to the output dtype
    return out


# ---------------------------------------------------------------------------
# AQ-SGD encode / decode
# ---------------------------------------------------------------------------


def _delta_into(x_rows: torch.Tensor, m_rows: torch.Tensor, r0: int, r1: int,
                out: torch.Tensor) -> torch.Tensor:
    """fp32 `out` <- x.float() - m.float() on rows r0:r1 (one fp32 subtraction)."""
    if torch.float32 in (x_rows.dtype, m_rows.dtype):  # fp32 by promotion
        return torch.sub(x_rows[r0:r1], m_rows[r0:r1], out=out)
    return out.copy_(x_rows[r0:r1]).sub_(m_rows[r0:r1])


def aqsgd_encode(x: torch.Tensor, m: torch.Tensor, cfg: QuantConfig,
                 seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize x.float() - m.float(); m (contiguous) += deQ in place."""
    if cfg.scale_method == "maxabs":
        # x - m chunk by chunk, twice (statistics, then codes), instead of a whole
        # delta tensor: the same reads, no large allocation and its page faults
        x_rows, dim = _rows(x, cfg)
        m_rows = m.view(x_rows.shape)
        work = torch.empty((min(_rows_per_chunk(x_rows), x_rows.shape[0]), x_rows.shape[1]),
                           device=x.device)

        def delta_of(r0: int, r1: int) -> torch.Tensor:
            return _delta_into(x_rows, m_rows, r0, r1, work[: r1 - r0])

        scales = _scales_from_stat(_statistic(x_rows, dim, cfg, delta_of))
        packed = _quantize_pack_rows(x_rows, scales, dim, cfg, seed, m_rows, chunk_of=delta_of)
        return packed, scales.reshape(scale_shape(x.shape, cfg))
    if torch.float32 in (x.dtype, m.dtype):
        delta = torch.sub(x, m)  # fp32 by promotion: x.float() - m.float()
    else:
        delta = x.float().sub_(m)
    rows, dim = _rows(delta, cfg)
    scales = _scales_from_stat(_statistic(rows, dim, cfg))
    packed = _quantize_pack_rows(rows, scales, dim, cfg, seed, m.view(rows.shape))
    return packed, scales.reshape(scale_shape(x.shape, cfg))


def aqsgd_decode(packed: torch.Tensor, scales: torch.Tensor, m: torch.Tensor,
                 cfg: QuantConfig) -> torch.Tensor:
    """m (contiguous) += deQ(packed, scales) in place; returns m."""
    rows, dim = _rows(m, cfg)
    for r0, r1, values in _value_chunks(packed, scales, rows.shape, cfg, dim):
        rows[r0:r1].add_(values)
    return m
