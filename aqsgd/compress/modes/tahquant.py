"""Mode ``tahquant``: TAH-Quant (He et al., arXiv 2506.01352), tile-wise adaptive Hadamard
quantization of the activation itself, no per-sample cache (aqsgd.quant.tah; the method
and the choices the paper left open: docs/compressors.md, "TAH-Quant").

The message's ``bits`` is the average budget of code bits per element: every tile of 64
channels of a token gets ``bits - 1``..``bits + 1`` bits (within 1..8) by its entropy,
after the Hadamard transform with pivot swapping; ``rounding`` is the message's. The
quantizer's other fields (granularity, group size, grid, scale statistic) do not apply.
Rows narrower than 64 channels use one tile of the next power of two (at least 8), so no
tile is mostly padding. The wire (`coded_spec`): the code stream, fp16 centres and
half-widths, uint8 widths and pivot positions, 6 bytes a tile beside the codes; its
size depends on the shape only.

One comparison, ``tahquant``, with DirectQ on the gradients as ``aqsgd`` has, so that the
two differ in the forward coding alone; default bits 3/6 (the paper reports 3-4 bits).
"""

from __future__ import annotations

import torch

from aqsgd import quant
from aqsgd.compress.modes.base import ActivationMode, Comparison
from aqsgd.compress.wire import WireSpec

__all__ = ["MODE", "COMPARISONS", "TahQuant", "tah_config"]

TILE = 64  # channels per tile (TahConfig's default: divides every GPT-2 width)


def tah_config(cfg, width: int) -> quant.TahConfig:
    """The TahConfig of a CompressionConfig for rows of `width` channels."""
    tile = TILE if width >= TILE else max(8, 1 << (width - 1).bit_length())
    return quant.TahConfig(bits=cfg.bits, tile_size=tile, min_bits=max(1, cfg.bits - 1),
                           max_bits=min(8, cfg.bits + 1), rounding=cfg.quant.rounding)


class TahQuant(ActivationMode):
    name = "tahquant"
    rank = 1.5  # between directq and aqsgd: a direct quantizer, like directq
    wire_format = 4
    codes_gradients = True  # no cache: it codes any tensor
    bench_cases = tuple(("fp32", b) for b in (2, 3, 4))
    smoke_case = ("fp32", 3)
    profile_bits = 3

    @classmethod
    def coded_spec(cls, cfg, q_shape) -> WireSpec:
        return quant.tah_wire_spec(q_shape, tah_config(cfg, q_shape[-1]))

    def encode(self, rows, generator, m=None) -> list[torch.Tensor]:
        packed = quant.tah_quantize(rows, tah_config(self.cfg, rows.shape[-1]), generator)
        return [t.contiguous() for t in packed]

    def decode(self, coded, q_shape, m=None) -> torch.Tensor:
        tcfg = tah_config(self.cfg, q_shape[-1])
        return quant.tah_dequantize(quant.TahPacked(*coded), q_shape, tcfg)


MODE = TahQuant
COMPARISONS = (Comparison("tahquant", rank=1.5, forward="tahquant", backward="directq",
                          default_bits=(3, 6)),)
