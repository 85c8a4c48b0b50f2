"""Host side of TAH-Quant's Triton path: launch geometry and the two calls
(`aqsgd.quant.backends` loads it only when a call goes to Triton), with the signatures of
`aqsgd.quant.tah_torch` and `aqsgd.quant.tah_reference`, arguments already checked:

    packed = quantize_packed(x, cfg, seed)              # stats, allocation, encode
    y = dequantize_packed(packed, shape, cfg, dtype)    # one pass
    y = hadamard_tiles(v)                               # the transform alone, (T, G) fp32

What each kernel does: docs/architecture/quant.md, "The Triton kernels".
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import triton

from aqsgd.quant import tah_triton_kernels as kernels
from aqsgd.quant.tah_config import (
    ENTROPY_BINS,
    TahConfig,
    TahPacked,
    code_bits,
    entropy_table,
    from_tiles,
    tile_count,
    to_tiles,
)
from aqsgd.quant.tah_reference import allocate_bits
from aqsgd.quant.triton_host import INT32_LIMIT, device_kind, kernel_view, launch, seed_arg
from aqsgd.quant.triton_host import interpreted as _interpreted_kernel

__all__ = ["dequantize_packed", "hadamard_tiles", "quantize_packed"]

_TILE_ELEMENTS = {"cuda": 2048, "interpreter": 1 << 16}  # elements per program
_ELEMS_PER_THREAD = {"cuda": 8, "interpreter": 1 << 16}  # sets num_warps


def _interpreted() -> bool:
    """Were the kernels built by the Triton interpreter (TRITON_INTERPRET=1 at import)?"""
    return _interpreted_kernel(kernels.stats_kernel)


def _geometry(t: torch.Tensor, n_tiles: int, size: int) -> dict:
    """Grid and meta-parameters shared by the kernels."""
    kind = device_kind(t, kernels.stats_kernel, __name__)
    rows = max(1, min(_TILE_ELEMENTS[kind] // size, triton.next_power_of_2(n_tiles)))
    warps = min(16, max(1, rows * size // (32 * _ELEMS_PER_THREAD[kind])))
    norm = torch.tensor(1.0 / math.sqrt(size), dtype=torch.float32).item()  # an fp32 value
    return dict(grid=(triton.cdiv(n_tiles, rows),), num_warps=warps,
                meta=dict(G=size, LOG_G=size.bit_length() - 1, ROWS=rows, NORM=norm,
                          IDX64=n_tiles * size >= INT32_LIMIT))


def _launch(kernel, geo: dict, *args, **meta) -> None:
    launch(kernel, geo["grid"], geo["num_warps"], *args, **geo["meta"], **meta)


def _offsets(bits: torch.Tensor, size: int) -> torch.Tensor:
    nbytes = bits.long() * (size // 8)
    return torch.cumsum(nbytes, 0) - nbytes  # first byte of each tile


def hadamard_tiles(v: torch.Tensor) -> torch.Tensor:
    """The orthonormal transform of every row of v (T, G) fp32 (tah_reference.hadamard)."""
    n_tiles, size = v.shape
    out = torch.empty_like(v)
    geo = _geometry(v, n_tiles, size)
    meta = {k: geo["meta"][k] for k in ("G", "LOG_G", "ROWS", "NORM", "IDX64")}
    launch(kernels.hadamard_kernel, geo["grid"], geo["num_warps"], v.contiguous(), out,
           n_tiles, **meta)
    return out


def quantize_packed(x: torch.Tensor, cfg: TahConfig, seed: int = 0) -> TahPacked:
    """x (fp32/fp16/bf16, rows zero-padded to a multiple of tile_size) -> TahPacked."""
    size, dev = cfg.tile_size, x.device
    n_tiles = tile_count(x.shape, cfg)
    xk = kernel_view(to_tiles(x.contiguous(), cfg).contiguous())
    geo = _geometry(x, n_tiles, size)
    flags = dict(HADAMARD=cfg.hadamard, PIVOT=cfg.pivot_swap, X_BF16=x.dtype == torch.bfloat16)
    centres = torch.empty(n_tiles, dtype=torch.float16, device=dev)
    scales = torch.empty_like(centres)
    pivots = torch.empty(n_tiles if cfg.pivot_swap else 0, dtype=torch.uint8, device=dev)
    keys = torch.empty(n_tiles, dtype=torch.int64, device=dev)
    pivot_arg = pivots if cfg.pivot_swap else keys  # unread without PIVOT
    _launch(kernels.stats_kernel, geo, xk, centres, scales, pivot_arg, keys,
            entropy_table(size, dev), n_tiles, BINS=ENTROPY_BINS, **flags)
    bits = allocate_bits(keys, x.shape, cfg)
    codes = torch.empty(code_bits(x.shape, cfg) // 8, dtype=torch.uint8, device=dev)
    _launch(kernels.encode_kernel, geo, xk, centres, scales, bits, pivot_arg,
            _offsets(bits, size), codes, n_tiles, seed_arg(seed, cfg.stochastic),
            STOCHASTIC=cfg.stochastic, **flags)
    return TahPacked(codes, centres, scales, bits, pivots)


def dequantize_packed(packed: TahPacked, shape: Sequence[int], cfg: TahConfig,
                      dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """TahPacked -> values of `shape` in `dtype` (computed in fp32, rounded once)."""
    size = cfg.tile_size
    n_tiles = packed.bits.numel()
    out = torch.empty(n_tiles, size, dtype=dtype, device=packed.codes.device)
    geo = _geometry(out, n_tiles, size)
    pivot_arg = packed.pivots if cfg.pivot_swap else packed.bits  # unread without PIVOT
    _launch(kernels.decode_kernel, geo, packed.codes, packed.centers, packed.scales,
            packed.bits, pivot_arg, _offsets(packed.bits, size), kernel_view(out), n_tiles,
            HADAMARD=cfg.hadamard, PIVOT=cfg.pivot_swap, OUT_BF16=dtype == torch.bfloat16)
    return from_tiles(out, shape)
