"""Mode ``none``: every row sent raw in the transport dtype (``CompressionConfig.dtype``:
fp32, fp16 or bf16); the comparison's uncompressed reference, ``fp32`` (the half-precision
references ``bf16`` and ``fp16`` run on it too: aqsgd/compress/modes/half.py).

No warm-up, no cache, nothing coded: the compressor's raw framing is the whole message.
"""

from __future__ import annotations

from aqsgd.compress.modes.base import ActivationMode, Comparison

__all__ = ["NoCompression", "MODE", "COMPARISONS"]


class NoCompression(ActivationMode):
    name = "none"
    rank = 0
    codes_rows = False
    codes_gradients = True
    # "bits" of a raw case: the transport dtype's width, for the table only
    bench_cases = (("fp32", 32), ("bf16", 16), ("fp16", 16))
    smoke_case = ("fp32", 32)


MODE = NoCompression
COMPARISONS = (Comparison("fp32", rank=0, forward="none", backward="none",
                          speedup_reference=True),)
