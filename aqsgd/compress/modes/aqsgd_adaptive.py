"""Comparison ``aqsgd-adaptive``: AQ-SGD forward and DirectQ backward, as ``aqsgd``, with
each sender choosing its messages' bit widths at run time from the rate it measures on its
link (aqsgd.compress.adaptive: the widest width whose transfer fits under the stage's
compute per micro-batch, with a hysteresis). No mode of its own: the messages are
``aqsgd`` and ``directq`` messages at the width their header names
(aqsgd.compress.activation, Note [adaptive widths]), so the profiles' costs of those two
modes apply.

Its bits are the widest each direction may use: ``aqsgd-adaptive:4/8`` chooses forward
from 2, 3 or 4 bits and backward from 4, 6 or 8; the bare name is ``8/8``.
"""

from __future__ import annotations

from aqsgd.compress.modes.base import Comparison

__all__ = ["COMPARISONS"]

COMPARISONS = (Comparison("aqsgd-adaptive", rank=2.5, forward="aqsgd", backward="directq",
                          default_bits=(8, 8), adaptive=True),)
