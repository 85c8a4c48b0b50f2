"""Mode ``directq``: quantize the activation itself (the AQ-SGD paper's direct
quantization baseline) with the message's QuantConfig (bits, granularity, rounding,
grid, scale statistic): packed codes and fp16 scales (`base.packed_spec`).

Codes activation gradients too: the backward direction of every quantized comparison.
"""

from __future__ import annotations

import torch

from aqsgd import quant
from aqsgd.compress.modes.base import Comparison, PackedCodes

__all__ = ["DirectQ", "MODE", "COMPARISONS"]


class DirectQ(PackedCodes):
    name = "directq"
    rank = 1
    wire_format = 2
    codes_gradients = True
    bench_cases = tuple(("fp32", b) for b in (2, 3, 4, 8))
    smoke_case = ("fp32", 4)
    profile_bits = 4

    def encode(self, rows, generator, m=None) -> list[torch.Tensor]:
        packed, scales = quant.quantize_packed(rows, self.qcfg, generator)
        return [packed.contiguous(), scales.contiguous()]

    def decode(self, coded, q_shape, m=None) -> torch.Tensor:
        packed, scales = coded
        return quant.dequantize_packed(packed, scales, q_shape, self.qcfg)


MODE = DirectQ
COMPARISONS = (Comparison("directq", rank=1, forward="directq", backward="directq",
                          default_bits=(4, 8)),)
