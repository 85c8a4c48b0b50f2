"""Activation quantizer: the torch reference of the bit-exact contract.

The contract (docs/ARCHITECTURE.md, "Quantizer") fixes every rounding step, so this
module and the Triton kernels in `aqsgd/kernels.py` produce the same bytes:

    cfg = QuantConfig(bits=4)                      # per-channel max-abs, reference grid
    packed, scales = quantize_packed(x, cfg)       # x (B, L, D) -> uint8 stream, (D,) fp16
    y = dequantize_packed(packed, scales, x.shape, cfg)
    packed, scales = aqsgd_encode(x, m_send, cfg)  # quantizes x - m, m += deQ in place
    aqsgd_decode(packed, scales, m_recv, cfg)      # m_recv == m_send, bit for bit

Small composable parts (`compute_scales`, `quantize`, `dequantize`, `pack`, `unpack`)
sit under the fused single calls. The public calls validate their arguments, draw
the stochastic-rounding seed once from the caller's generator, then dispatch to
torch (CPU, or CUDA without Triton) or to `aqsgd.quant.triton_kernels` (imported lazily).

Speed on CPU (see bench/kernels.py): x is read twice (statistics forwards, then codes
backwards, so the first chunks coded are still in cache), every other pass is an in-place
op on a cache-sized chunk of rows whose views are made once per call; max-abs levels,
which the scale bounds, are clamped as int8 rather than fp32; 1-, 2- and 4-bit codes
pack by a shift-or per doubling on 2/4/8-byte lanes and unpack by one table gather per
byte (4 bits: straight to fp32 pairs); the AQ-SGD sender recomputes x - m per chunk
instead of allocating a whole delta.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from aqsgd.quant.bitpack import (
    BYTE_WIDTHS,
    byte_table,
    lane_views,
    pack,
    pack_into,
    pack_lanes,
    packed_nbytes,
    padded_bytes,
    unpack,
    unpack_codes,
)

__all__ = [
    "BACKENDS",
    "GRANULARITIES",
    "GRIDS",
    "QuantConfig",
    "ROUNDINGS",
    "SCALE_METHODS",
    "aqsgd_decode",
    "aqsgd_encode",
    "compute_scales",
    "dequantize",
    "dequantize_packed",
    "draw_seed",
    "pack",
    "packed_nbytes",
    "quantize",
    "quantize_packed",
    "scale_shape",
    "unpack",
]

GRANULARITIES = ("channel", "token", "group")
SCALE_METHODS = ("maxabs", "l2")
ROUNDINGS = ("nearest", "stochastic")
GRIDS = ("reference", "symmetric")
BACKENDS = ("auto", "torch", "triton")

INPUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
CACHE_DTYPES = (torch.float32, torch.float16)
SCALE_DTYPE = torch.float16
FP16_MAX = 65504.0
SCALE_MARGIN = 1.0 + 2.0**-10  # fp16 rounding of stat * margin is never below stat
SEED_HIGH = 2**31 - 1
GOLDEN32 = 0x9E3779B9
CHUNK_ELEMENTS = 1 << 17  # 512 KiB of fp32 per chunk: a chain of in-place passes stays in L2
INT_CLAMP_MIN_ELEMENTS = 1 << 15  # smaller tensors clamp levels in fp32 (_levels_fit)


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


# ---------------------------------------------------------------------------
# Shapes and argument checks
# ---------------------------------------------------------------------------


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


def _check_input(x, name: str = "x") -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in INPUT_DTYPES:
        raise TypeError(f"{name} must be float32, float16 or bfloat16, got dtype {x.dtype}")


def _check_config(cfg) -> None:
    if not isinstance(cfg, QuantConfig):
        raise TypeError(f"cfg must be a QuantConfig, got {type(cfg).__name__}")


def _check_cache(m, x: torch.Tensor) -> None:
    if not isinstance(m, torch.Tensor):
        raise TypeError(f"m must be a torch.Tensor, got {type(m).__name__}")
    if m.dtype not in CACHE_DTYPES:
        raise TypeError(f"m must be float32 or float16, got dtype {m.dtype}")
    if tuple(m.shape) != tuple(x.shape):
        raise ValueError(f"m must have the shape of x {tuple(x.shape)}, got {tuple(m.shape)}")
    if m.device != x.device:
        raise ValueError(f"m must be on the device of x ({x.device}), got {m.device}")
    if not m.is_contiguous():
        raise ValueError(f"m must be contiguous (updated in place), got strides {m.stride()}")


def _check_scales(scales, shape: tuple[int, ...], cfg: QuantConfig, device) -> None:
    want = scale_shape(shape, cfg)
    if not isinstance(scales, torch.Tensor) or scales.dtype != SCALE_DTYPE:
        got = scales.dtype if isinstance(scales, torch.Tensor) else type(scales).__name__
        raise TypeError(f"scales must be a float16 tensor, got {got}")
    if tuple(scales.shape) != want:
        raise ValueError(f"scales must have shape {want} for x of shape {shape}, "
                         f"got {tuple(scales.shape)}")
    if scales.device != device:
        raise ValueError(f"scales must be on {device}, got {scales.device}")


def _check_packed(packed, n: int, bits: int, device=None, of: str = "") -> None:
    if not isinstance(packed, torch.Tensor) or packed.dtype != torch.uint8:
        got = packed.dtype if isinstance(packed, torch.Tensor) else type(packed).__name__
        raise TypeError(f"packed must be a uint8 tensor, got {got}")
    want = packed_nbytes(n, bits)
    if packed.dim() != 1 or packed.numel() != want:
        raise ValueError(f"packed must be 1-D with packed_nbytes({n}, {bits})={want} bytes{of}, "
                         f"got shape {tuple(packed.shape)}")
    if device is not None and packed.device != device:
        raise ValueError(f"packed must be on {device}, got {packed.device}")


# ---------------------------------------------------------------------------
# Scales
# ---------------------------------------------------------------------------


def _rows(x: torch.Tensor, cfg: QuantConfig) -> tuple[torch.Tensor, int]:
    """2-D view whose scale groups are columns (channel: (N, D), reduce dim 0) or rows
    (token: (R, D); group: (numel // G, G); reduce dim 1), in flat row-major order."""
    if cfg.granularity == "channel":
        return x.reshape(-1, x.shape[-1]), 0
    span = x.shape[-1] if cfg.granularity == "token" else cfg.group_size
    return x.reshape(-1, span), 1


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


def compute_scales(x: torch.Tensor, cfg: QuantConfig) -> torch.Tensor:
    """fp16 scales of x, shape `scale_shape(x.shape, cfg)`."""
    _check_config(cfg)
    _check_input(x)
    shape = scale_shape(x.shape, cfg)
    rows, dim = _rows(x, cfg)
    return _scales_from_stat(_statistic(rows, dim, cfg)).reshape(shape)


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


def _quantize_into(x: torch.Tensor, scales: torch.Tensor, cfg: QuantConfig, seed: int,
                   codes: torch.Tensor) -> None:
    """Writes the codes of x into codes[:x.numel()] (uint8)."""
    rows, dim = _rows(x, cfg)
    inv, _ = _factors(scales, cfg, dim)
    width = rows.shape[1]
    for r0, r1, work in _chunks(rows):
        torch.mul(rows[r0:r1], inv if dim == 0 else inv[r0:r1], out=work)  # fp32 v * inv
        _store_codes(_levels_(work, None, cfg, seed, r0 * width), codes[r0 * width: r1 * width],
                     cfg)


def quantize(x: torch.Tensor, scales: torch.Tensor, cfg: QuantConfig,
             seed: int = 0) -> torch.Tensor:
    """Unpacked codes of x under `scales`: uint8 of x's shape, values 0..2**bits - 1."""
    _check_config(cfg)
    _check_input(x)
    _check_scales(scales, tuple(x.shape), cfg, x.device)
    codes = torch.empty(x.numel(), dtype=torch.uint8, device=x.device)
    _quantize_into(x, scales, cfg, seed, codes)
    return codes.view(x.shape)


def _values_into(levels: torch.Tensor, step: torch.Tensor, cfg: QuantConfig,
                 out: torch.Tensor) -> torch.Tensor:
    """out = (c - center) * step; `levels` is c - Q as int8 (reference) or c as uint8."""
    out.copy_(levels)
    if cfg.symmetric:
        out.sub_(cfg.code_max / 2)
    return out.mul_(step)


def _signed_levels(codes: torch.Tensor, cfg: QuantConfig) -> torch.Tensor:
    """Reference grid: codes -> c - Q as int8 (uint8 subtraction wraps mod 256); in place."""
    if cfg.symmetric:
        return codes
    return codes.sub_(1 << (cfg.bits - 1)).view(torch.int8)


def dequantize(codes: torch.Tensor, scales: torch.Tensor, cfg: QuantConfig,
               dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Values (c - center) * (s / center) of unpacked uint8 codes, computed in fp32,
    returned in `dtype` (fp32, fp16 or bf16) with the codes' shape."""
    _check_config(cfg)
    if not isinstance(codes, torch.Tensor) or codes.dtype != torch.uint8:
        raise TypeError(f"codes must be a uint8 tensor, got {getattr(codes, 'dtype', codes)}")
    _check_scales(scales, tuple(codes.shape), cfg, codes.device)
    rows, dim = _rows(codes, cfg)
    _, step = _factors(scales, cfg, dim)
    levels = _signed_levels(rows.clone(), cfg)
    out = torch.empty(rows.shape, device=codes.device)
    return _values_into(levels, step, cfg, out).to(dtype).view(codes.shape)


# ---------------------------------------------------------------------------
# Torch implementations of the fused calls (same signatures as aqsgd.quant.triton_kernels)
# ---------------------------------------------------------------------------


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


def torch_quantize_packed(x: torch.Tensor, cfg: QuantConfig,
                          seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    rows, dim = _rows(x, cfg)
    stat = _statistic(rows, dim, cfg)
    scales = _scales_from_stat(stat.clone())
    # the bound check costs a few small ops and a sync: worth it on large tensors only
    int_levels = x.numel() >= INT_CLAMP_MIN_ELEMENTS and _levels_fit(stat, scales, cfg)
    packed = _quantize_pack_rows(rows, scales, dim, cfg, seed, int_levels=int_levels)
    return packed, scales.reshape(scale_shape(x.shape, cfg))


def _levels_of(packed: torch.Tensor, n: int, cfg: QuantConfig) -> torch.Tensor:
    """(n,) int8 c - Q (reference) or uint8 c (symmetric) of a packed stream."""
    return _signed_levels(unpack_codes(packed, cfg.bits, n), cfg)[:n]


def _chunk_levels(packed: torch.Tensor, n: int, cfg: QuantConfig, chunk_rows: int, width: int):
    """(r0, r1, levels of rows r0:r1 as (r1 - r0, width) int8 c - Q (reference) or uint8 c
    (symmetric)) over the row chunks, for widths whose chunks start on whole bytes of
    the stream (1, 2, 4: one table lookup per byte; 8: the bytes are the codes)."""
    bits, device = cfg.bits, packed.device
    offset = 0 if cfg.symmetric else 1 << (bits - 1)
    level_dtype = torch.uint8 if cfg.symmetric else torch.int8
    cap = padded_bytes(chunk_rows * width)
    if bits == 8:
        shifted = torch.empty(cap, dtype=torch.uint8, device=device) if offset else None
    else:
        table = byte_table(bits, offset, device)
        index = torch.empty(cap * bits // 8, dtype=torch.int32, device=device)
        lanes = torch.empty(cap * bits // 8, dtype=table.dtype, device=device)
    rows = n // width
    for r0 in range(0, rows, chunk_rows):
        r1 = min(r0 + chunk_rows, rows)
        start, count = r0 * width, (r1 - r0) * width
        src = packed[start * bits // 8: start * bits // 8 + packed_nbytes(count, bits)]
        if bits == 8:
            codes = src if shifted is None else torch.sub(src, offset, out=shifted[:count])
        else:
            k = src.numel()
            index[:k].copy_(src)
            codes = torch.index_select(table, 0, index[:k], out=lanes[:k]).view(torch.uint8)
        yield r0, r1, codes[:count].view(level_dtype).view(r1 - r0, width)


@functools.lru_cache(maxsize=16)
def _pair_table(symmetric: bool, device: str) -> torch.Tensor:
    """(256,) int64 whose bytes are the two fp32 values c - center of a 4-bit byte's codes
    (low nibble first): one 8-byte gather per byte writes both values, no conversion."""
    cfg = QuantConfig(bits=4, grid="symmetric" if symmetric else "reference")
    v = torch.arange(256, device=device)
    codes = torch.stack([v & 15, v >> 4], 1)
    return (codes.float() - cfg.center).view(torch.int64).view(256)  # exact: small numbers


def _pair_values(packed: torch.Tensor, n: int, cfg: QuantConfig, chunk_rows: int, width: int,
                 dest: torch.Tensor | None):
    """(r0, r1, fp32 (r1 - r0, width) c - center) over the row chunks of a 4-bit stream,
    gathered straight into rows r0:r1 of `dest`, or into a work chunk."""
    table = _pair_table(cfg.symmetric, str(packed.device))
    cap = padded_bytes(chunk_rows * width)
    index = torch.empty(cap // 2, dtype=torch.int32, device=packed.device)
    work = torch.empty(cap, device=packed.device)
    rows = n // width
    for r0 in range(0, rows, chunk_rows):
        r1 = min(r0 + chunk_rows, rows)
        start, count = r0 * width, (r1 - r0) * width
        src = packed[start // 2: start // 2 + packed_nbytes(count, 4)]
        k = src.numel()
        index[:k].copy_(src)
        out = work[:count] if dest is None else dest[r0:r1].view(-1)
        if count % 2 == 0:  # out starts on a multiple of 8 elements
            torch.index_select(table, 0, index[:k], out=out.view(torch.int64))
        else:  # the last chunk of an odd count: its final byte holds one code
            pairs = torch.index_select(table, 0, index[:k]).view(torch.float32)
            out.copy_(pairs[:count])
        yield r0, r1, out.view(r1 - r0, width)


def _value_chunks(packed: torch.Tensor, scales: torch.Tensor, rows_shape, cfg: QuantConfig,
                  dim: int, dest: torch.Tensor | None = None):
    """(r0, r1, fp32 values (c - center) * step of rows r0:r1 of the (R, C) view), written
    into the fp32 (R, C) `dest` when given, else into a work chunk."""
    _, step = _factors(scales, cfg, dim)
    n, width = math.prod(rows_shape), rows_shape[1]
    chunk_rows = min(_rows_per_chunk_of(rows_shape, packed.device), rows_shape[0])
    if cfg.bits == 4:
        for r0, r1, floats in _pair_values(packed, n, cfg, chunk_rows, width, dest):
            yield r0, r1, floats.mul_(step if dim == 0 else step[r0:r1])
        return
    work = torch.empty((chunk_rows, width), device=packed.device) if dest is None else None
    if cfg.bits in BYTE_WIDTHS or cfg.bits == 8:
        chunks = _chunk_levels(packed, n, cfg, chunk_rows, width)
    else:
        levels = _levels_of(packed, n, cfg).view(rows_shape)
        chunks = ((r0, r1, levels[r0:r1]) for r0, r1 in _row_ranges_of(rows_shape, packed.device))
    for r0, r1, lv in chunks:
        out = work[: r1 - r0] if dest is None else dest[r0:r1]
        yield r0, r1, _values_into(lv, step if dim == 0 else step[r0:r1], cfg, out)


def torch_dequantize_packed(packed: torch.Tensor, scales: torch.Tensor, shape, cfg: QuantConfig,
                            dtype: torch.dtype) -> torch.Tensor:
    out = torch.empty(shape, dtype=dtype, device=packed.device)
    rows, dim = _rows(out, cfg)
    dest = rows if dtype == torch.float32 else None
    for r0, r1, values in _value_chunks(packed, scales, rows.shape, cfg, dim, dest):
        if dest is None:
            rows[r0:r1].copy_(values)  # fp32 arithmetic, one rounding to the output dtype
    return out


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


def _chunks(rows: torch.Tensor):
    """(r0, r1, fp32 work buffer (r1 - r0, C)) over the chunks of _row_ranges."""
    per = _rows_per_chunk(rows)
    work = torch.empty((min(per, rows.shape[0]), rows.shape[1]), device=rows.device)
    for r0, r1 in _row_ranges(rows):
        yield r0, r1, work[: r1 - r0]


def _delta_into(x_rows: torch.Tensor, m_rows: torch.Tensor, r0: int, r1: int,
                out: torch.Tensor) -> torch.Tensor:
    """fp32 `out` <- x.float() - m.float() on rows r0:r1 (one fp32 subtraction)."""
    if torch.float32 in (x_rows.dtype, m_rows.dtype):  # fp32 by promotion
        return torch.sub(x_rows[r0:r1], m_rows[r0:r1], out=out)
    return out.copy_(x_rows[r0:r1]).sub_(m_rows[r0:r1])


def torch_aqsgd_encode(x: torch.Tensor, m: torch.Tensor, cfg: QuantConfig,
                       seed: int) -> tuple[torch.Tensor, torch.Tensor]:
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


def torch_aqsgd_decode(packed: torch.Tensor, scales: torch.Tensor, m: torch.Tensor,
                       cfg: QuantConfig) -> torch.Tensor:
    rows, dim = _rows(m, cfg)
    for r0, r1, values in _value_chunks(packed, scales, rows.shape, cfg, dim):
        rows[r0:r1].add_(values)
    return m


# ---------------------------------------------------------------------------
# Public single calls: validate, draw the seed once, dispatch
# ---------------------------------------------------------------------------


def _kernels_for(backend: str, device: torch.device):
    """aqsgd.quant.triton_kernels when the Triton path should run, else None (torch path)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {list(BACKENDS)}, got {backend!r}")
    if backend == "torch":
        return None
    if backend == "auto":
        if device.type != "cuda":
            return None
        try:
            import triton  # noqa: F401  (only probing that it imports)
        except ImportError:
            return None
    from aqsgd.quant import triton_kernels as kernels  # lazy: imports Triton

    return kernels


def quantize_packed(x: torch.Tensor, cfg: QuantConfig, generator: torch.Generator | None = None,
                    backend: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """x (fp32/fp16/bf16, any device) -> (packed uint8 (packed_nbytes(numel, bits),),
    scales fp16 scale_shape(x.shape, cfg))."""
    _check_config(cfg)
    _check_input(x)
    scale_shape(x.shape, cfg)
    seed = draw_seed(generator, cfg)
    kernels = _kernels_for(backend, x.device)
    x = x.contiguous()
    if kernels is not None:
        return kernels.quantize_packed(x, cfg, seed)
    return torch_quantize_packed(x, cfg, seed)


def dequantize_packed(packed: torch.Tensor, scales: torch.Tensor, shape: Sequence[int],
                      cfg: QuantConfig, dtype: torch.dtype = torch.float32,
                      backend: str = "auto") -> torch.Tensor:
    """(packed, scales) -> values of `shape` in `dtype` (fp32/fp16/bf16)."""
    _check_config(cfg)
    shape = tuple(int(d) for d in shape)
    _check_packed(packed, math.prod(shape), cfg.bits, None, f" for shape {shape}")
    _check_scales(scales, shape, cfg, packed.device)
    if dtype not in INPUT_DTYPES:
        raise TypeError(f"dtype must be float32, float16 or bfloat16, got {dtype}")
    kernels = _kernels_for(backend, packed.device)
    if kernels is not None:
        return kernels.dequantize_packed(packed.contiguous(), scales.contiguous(), shape, cfg,
                                         dtype)
    return torch_dequantize_packed(packed, scales, shape, cfg, dtype)


def aqsgd_encode(x: torch.Tensor, m: torch.Tensor, cfg: QuantConfig,
                 generator: torch.Generator | None = None,
                 backend: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """Sender step: quantize x.float() - m.float(); m <- (m.float() + deQ).to(m.dtype) in
    place. Returns (packed, scales) as quantize_packed does."""
    _check_config(cfg)
    _check_input(x)
    _check_cache(m, x)
    scale_shape(x.shape, cfg)
    seed = draw_seed(generator, cfg)
    kernels = _kernels_for(backend, x.device)
    x = x.contiguous()
    if kernels is not None:
        return kernels.aqsgd_encode(x, m, cfg, seed)
    return torch_aqsgd_encode(x, m, cfg, seed)


def aqsgd_decode(packed: torch.Tensor, scales: torch.Tensor, m: torch.Tensor, cfg: QuantConfig,
                 backend: str = "auto") -> torch.Tensor:
    """Receiver step: m <- (m.float() + deQ(packed, scales)).to(m.dtype) in place; returns m."""
    _check_config(cfg)
    if not isinstance(m, torch.Tensor):
        raise TypeError(f"m must be a torch.Tensor, got {type(m).__name__}")
    _check_cache(m, m)
    _check_packed(packed, m.numel(), cfg.bits, m.device, f" for m of shape {tuple(m.shape)}")
    _check_scales(scales, tuple(m.shape), cfg, m.device)
    kernels = _kernels_for(backend, m.device)
    if kernels is not None:
        return kernels.aqsgd_decode(packed.contiguous(), scales.contiguous(), m, cfg)
    return torch_aqsgd_decode(packed, scales, m, cfg)
