"""TAH-Quant's public calls: argument checks, then the backend aqsgd.quant.backends picks.

    cfg = TahConfig(bits=3.0)                  # tiles of 64, 2..4 bits, Hadamard + pivot
    packed = tah_quantize(x, cfg)              # x (..., D) -> TahPacked (5 tensors)
    y = tah_dequantize(packed, x.shape, cfg)
    tah_wire_nbytes(x.shape, cfg)              # == the bytes of packed, whatever x holds

The method and its choices: docs/compressors.md ("TAH-Quant"); the config and wire sizes
in `aqsgd.quant.tah_config`; backends `tah_torch`, `tah_triton_launch`, `tah_reference`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from aqsgd.quant.backends import (
    backend_for,
    check_config,
    check_dtype,
    check_part,
    check_tensor,
)
from aqsgd.quant.config import draw_seed
from aqsgd.quant.tah_config import (
    TahConfig,
    TahPacked,
    code_bits,
    tah_wire_nbytes,
    tah_wire_spec,
    tile_count,
)

__all__ = [
    "TahConfig",
    "TahPacked",
    "tah_dequantize",
    "tah_quantize",
    "tah_wire_nbytes",
    "tah_wire_spec",
]

# ---------------------------------------------------------------------------
# Argument checks and the public calls
# ---------------------------------------------------------------------------


def _check_packed(packed, shape: tuple[int, ...], cfg: TahConfig) -> None:
    if not isinstance(packed, tuple) or len(packed) != len(TahPacked._fields):
        raise TypeError(f"packed must be a TahPacked of {len(TahPacked._fields)} tensors, "
                        f"got {type(packed).__name__}")
    device = packed[0].device if isinstance(packed[0], torch.Tensor) else None
    specs = tah_wire_spec(shape, cfg)
    for name, tensor, (want_shape, want_dtype) in zip(TahPacked._fields, packed, specs,
                                                      strict=True):
        check_part(tensor, f"packed.{name}", want_shape, want_dtype, device,
                   f" for x of shape {shape} under {cfg}")
    bits = packed.bits.long()
    low, high = int(bits.min()), int(bits.max())
    if low < cfg.min_bits or high > cfg.max_bits:
        raise ValueError(f"packed.bits must be in {cfg.min_bits}..{cfg.max_bits}, got values "
                         f"{low}..{high}")
    total = int(bits.sum()) * cfg.tile_size
    if total != code_bits(shape, cfg):
        raise ValueError(f"packed.bits must sum to {code_bits(shape, cfg) // cfg.tile_size} "
                         f"(the budget's code bits / tile_size), got {total // cfg.tile_size}")
    if cfg.pivot_swap and int(packed.pivots.max()) >= cfg.tile_size:
        raise ValueError(f"packed.pivots must be < tile_size={cfg.tile_size}, "
                         f"got {int(packed.pivots.max())}")


def tah_quantize(x: torch.Tensor, cfg: TahConfig, generator: torch.Generator | None = None,
                 backend: str = "auto") -> TahPacked:
    """x (fp32/fp16/bf16, any device; rows zero-padded to a multiple of cfg.tile_size)
    -> TahPacked, whose tensors hold exactly tah_wire_nbytes(x.shape, cfg) bytes."""
    check_config(cfg, TahConfig)
    check_tensor(x)
    tile_count(x.shape, cfg)
    seed = draw_seed(generator, cfg)
    run = backend_for(cfg, backend, x.device)
    return run.quantize_packed(x.contiguous(), cfg, seed)


def tah_dequantize(packed: TahPacked, shape: Sequence[int], cfg: TahConfig,
                   dtype: torch.dtype = torch.float32, backend: str = "auto") -> torch.Tensor:
    """TahPacked -> values of `shape` in `dtype` (fp32/fp16/bf16) on the packed's device."""
    check_config(cfg, TahConfig)
    shape = tuple(int(d) for d in shape)
    _check_packed(packed, shape, cfg)
    check_dtype(dtype)
    run = backend_for(cfg, backend, packed.codes.device)
    packed = TahPacked(*(t.contiguous() for t in packed))
    return run.dequantize_packed(packed, shape, cfg, dtype)
