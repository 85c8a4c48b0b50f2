"""What the Triton paths of every quantizer share on the host side: which kind of device
runs the kernels, the bf16 view, the seed argument and the launch call.

    kind = device_kind(x, kernels.encode_kernel, "aqsgd.quant.tah_triton_launch")
    launch(kernels.encode_kernel, grid, warps, xk, ..., BITS=4)

`aqsgd.quant.triton_launch` (AQ-SGD, DirectQ) and `aqsgd.quant.tah_triton_launch`
(TAH-Quant) import it; it imports Triton. Under the interpreter (TRITON_INTERPRET=1 set
before the kernels are imported, CPU tensors) a program costs milliseconds, so both use
few, large programs there and a few thousand elements per program on CUDA.
"""

from __future__ import annotations

import math

import torch
import triton

from aqsgd.quant.config import GOLDEN32

__all__ = ["INT32_LIMIT", "device_kind", "interpreted", "kernel_view", "launch", "pow2",
           "seed_arg"]

INT32_LIMIT = 2**31 - 2**20  # int32 index headroom: larger tensors use int64 indices


def interpreted(kernel) -> bool:
    """Was `kernel` built by the Triton interpreter (TRITON_INTERPRET=1 at its import)?"""
    return not isinstance(kernel, triton.runtime.JITFunction)


def device_kind(t: torch.Tensor, kernel, module: str) -> str:
    """"interpreter" or "cuda": the launch geometry `module`'s kernels use for `t`."""
    if interpreted(kernel):
        return "interpreter"
    if t.device.type == "cuda":
        return "cuda"
    raise RuntimeError(
        f"{module}: tensors on device {t.device} need the Triton interpreter "
        "(TRITON_INTERPRET=1 set before the kernels are imported); Triton compiles for CUDA")


def kernel_view(t: torch.Tensor) -> torch.Tensor:
    """The kernels read and write bf16 through int16 views (aqsgd.quant.triton_kernels)."""
    return t.view(torch.int16) if t.dtype == torch.bfloat16 else t


def seed_arg(seed: int | None, stochastic: bool) -> int:
    """The kernels' seed argument: seed * GOLDEN32 mod 2**32 as an int32 bit pattern."""
    if not stochastic:
        return 0
    if seed is None:
        raise ValueError("rounding='stochastic' needs a seed, got seed=None")
    mix = (int(seed) * GOLDEN32) % 2**32
    return mix - 2**32 if mix >= 2**31 else mix


def pow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 << max(0, math.ceil(math.log2(max(n, 1))))


def launch(kernel, grid, warps: int, *args, **meta) -> None:
    """One launch; no fused multiply-add, so the arithmetic is the reference's, bit for bit."""
    kernel[grid](*args, **meta, num_warps=warps, enable_fp_fusion=False)
