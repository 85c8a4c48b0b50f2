"""Mode ``tahquant-pub``: TAH-Quant as its authors' public code runs it (aqsgd.quant.tahpub),
beside ``tahquant``, the suite's reading of the paper (how the two differ and why:
docs/tahquant-pub.md).

The message's ``bits`` is the high width; the low width is one less (at least 1), so
``tahquant-pub:4/8`` is the published default pair, 4 and 3 bits, with DirectQ at 8 bits
on the gradients. The lowest-entropy 20% of each sample's tokens get the low width; tiles
of 64 channels (rows narrower than 64: one tile of the next power of two, at least 8).
Rounding is to nearest only (the published code's); the quantizer's other options do not
apply. The wire (`coded_spec`) is sized for the worst case, as the published receive
buffer is: room for a 6-bit pivot index on every tile, of which only the transformed
tiles' are used; the byte counters count that whole buffer.
"""

from __future__ import annotations

import torch

from aqsgd.compress.modes.base import ActivationMode, Comparison
from aqsgd.compress.wire import WireSpec
from aqsgd.quant import tahpub
from aqsgd.quant.tah_config import MIN_TILE
from aqsgd.quant.tahpub_config import TahPubConfig, TahPubPacked, wire_spec

__all__ = ["MODE", "COMPARISONS", "TahQuantPub", "pub_config"]

TILE = 64  # the published default


def pub_config(cfg, width: int) -> TahPubConfig:
    """The TahPubConfig of a CompressionConfig for rows of `width` channels."""
    if cfg.quant.rounding != "nearest":
        raise ValueError(f"mode tahquant-pub rounds to nearest, as its published code does: "
                         f"rounding must be 'nearest', got {cfg.quant.rounding!r}")
    tile = TILE if width >= TILE else max(MIN_TILE, 1 << (width - 1).bit_length())
    return TahPubConfig(high_bits=cfg.quant.bits, low_bits=max(1, cfg.quant.bits - 1),
                        tile_size=tile)


class TahQuantPub(ActivationMode):
    name = "tahquant-pub"
    rank = 1.6  # beside tahquant
    wire_format = 5
    bench_cases = tuple(("fp32", b) for b in (2, 3, 4))
    smoke_case = ("fp32", 4)
    profile_bits = 4

    @classmethod
    def coded_spec(cls, cfg, q_shape) -> WireSpec:
        return wire_spec(q_shape, pub_config(cfg, q_shape[-1]))

    def encode(self, rows, generator, m=None) -> list[torch.Tensor]:
        return list(tahpub.quantize(rows, pub_config(self.cfg, rows.shape[-1])))

    def decode(self, coded, q_shape, m=None) -> torch.Tensor:
        return tahpub.dequantize(TahPubPacked(*coded), q_shape,
                                 pub_config(self.cfg, q_shape[-1]))


MODE = TahQuantPub
COMPARISONS = (Comparison("tahquant-pub", rank=1.6, forward="tahquant-pub",
                          backward="directq", default_bits=(4, 8)),)
