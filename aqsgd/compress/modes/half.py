"""The half-precision transports ``bf16`` and ``fp16``: the comparison's references a
system of today sends by default. Activations and their gradients go on the wire cast to
the half dtype (2 bytes an element), both directions, nothing else coded; the receiver
widens them back to fp32. They run on mode ``none`` (`CompressionConfig.dtype` "bf16" /
"fp16"), so this module declares only the two comparisons. Evaluation messages travel in
fp32, and with replicas the data-parallel exchange stays exact fp32, as fp32's does.

fp16 has 11 bits of mantissa but a normal range of about 6e-5..6.5e4, so small activation
gradients lose precision or flush to zero in it (no loss scaling is applied); bf16 keeps
fp32's range. Speed-ups are reported over bf16 as well as over fp32
(`speedup_reference`); ranks 5 and 6 put their rows after every compressing mode.
"""

from __future__ import annotations

from aqsgd.compress.modes.base import Comparison

__all__ = ["COMPARISONS"]

# bf16 is a speed-up reference (every speed-up is shown over it too); fp16 puts the same
# bytes on the wire, so its speed-ups would repeat bf16's
COMPARISONS = (Comparison("bf16", rank=5, forward="none", backward="none", dtype="bf16",
                          speedup_reference=True),
               Comparison("fp16", rank=6, forward="none", backward="none", dtype="fp16"))
