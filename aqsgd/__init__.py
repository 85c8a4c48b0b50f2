"""AQ-SGD benchmarking suite: the library (never imports `bench`).

Importable with no GPU and no Triton: `aqsgd.quant` imports its Triton path
(`aqsgd.quant.triton_launch`) lazily, only when it dispatches to it. The quantizer's public
calls are re-exported here; the other modules are imported by name
(`from aqsgd.compress import activation`).
"""

from aqsgd.quant import (
    QuantConfig,
    aqsgd_decode,
    aqsgd_encode,
    dequantize_packed,
    packed_nbytes,
    quantize_packed,
    scale_shape,
)

__all__ = [
    "QuantConfig",
    "aqsgd_decode",
    "aqsgd_encode",
    "dequantize_packed",
    "packed_nbytes",
    "quantize_packed",
    "scale_shape",
]
