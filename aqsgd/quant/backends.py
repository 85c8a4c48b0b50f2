"""The one config -> backend table of every quantizer, and the argument checks they share.

    run = backend_for(cfg, "auto", x.device)   # a module: quantize_packed(x, cfg, seed), ...
    check_config(cfg, QuantConfig); check_tensor(x, "x"); check_dtype(dtype)

A quantizer is its config class (QuantConfig: AQ-SGD and DirectQ; TahConfig: TAH-Quant);
each backend is a module with that quantizer's functions. "auto" runs the fused C++
kernels on CPU where the quantizer has them and they build (else the torch path, with a
RuntimeWarning from aqsgd.quant.fused saying why), Triton on CUDA where it imports, the
torch path otherwise. Modules load lazily (Triton only when a call goes there).
`with auto_means("torch"):` makes "auto" the torch path inside the block, in this thread
or task only (a contextvar): the registry's check of a mode runs there, so checking the
compressors builds nothing (the kernels are built before the first cell, by the harness,
with their time printed).
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
from collections.abc import Iterator
from types import ModuleType

import torch

from aqsgd.quant.config import INPUT_DTYPES, QuantConfig
from aqsgd.quant.tah_config import TahConfig

__all__ = ["BACKENDS", "TABLE", "auto_means", "backend_for", "check_config", "check_dtype",
           "check_part", "check_tensor"]

_AUTO: contextvars.ContextVar[str | None] = contextvars.ContextVar("auto_backend",
                                                                   default=None)


@contextlib.contextmanager
def auto_means(backend: str) -> Iterator[None]:
    """Inside the block, backend "auto" is `backend` (module docstring)."""
    if backend not in BACKENDS or backend == "auto":
        raise ValueError(f"backend must be one of {list(BACKENDS[1:])}, got {backend!r}")
    token = _AUTO.set(backend)
    try:
        yield
    finally:
        _AUTO.reset(token)

BACKENDS = ("auto", "torch", "triton", "reference")

# config class -> backend -> module (under aqsgd.quant); "fused" is what "auto" tries on CPU
TABLE: dict[type, dict[str, str]] = {
    QuantConfig: {"fused": "fused", "torch": "cpu", "triton": "triton_launch",
                  "reference": "reference"},
    TahConfig: {"torch": "tah_torch", "triton": "tah_triton_launch",
                "reference": "tah_reference"},
}


def _load(name: str) -> ModuleType:
    return importlib.import_module(f"aqsgd.quant.{name}")


def _triton_imports() -> bool:
    try:
        import triton  # noqa: F401  (only probing that it imports)
    except ImportError:
        return False
    return True


def backend_for(cfg, backend: str, device: torch.device) -> ModuleType:
    """The module that runs a call of quantizer `cfg` (a config in TABLE) on `device`."""
    modules = TABLE[type(cfg)]
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {list(BACKENDS)}, got {backend!r}")
    if backend == "auto" and _AUTO.get() is not None:
        backend = _AUTO.get()
    if backend == "auto":
        if device.type == "cpu" and "fused" in modules and _load("fused").available():
            backend = "fused"
        elif device.type == "cuda" and _triton_imports():
            backend = "triton"
        else:
            backend = "torch"
    return _load(modules[backend])


def check_config(cfg, cls: type) -> None:
    """`cfg` is a `cls` (the config of the quantizer called)."""
    if not isinstance(cfg, cls):
        raise TypeError(f"cfg must be a {cls.__name__}, got {type(cfg).__name__}")


def check_tensor(x, name: str = "x") -> None:
    """`x` is a float32, float16 or bfloat16 tensor."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in INPUT_DTYPES:
        raise TypeError(f"{name} must be float32, float16 or bfloat16, got dtype {x.dtype}")


def check_part(t, name: str, shape: tuple[int, ...], dtype: torch.dtype, device,
               of: str = "") -> None:
    """`t` is a `dtype` tensor of `shape` (`of` says why that one) on `device` (None: any),
    as one part of a quantized tensor must be."""
    if not isinstance(t, torch.Tensor) or t.dtype != dtype:
        got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
        raise TypeError(f"{name} must be a {dtype} tensor, got {got}")
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}{of}, got {tuple(t.shape)}")
    if device is not None and t.device != device:
        raise ValueError(f"{name} must be on {device}, got {t.device}")


def check_dtype(dtype) -> None:
    """`dtype` is one a dequantize may return."""
    if dtype not in INPUT_DTYPES:
        raise TypeError(f"dtype must be float32, float16 or bfloat16, got {dtype}")
