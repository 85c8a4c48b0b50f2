"""The quantizer's bit-exact contract as plain torch, written to be read, not to be fast.

Each step of docs/architecture/quant.md ("Quantizer") is one torch op on fp32 values, in the
order the contract writes it; every element looks its scale up by its flat index; bits
are packed one by one. Every other backend gives its bytes (l2 scales: within one fp16
ulp); `backend="reference"` runs it and `python -m bench.micro.kernels` times it as the
naive baseline. Arguments are checked by `aqsgd.quant`'s public calls, not here:

    packed, scales = quantize_packed(x, cfg, seed)       # x (B, L, D) -> uint8, fp16
    y = dequantize_packed(packed, scales, x.shape, cfg)
    packed, scales = aqsgd_encode(x, m, cfg, seed)       # quantizes x - m; m += deQ
    aqsgd_decode(packed, scales, m, cfg)                 # m += deQ

and under them the steps: compute_scales, quantize, dequantize, pack, unpack.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from aqsgd.quant.config import FP16_MAX, GOLDEN32, SCALE_MARGIN, QuantConfig, scale_shape

__all__ = ["aqsgd_decode", "aqsgd_encode", "compute_scales", "dequantize", "dequantize_packed",
           "pack", "quantize", "quantize_packed", "scale_index", "uniform", "unpack"]

_LOW32 = 0xFFFFFFFF


def scale_index(shape: Sequence[int], cfg: QuantConfig, device=None) -> torch.Tensor:
    """(numel,) int64: flat element i uses scale i % D (channel), i // D (token) or
    i // G (group) of the flattened scales."""
    i = torch.arange(math.prod(shape), device=device)
    if cfg.granularity == "channel":
        return i % shape[-1]
    if cfg.granularity == "token":
        return i // shape[-1]
    return i // cfg.group_size


def compute_scales(x: torch.Tensor, cfg: QuantConfig) -> torch.Tensor:
    """fp16 scales of x, shape scale_shape(x.shape, cfg)."""
    v = x.float()
    if cfg.granularity == "channel":
        groups, dim = v.reshape(-1, v.shape[-1]), 0  # (N, D): a statistic per column
    else:
        span = v.shape[-1] if cfg.granularity == "token" else cfg.group_size
        groups, dim = v.reshape(-1, span), 1  # (R, span): a statistic per row
    if cfg.scale_method == "maxabs":
        stat = groups.abs().amax(dim)  # abs first: an all-zero group gives +0
    else:
        stat = (groups * groups).mean(dim).sqrt() * 2.0
    s16 = (stat * SCALE_MARGIN).clamp(max=FP16_MAX).to(torch.float16)
    return s16.reshape(scale_shape(x.shape, cfg))


def _mul32(h: torch.Tensor, const: int) -> torch.Tensor:
    """h * const mod 2**32 for int64 h in [0, 2**32), in two halves so int64 never overflows."""
    high = ((h * (const >> 16)) & 0xFFFF) << 16
    return (high + h * (const & 0xFFFF)) & _LOW32


def uniform(seed: int, n: int, device=None) -> torch.Tensor:
    """(n,) fp32 u in [0, 1) of flat indices 0..n-1: the top 24 bits of lowbias32 of
    (index mod 2**32) ^ (seed * GOLDEN32 mod 2**32)."""
    h = (torch.arange(n, device=device) & _LOW32) ^ ((seed * GOLDEN32) & _LOW32)
    h = h ^ (h >> 16)
    h = _mul32(h, 0x7FEB352D)
    h = h ^ (h >> 15)
    h = _mul32(h, 0x846CA68B)
    h = h ^ (h >> 16)
    return (h >> 8).float() * 2.0**-24


def quantize(x: torch.Tensor, scales: torch.Tensor, cfg: QuantConfig,
             seed: int = 0) -> torch.Tensor:
    """Unpacked codes of x under `scales`: uint8 of x's shape, values 0..2**bits - 1."""
    v = x.float().reshape(-1)
    s = scales.float().reshape(-1)[scale_index(x.shape, cfg, x.device)]  # (n,) per element
    center = torch.full_like(s, cfg.center)  # Q, or h = L / 2 on the symmetric grid
    inv = torch.where(s == 0, 0.0, center / s)  # tensor / tensor: one IEEE division
    t = v * inv
    if cfg.symmetric:
        t = t + center
    u = uniform(seed, v.numel(), x.device) if cfg.stochastic else 0.5
    r = torch.floor(t + u)
    if cfg.symmetric:
        codes = r.clamp(0, cfg.code_max)
    else:
        q = 1 << (cfg.bits - 1)
        codes = r.clamp(-q, q - 1) + q
    return codes.to(torch.uint8).reshape(x.shape)


def dequantize(codes: torch.Tensor, scales: torch.Tensor, cfg: QuantConfig,
               dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """(c - center) * (s / center) in fp32, rounded once to `dtype`, codes' shape."""
    s = scales.float().reshape(-1)[scale_index(codes.shape, cfg, codes.device)]
    center = torch.full_like(s, cfg.center)
    step = s / center  # tensor / tensor: one IEEE division
    values = (codes.reshape(-1).float() - center) * step
    return values.to(dtype).reshape(codes.shape)


def pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Dense little-endian stream of uint8 codes (flat order): bit j of code k is stream bit
    k * bits + j, stream bit i is bit i % 8 of byte i // 8, padding bits are 0.
    uint8 (ceil(n * bits / 8),)."""
    shifts = torch.arange(bits, dtype=torch.uint8, device=codes.device)
    stream = ((codes.reshape(-1, 1) >> shifts) & 1).reshape(-1)  # (n * bits,) one bit each
    stream = torch.cat([stream, stream.new_zeros(-stream.numel() % 8)])  # padding bits
    weights = torch.tensor([1 << i for i in range(8)], dtype=torch.uint8, device=codes.device)
    return (stream.view(-1, 8) * weights).sum(1).to(torch.uint8)


def unpack(packed: torch.Tensor, bits: int, n: int) -> torch.Tensor:
    """The n codes of a stream made by `pack`: uint8 (n,)."""
    shifts = torch.arange(8, dtype=torch.uint8, device=packed.device)
    stream = ((packed.reshape(-1, 1) >> shifts) & 1).reshape(-1)  # (8 * bytes,) one bit each
    code_bits = stream[: n * bits].view(n, bits)  # (n, bits): bit j of code k
    weights = torch.tensor([1 << j for j in range(bits)], dtype=torch.uint8,
                           device=packed.device)
    return (code_bits * weights).sum(1).to(torch.uint8)


def quantize_packed(x: torch.Tensor, cfg: QuantConfig,
                    seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """x (fp32/fp16/bf16) -> (packed uint8 stream, fp16 scales)."""
    scales = compute_scales(x, cfg)
    return pack(quantize(x, scales, cfg, seed), cfg.bits), scales


def dequantize_packed(packed: torch.Tensor, scales: torch.Tensor, shape: Sequence[int],
                      cfg: QuantConfig, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """(packed, scales) -> values of `shape` in `dtype`."""
    codes = unpack(packed, cfg.bits, math.prod(shape)).reshape(tuple(shape))
    return dequantize(codes, scales, cfg, dtype)


def aqsgd_encode(x: torch.Tensor, m: torch.Tensor, cfg: QuantConfig,
                 seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Sender step: quantize delta = x.float() - m.float(); then, in place,
    m <- (m.float() + deQ(codes)).to(m.dtype). Returns (packed, scales)."""
    delta = x.float() - m.float()
    scales = compute_scales(delta, cfg)
    codes = quantize(delta, scales, cfg, seed)
    m.copy_((m.float() + dequantize(codes, scales, cfg)).to(m.dtype))
    return pack(codes, cfg.bits), scales


def aqsgd_decode(packed: torch.Tensor, scales: torch.Tensor, m: torch.Tensor,
                 cfg: QuantConfig) -> torch.Tensor:
    """Receiver step: m <- (m.float() + deQ(packed, scales)).to(m.dtype) in place; returns m."""
    m.copy_((m.float() + dequantize_packed(packed, scales, m.shape, cfg)).to(m.dtype))
    return m
