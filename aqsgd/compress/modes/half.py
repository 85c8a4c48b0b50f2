"""The half-precision transports ``bf16`` and ``fp16``: the comparison's references a
system of today sends by default. Activations and their gradients go on the wire cast to
the half dtype (2 bytes an element, half of fp32's), both directions, nothing else
coded; the receiver widens them back to fp32. They run on mode ``none``
(`CompressionConfig.dtype` "bf16" / "fp16"), so this module declares no mode of its
own, only the two comparisons. Only the pipeline's messages change: evaluation messages
travel in fp32 (aqsgd.compress.activation), and with replicas the data-parallel exchange
of the weight gradients stays exact fp32, as fp32's does.

bf16 keeps fp32's exponent range (8 bits of mantissa); fp16 has 11 bits of mantissa and
a range of about 6e-5..6.5e4 in its normal numbers, so small activation gradients lose
precision or flush to zero in it (what loss scaling exists for; none is applied here).
Speed-ups are reported over bf16 as well as over fp32 (`speedup_reference`,
bench.report.summary).

Their ranks place them after every compressing mode in tables and figures (5, 6):
the reference rows of the half-precision baseline read last.
"""

from __future__ import annotations

from aqsgd.compress.modes.base import Comparison

__all__ = ["COMPARISONS"]

# bf16 is a speed-up reference (every speed-up is shown over it too); fp16 puts the same
# bytes on the wire, so its speed-ups would repeat bf16's
COMPARISONS = (Comparison("bf16", rank=5, forward="none", backward="none", dtype="bf16",
                          speedup_reference=True),
               Comparison("fp16", rank=6, forward="none", backward="none", dtype="fp16"))
