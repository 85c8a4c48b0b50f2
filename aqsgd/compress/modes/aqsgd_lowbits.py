"""Mode ``aqsgd-lowbits``: as ``aqsgd`` with the cache stored quantized (``cache_bits``
1..8, per-token scales); both sides re-quantize m[i] after each update with
round-to-nearest, so the copies stay identical.

The receiver's stage input is m[i] + deQ(q) in fp32, before the cache re-quantizes it,
so the cache's own coarse grid adds no error to the stage input (the compressor returns
the decoded rows as they are when the cache has no stored dtype).
"""

from __future__ import annotations

from aqsgd.compress.modes.aqsgd import AQSGD
from aqsgd.compress.modes.base import Comparison

__all__ = ["AQSGDLowBits", "MODE", "COMPARISONS"]


class AQSGDLowBits(AQSGD):
    name = "aqsgd-lowbits"
    rank = 3
    wire_format = 7  # aqsgd's wire, a header[0] of its own (every mode has one)
    quantized_cache = True
    bench_cases = tuple(("fp32", b) for b in (2, 4, 8))
    smoke_case = ("fp32", 3)
    profile_bits = 2


MODE = AQSGDLowBits
COMPARISONS = (Comparison("aqsgd-lowbits", rank=3, forward="aqsgd-lowbits",
                          backward="directq", default_bits=(2, 4)),)
