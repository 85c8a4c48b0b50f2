"""The activation quantizers: AQ-SGD / DirectQ (QuantConfig) and TAH-Quant (TahConfig).

    cfg = QuantConfig(bits=4)                      # per-channel max-abs, reference grid
    packed, scales = quantize_packed(x, cfg)       # x (B, L, D) -> uint8 stream, (D,) fp16
    y = dequantize_packed(packed, scales, x.shape, cfg)
    packed, scales = aqsgd_encode(x, m_send, cfg)  # quantizes x - m, m += deQ in place
    aqsgd_decode(packed, scales, m_recv, cfg)      # m_recv == m_send, bit for bit
    packed = tah_quantize(x, TahConfig(bits=3.0))  # aqsgd.quant.tah

Each call checks its arguments, draws the stochastic-rounding seed once (`draw_seed`) and
runs the backend `aqsgd.quant.backends.backend_for` picks (`backend`: "auto", "torch",
"triton", "reference"); every backend gives the same bytes. The contract, the backends and
why each exists: docs/architecture/quant.md, "Quantizer". Imports torch and pydantic; Triton
and the C++ build only when a call goes there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from aqsgd.quant.backends import (
    BACKENDS,
    backend_for,
    check_config,
    check_dtype,
    check_part,
    check_tensor,
)
from aqsgd.quant.bitpack import packed_nbytes
from aqsgd.quant.config import (
    CACHE_DTYPES,
    GRANULARITIES,
    GRIDS,
    ROUNDINGS,
    SCALE_DTYPE,
    SCALE_METHODS,
    Bits,
    QuantConfig,
    draw_seed,
    scale_shape,
)
from aqsgd.quant.tah import (
    TahConfig,
    TahPacked,
    tah_dequantize,
    tah_quantize,
    tah_wire_nbytes,
    tah_wire_spec,
)

__all__ = [
    "BACKENDS",
    "Bits",
    "GRANULARITIES",
    "GRIDS",
    "QuantConfig",
    "ROUNDINGS",
    "SCALE_METHODS",
    "TahConfig",
    "TahPacked",
    "aqsgd_decode",
    "aqsgd_encode",
    "backend_for",
    "dequantize_packed",
    "draw_seed",
    "packed_nbytes",
    "quantize_packed",
    "scale_shape",
    "tah_dequantize",
    "tah_quantize",
    "tah_wire_nbytes",
    "tah_wire_spec",
]


# ---------------------------------------------------------------------------
# Argument checks
# ---------------------------------------------------------------------------


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


def _check_message(packed, scales, shape: tuple[int, ...], cfg: QuantConfig, device) -> None:
    """`packed` and `scales` are what quantize_packed gives for a tensor of `shape` (on
    `device`; None: the device of `packed`)."""
    n, bits = math.prod(shape), cfg.bits
    check_part(packed, "packed", (packed_nbytes(n, bits),), torch.uint8, device,
               f" (packed_nbytes({n}, {bits}) bytes for shape {shape})")
    check_part(scales, "scales", scale_shape(shape, cfg), SCALE_DTYPE, packed.device,
               f" for x of shape {shape}")


# ---------------------------------------------------------------------------
# The public calls
# ---------------------------------------------------------------------------


def quantize_packed(x: torch.Tensor, cfg: QuantConfig, generator: torch.Generator | None = None,
                    backend: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """x (fp32/fp16/bf16, any device) -> (packed uint8 (packed_nbytes(numel, bits),),
    scales fp16 scale_shape(x.shape, cfg))."""
    check_config(cfg, QuantConfig)
    check_tensor(x)
    scale_shape(x.shape, cfg)
    seed = draw_seed(generator, cfg)
    run = backend_for(cfg, backend, x.device)
    return run.quantize_packed(x.contiguous(), cfg, seed)


def dequantize_packed(packed: torch.Tensor, scales: torch.Tensor, shape: Sequence[int],
                      cfg: QuantConfig, dtype: torch.dtype = torch.float32,
                      backend: str = "auto") -> torch.Tensor:
    """(packed, scales) -> values of `shape` in `dtype` (fp32/fp16/bf16)."""
    check_config(cfg, QuantConfig)
    shape = tuple(int(d) for d in shape)
    _check_message(packed, scales, shape, cfg, None)
    check_dtype(dtype)
    run = backend_for(cfg, backend, packed.device)
    return run.dequantize_packed(packed.contiguous(), scales.contiguous(), shape, cfg, dtype)


def aqsgd_encode(x: torch.Tensor, m: torch.Tensor, cfg: QuantConfig,
                 generator: torch.Generator | None = None,
                 backend: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """Sender step: quantize x.float() - m.float(); m <- (m.float() + deQ).to(m.dtype) in
    place. Returns (packed, scales) as quantize_packed does."""
    check_config(cfg, QuantConfig)
    check_tensor(x)
    _check_cache(m, x)
    scale_shape(x.shape, cfg)
    seed = draw_seed(generator, cfg)
    run = backend_for(cfg, backend, x.device)
    return run.aqsgd_encode(x.contiguous(), m, cfg, seed)


def aqsgd_decode(packed: torch.Tensor, scales: torch.Tensor, m: torch.Tensor, cfg: QuantConfig,
                 backend: str = "auto") -> torch.Tensor:
    """Receiver step: m <- (m.float() + deQ(packed, scales)).to(m.dtype) in place; returns m."""
    check_config(cfg, QuantConfig)
    if not isinstance(m, torch.Tensor):
        raise TypeError(f"m must be a torch.Tensor, got {type(m).__name__}")
    _check_cache(m, m)
    _check_message(packed, scales, tuple(m.shape), cfg, m.device)
    run = backend_for(cfg, backend, m.device)
    return run.aqsgd_decode(packed.contiguous(), scales.contiguous(), m, cfg)
