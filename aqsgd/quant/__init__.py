"""The activation quantizer: QuantConfig, the four fused calls, their argument checks and
their dispatch to a backend. Imports only torch, aqsgd.filecache (where
`aqsgd.quant.fused` caches its build) and Triton lazily (through
`aqsgd.quant.triton_launch`, only when a call dispatches there); nothing else of aqsgd.

    cfg = QuantConfig(bits=4)                      # per-channel max-abs, reference grid
    packed, scales = quantize_packed(x, cfg)       # x (B, L, D) -> uint8 stream, (D,) fp16
    y = dequantize_packed(packed, scales, x.shape, cfg)
    packed, scales = aqsgd_encode(x, m_send, cfg)  # quantizes x - m, m += deQ in place
    aqsgd_decode(packed, scales, m_recv, cfg)      # m_recv == m_send, bit for bit

The contract (docs/ARCHITECTURE.md, "Quantizer") fixes every rounding step, so every
backend gives the same bytes. Each public call checks its arguments, draws the
stochastic-rounding seed once from the caller's generator (`draw_seed`), then runs a
backend module; all four modules below have the same four functions
(`quantize_packed(x, cfg, seed)`, `dequantize_packed(packed, scales, shape, cfg, dtype)`,
`aqsgd_encode(x, m, cfg, seed)`, `aqsgd_decode(packed, scales, m, cfg)`):

- `aqsgd.quant.fused` (+ `fused_kernels.cpp`, `fused_*.h`): the fused C++ kernels for
  CPU tensors, built on first use; what `backend="auto"` runs on CPU (where they cannot be built:
  `aqsgd.quant.cpu`, with a RuntimeWarning saying why);
- `aqsgd.quant.cpu`: chunked torch (`backend="torch"`; what CUDA runs without Triton);
- `aqsgd.quant.triton_launch` (+ `triton_kernels`): the Triton kernels;
- `aqsgd.quant.reference`: the contract in plain, readable torch, which the other three
  are tested against and `python -m bench.micro.kernels` times as its naive baseline; no
  `backend` picks it.

`aqsgd.quant.config` holds QuantConfig, scale_shape, draw_seed and the contract's
constants; `aqsgd.quant.bitpack` the dense bit packing. TAH-Quant (tile-wise adaptive
Hadamard quantization, no cache) has its own calls, `tah_quantize` / `tah_dequantize`
with `TahConfig`, in `aqsgd.quant.tah` (contract in `aqsgd.quant.tah_reference`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from aqsgd.quant import cpu, fused
from aqsgd.quant.bitpack import packed_nbytes
from aqsgd.quant.config import (
    CACHE_DTYPES,
    GRANULARITIES,
    GRIDS,
    INPUT_DTYPES,
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

BACKENDS = ("auto", "torch", "triton")


# ---------------------------------------------------------------------------
# Argument checks
# ---------------------------------------------------------------------------


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
# Dispatch and the public calls
# ---------------------------------------------------------------------------


def _backend_for(backend: str, device: torch.device):
    """The module that runs a call: "auto" runs aqsgd.quant.fused on CPU when its kernels
    build (else, warning once, aqsgd.quant.cpu) and aqsgd.quant.triton_launch on CUDA when
    Triton imports; "torch" is aqsgd.quant.cpu, the torch path, on any device."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {list(BACKENDS)}, got {backend!r}")
    if backend == "torch":
        return cpu
    if backend == "auto":
        if device.type == "cpu":
            return fused if fused.available() else cpu
        if device.type != "cuda":
            return cpu
        try:
            import triton  # noqa: F401  (only probing that it imports)
        except ImportError:
            return cpu
    from aqsgd.quant import triton_launch  # lazy: imports Triton

    return triton_launch


def quantize_packed(x: torch.Tensor, cfg: QuantConfig, generator: torch.Generator | None = None,
                    backend: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """x (fp32/fp16/bf16, any device) -> (packed uint8 (packed_nbytes(numel, bits),),
    scales fp16 scale_shape(x.shape, cfg))."""
    _check_config(cfg)
    _check_input(x)
    scale_shape(x.shape, cfg)
    seed = draw_seed(generator, cfg)
    run = _backend_for(backend, x.device)
    x = x.contiguous()
    return run.quantize_packed(x, cfg, seed)


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
    run = _backend_for(backend, packed.device)
    return run.dequantize_packed(packed.contiguous(), scales.contiguous(), shape, cfg, dtype)


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
    run = _backend_for(backend, x.device)
    x = x.contiguous()
    return run.aqsgd_encode(x, m, cfg, seed)


def aqsgd_decode(packed: torch.Tensor, scales: torch.Tensor, m: torch.Tensor, cfg: QuantConfig,
                 backend: str = "auto") -> torch.Tensor:
    """Receiver step: m <- (m.float() + deQ(packed, scales)).to(m.dtype) in place; returns m."""
    _check_config(cfg)
    if not isinstance(m, torch.Tensor):
        raise TypeError(f"m must be a torch.Tensor, got {type(m).__name__}")
    _check_cache(m, m)
    _check_packed(packed, m.numel(), cfg.bits, m.device, f" for m of shape {tuple(m.shape)}")
    _check_scales(scales, tuple(m.shape), cfg, m.device)
    run = _backend_for(backend, m.device)
    return run.aqsgd_decode(packed.contiguous(), scales.contiguous(), m, cfg)
