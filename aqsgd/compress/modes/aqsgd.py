"""Mode ``aqsgd``: quantize the change since the sample's last visit, delta = x - m[i],
against the per-sample cache m held by both sides (aqsgd.compress.cache, ``cache_dtype``
fp16 or fp32), with the same packed codes and scales as directq.

Delta rows go through quant.aqsgd_encode / aqsgd_decode (one fused pass on CUDA), which
update m[i] in place; the compressor writes it back. The receiver's stage input is the
updated cache row m[i] itself, in the cache's dtype, as in the AQ-SGD authors' code.

Two comparisons: ``aqsgd`` (DirectQ backward) and ``aqsgd+gc``, the same plus a
compressed data-parallel gradient exchange (QuantizedAdam unless the sweep names one).
"""

from __future__ import annotations

import torch

from aqsgd import quant
from aqsgd.compress.modes.base import Comparison, PackedCodes

__all__ = ["AQSGD", "MODE", "COMPARISONS"]


class AQSGD(PackedCodes):
    name = "aqsgd"
    rank = 2
    wire_format = 3
    uses_cache = True
    bench_cases = tuple(("fp32", b) for b in (2, 3, 4, 8))
    smoke_case = ("fp32", 2)
    profile_bits = 2

    def encode(self, rows, generator, m=None) -> list[torch.Tensor]:
        packed, scales = quant.aqsgd_encode(rows, m, self.qcfg, generator)
        return [packed.contiguous(), scales.contiguous()]

    def decode(self, coded, q_shape, m=None) -> torch.Tensor:
        packed, scales = coded
        quant.aqsgd_decode(packed, scales, m, self.qcfg)  # m += deQ, in place
        return m


MODE = AQSGD
COMPARISONS = (
    Comparison("aqsgd", rank=2, forward="aqsgd", backward="directq", default_bits=(2, 4)),
    Comparison("aqsgd+gc", rank=4, forward="aqsgd", backward="directq", default_bits=(2, 4),
               data_parallel=True),
)
