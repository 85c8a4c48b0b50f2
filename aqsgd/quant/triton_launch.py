"""Host side of the AQ-SGD / DirectQ Triton path: launch geometry, pass choice, the four
calls (`aqsgd.quant.backends` loads it only when a call goes to Triton), with the
signatures of `aqsgd.quant.cpu` and `aqsgd.quant.reference`, arguments already checked:

    packed, scales = quantize_packed(x, cfg, seed)
    y = dequantize_packed(packed, scales, shape, cfg, dtype)
    packed, scales = aqsgd_encode(x, m, cfg, seed)      # m += deQ in place
    aqsgd_decode(packed, scales, m, cfg)                # m += deQ in place

Which kernels run, and why: docs/architecture/quant.md, "Quantizer" (the Triton kernels).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton

from aqsgd.quant import triton_kernels as kernels
from aqsgd.quant.config import scale_shape
from aqsgd.quant.triton_host import INT32_LIMIT, device_kind, kernel_view, pow2, seed_arg
from aqsgd.quant.triton_host import interpreted as _interpreted_kernel
from aqsgd.quant.triton_host import launch as _launch_kernel

__all__ = ["aqsgd_decode", "aqsgd_encode", "dequantize_packed", "quantize_packed"]

# ---------------------------------------------------------------------------
# Launch geometry
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class _Tiles:
    """Launch geometry for one kind of device (all sizes are powers of two)."""

    flat_octets: int  # octets (8 codes) per program in the flat kernels
    rows_elems: int  # target padded elements per program in the one-pass rows kernel
    max_row_elems: int  # longest padded row the one-pass kernel takes
    stat_cols: int  # column block of the statistics kernels
    stat_elems: int  # elements per loop step of the statistics kernels
    target_programs: int  # programs the channel statistics pass aims for
    elems_per_thread: int  # sets num_warps per launch (registers: see _launch)
    idx64_from: int = INT32_LIMIT  # element count from which indices are int64

    def __post_init__(self) -> None:
        for name in ("flat_octets", "rows_elems", "max_row_elems", "stat_cols", "stat_elems",
                     "elems_per_thread"):
            value = getattr(self, name)
            if value < 1 or value & (value - 1):
                raise ValueError(f"_Tiles.{name} must be a power of two, got {value}")


_TILES = {
    "cuda": _Tiles(
        flat_octets=128,
        rows_elems=2048,
        max_row_elems=8192,
        stat_cols=128,
        stat_elems=2048,
        target_programs=1024,
        elems_per_thread=4,
    ),
    "interpreter": _Tiles(
        flat_octets=8192,
        rows_elems=65536,
        max_row_elems=65536,
        stat_cols=4096,
        stat_elems=65536,
        target_programs=1,
        elems_per_thread=65536,
    ),
}


# ---------------------------------------------------------------------------
# Launches
# ---------------------------------------------------------------------------


def _interpreted() -> bool:
    """Were the kernels built by the Triton interpreter (TRITON_INTERPRET=1 at import)?"""
    return _interpreted_kernel(kernels.encode_rows_kernel)


def _tiles_for(t: torch.Tensor) -> _Tiles:
    return _TILES[device_kind(t, kernels.encode_rows_kernel, __name__)]


def _span(shape: torch.Size, cfg) -> int:
    return cfg.group_size if cfg.granularity == "group" else shape[-1]


def _launch(kernel, grid, tiles: _Tiles, tile_elems: int, *args, **meta) -> None:
    # About 4 elements per thread keeps these kernels near 32-64 registers on sm_90
    # (measured with cuobjdump -res-usage: 32 elements per thread took 234-255), so
    # enough warps stay resident to keep HBM busy.
    warps = min(32, max(1, tile_elems // (32 * tiles.elems_per_thread)))
    _launch_kernel(kernel, grid, warps, *args, **meta)


def _encode(x: torch.Tensor, m: torch.Tensor | None, cfg, seed: int | None,
            tiles: _Tiles | None = None):
    """Shared body of quantize_packed (m None) and aqsgd_encode (m updated in place)."""
    tiles = tiles or _tiles_for(x)
    x = x.contiguous()
    work_m = None if m is None else (m if m.is_contiguous() else m.contiguous())
    n = x.numel()
    span = _span(x.shape, cfg)
    n_rows = n // span
    n_bytes = (n * cfg.bits + 7) // 8
    stochastic = cfg.rounding == "stochastic"
    channel = cfg.granularity == "channel"
    flags = dict(
        BITS=cfg.bits,
        SYMMETRIC=cfg.grid == "symmetric",
        HAS_M=m is not None,
        X_BF16=x.dtype == torch.bfloat16,
        M_BF16=m is not None and m.dtype == torch.bfloat16,
        IDX64=n >= tiles.idx64_from,
    )
    seed_mix = seed_arg(seed, stochastic)
    xk = kernel_view(x)
    mk = xk if work_m is None else kernel_view(work_m)  # unread when HAS_M is False
    packed = torch.empty(n_bytes, dtype=torch.uint8, device=x.device)
    scales = torch.empty(scale_shape(x.shape, cfg), dtype=torch.float16, device=x.device)
    octets = pow2((span + 7) // 8)
    whole_rows = (span * cfg.bits) % 8 == 0 and octets * 8 <= tiles.max_row_elems
    if channel or not whole_rows:
        inv = torch.empty(scales.numel(), dtype=torch.float32, device=x.device)
        step = torch.empty_like(inv)
        _scales_pass(xk, mk, scales, inv, step, n_rows, span, cfg, tiles, flags)
    else:
        inv = step = scales  # unread: the one-pass kernel makes its own
    if whole_rows:
        rows = max(1, min(tiles.rows_elems // (octets * 8), pow2(n_rows)))
        _launch(kernels.encode_rows_kernel, (triton.cdiv(n_rows, rows),), tiles,
                rows * octets * 8, xk, mk, scales, inv, step, packed, n_rows, span, seed_mix,
                STOCHASTIC=stochastic, L2=cfg.scale_method == "l2", COL_SCALES=channel,
                ROWS=rows, OCTETS=octets, **flags)
    else:
        _launch(kernels.encode_flat_kernel, (triton.cdiv(n, 8 * tiles.flat_octets),), tiles,
                8 * tiles.flat_octets,
                xk, mk, inv, step, packed, n, n_bytes, span, seed_mix,
                BY_ROW=not channel, STOCHASTIC=stochastic, OCTETS=tiles.flat_octets, **flags)
    if work_m is not None and work_m is not m:
        m.copy_(work_m)
    return packed, scales


def _scales_pass(xk, mk, scales, inv, step, n_rows, span, cfg, tiles: _Tiles, flags) -> None:
    """First pass of the two-pass encode: fp16 scales plus fp32 inv and step per scale."""
    l2 = cfg.scale_method == "l2"
    common = {k: flags[k] for k in ("HAS_M", "X_BF16", "M_BF16", "IDX64")}
    if cfg.granularity != "channel":
        cols = min(pow2(span), tiles.stat_cols)
        rows = max(1, min(tiles.stat_elems // cols, pow2(n_rows)))
        _launch(kernels.row_scales_kernel, (triton.cdiv(n_rows, rows),), tiles, rows * cols,
                xk, mk, scales, inv, step, n_rows, span,
                BITS=cfg.bits, SYMMETRIC=flags["SYMMETRIC"], L2=l2, ROWS=rows, COLS=cols,
                **common)
        return
    block_c = min(pow2(span), tiles.stat_cols)
    block_r = max(1, min(tiles.stat_elems // block_c, pow2(n_rows)))
    n_cb = triton.cdiv(span, block_c)
    want_rb = max(1, min(triton.cdiv(tiles.target_programs, n_cb), triton.cdiv(n_rows, block_r)))
    rows_per_prog = triton.cdiv(triton.cdiv(n_rows, want_rb), block_r) * block_r
    n_rb = triton.cdiv(n_rows, rows_per_prog)
    part = torch.empty((n_rb, span), dtype=torch.float32, device=scales.device)
    _launch(kernels.col_partial_kernel, (n_rb, n_cb), tiles, block_r * block_c,
            xk, mk, part, n_rows, span, rows_per_prog,
            L2=l2, BLOCK_R=block_r, BLOCK_C=block_c, **common)
    _launch(kernels.col_finalize_kernel, (n_cb,), tiles, block_c,
            part, scales, inv, step, n_rb, n_rows, span,
            BITS=cfg.bits, SYMMETRIC=flags["SYMMETRIC"], L2=l2, BLOCK_C=block_c)


def _decode_into(packed: torch.Tensor, scales: torch.Tensor, out: torch.Tensor, cfg,
                 accumulate: bool, tiles: _Tiles | None = None) -> None:
    """out = deQ(packed, scales), or out += deQ when accumulating; one pass."""
    tiles = tiles or _tiles_for(out)
    n = out.numel()
    if n == 0:
        return
    scales = scales.contiguous()
    span = _span(out.shape, cfg)
    n_rows = n // span
    channel = cfg.granularity == "channel"
    octets = pow2((span + 7) // 8)
    common = dict(BITS=cfg.bits, SYMMETRIC=cfg.grid == "symmetric", ACCUMULATE=accumulate,
                  OUT_BF16=out.dtype == torch.bfloat16, IDX64=n >= tiles.idx64_from)
    if (span * cfg.bits) % 8 == 0 and octets * 8 <= tiles.max_row_elems:
        rows = max(1, min(tiles.rows_elems // (octets * 8), pow2(n_rows)))
        _launch(kernels.decode_rows_kernel, (triton.cdiv(n_rows, rows),), tiles,
                rows * octets * 8, packed, scales, kernel_view(out), n_rows, span,
                COL_SCALES=channel, ROWS=rows, OCTETS=octets, **common)
    else:
        _launch(kernels.decode_flat_kernel, (triton.cdiv(n, 8 * tiles.flat_octets),), tiles,
                8 * tiles.flat_octets,
                packed, scales, kernel_view(out), n, packed.numel(), span,
                BY_ROW=not channel, OCTETS=tiles.flat_octets, **common)


# ---------------------------------------------------------------------------
# The four calls (arguments already checked by aqsgd.quant)
# ---------------------------------------------------------------------------


def quantize_packed(x: torch.Tensor, cfg, seed: int | None = None):
    """x (any shape, fp32/fp16/bf16) -> (packed uint8 (ceil(n*bits/8),), scales fp16)."""
    return _encode(x, None, cfg, seed)


def dequantize_packed(packed: torch.Tensor, scales: torch.Tensor, shape, cfg,
                      dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Inverse of quantize_packed: a tensor of `shape` and `dtype` (values computed in fp32)."""
    out = torch.empty(tuple(shape), dtype=dtype, device=packed.device)
    _decode_into(packed, scales, out, cfg, accumulate=False)
    return out


def aqsgd_encode(x: torch.Tensor, m: torch.Tensor, cfg, seed: int | None = None):
    """Sender step: quantize x - m, then m += deQ (in m's dtype, in place), one fused call."""
    return _encode(x, m, cfg, seed)


def aqsgd_decode(packed: torch.Tensor, scales: torch.Tensor, m: torch.Tensor, cfg) -> torch.Tensor:
    """Receiver step: m += deQ(packed, scales) in place (in m's dtype); returns m."""
    work = m if m.is_contiguous() else m.contiguous()
    _decode_into(packed, scales, work, cfg, accumulate=True)
    if work is not m:
        m.copy_(work)
    return m
