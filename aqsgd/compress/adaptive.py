"""Compression that follows the link: each sender picks its messages' bit width at run time
from the rate it measures on its link (`CompressionConfig.widths`, the `aqsgd-adaptive`
comparison).

    chooser = WidthChooser(widths=(2, 3, 4, 8), nbytes=lambda b: ..., start=8)
    bits = chooser.update(sent_bytes=2_000_000, link_s=0.4, budget_s=0.05)

The rule: a message should leave within the compute the sender does per micro-batch
(`budget_s`), so the chooser takes the widest width of the ladder whose transfer
`transfer_s(nbytes(bits), rate)` fits the budget, the narrowest when none fits; it
chooses during warm-up too, so the first coded step starts at a width fitted to the link.
Why, and how the rate is measured: docs/adaptive.md and the notes below. Imports nothing
of the suite.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["FORWARD_LADDER", "BACKWARD_LADDER", "HYSTERESIS", "SMOOTHING", "HOLD_STEPS",
           "MAX_HOLD_STEPS", "ladder", "transfer_s", "widest_fitting", "WidthChooser",
           "ChooserState"]

# Note [rate estimate]: the rate is the sender's own: the bytes it sent to the peer in a
# step over the link time they took, smoothed over steps. The link time is the larger of
# two lower bounds (aqsgd.train.pipeline, Note [adaptive widths]): the time the sends were
# busy, and the step's stretch beyond its compute. A step slower than the average replaces
# it (the chooser backs off at once, as TCP does); a faster one is averaged in
# (`SMOOTHING`). The first bound alone fails on small messages: a send completes once it
# is copied into the socket's buffer (measured on this suite's netns links: four 131 kB
# sends a step over 1 Mbit/s "took" 1 ms, read as 2 Gbit/s), so a slow link would look
# fast; the stretch is what the link cost the step whatever the buffers hide. Both err
# towards a slower link (the stretch counts the other direction's transfers and any load
# too), so the chooser errs towards fewer bits. Chosen over the receiver's arrival rate
# fed back, which needs a channel back, a clock both hosts share and arrival timing on the
# receiver. During warm-up the rows go raw, the largest messages a run sends.
#
# Note [hysteresis]: a width is left for fewer bits when its transfer exceeds the budget by
# `HYSTERESIS` (20%), for more bits only when the wider one fits under the budget by the same
# share; and after the chooser falls back from a width it had just probed, it waits `hold`
# steps before probing up again, doubling each time (from `HOLD_STEPS`, at most
# `MAX_HOLD_STEPS`) and reset when a width holds.

# The widths a sender may pick. Forward: AQ-SGD's deltas at 2, 3, 4 or 8 bits. Backward:
# the gradients are DirectQ-coded, with no cache to absorb the error, so never below 4
# bits (the paper's pairs 2/4 and 4/8: backward at twice forward); each direction chooses
# on its own link, since the two directions of a link need not have one rate.
FORWARD_LADDER = (2, 3, 4, 8)
BACKWARD_LADDER = (4, 6, 8)
HYSTERESIS = 0.2  # Note [hysteresis]
SMOOTHING = 0.5  # weight of the newest step in the rate's exponential average
HOLD_STEPS, MAX_HOLD_STEPS = 2, 64  # Note [hysteresis]


def ladder(direction: str, top: int) -> tuple[int, ...]:
    """The widths of `direction` ('forward' or 'backward') up to `top` bits."""
    if direction not in ("forward", "backward"):
        raise ValueError(f"ladder: direction must be 'forward' or 'backward', got {direction!r}")
    base = FORWARD_LADDER if direction == "forward" else BACKWARD_LADDER
    widths = tuple(b for b in base if b <= top)
    if not widths:
        raise ValueError(f"an adaptive {direction} width of at most {top} bits leaves none of "
                         f"{base}; give at least {base[0]}")
    return widths


def transfer_s(nbytes: int, rate_bytes_s: float) -> float:
    """Seconds a message of `nbytes` holds a link of `rate_bytes_s` (bench.perfmodel's
    `8 n / rate` with the rate in bytes/s)."""
    return nbytes / rate_bytes_s


def widest_fitting(widths, nbytes: Callable[[int], int], rate_bytes_s: float,
                   budget_s: float) -> int:
    """The widest of `widths` whose message leaves within `budget_s`; the narrowest if none."""
    fits = [b for b in widths if transfer_s(nbytes(b), rate_bytes_s) <= budget_s]
    return max(fits) if fits else min(widths)


@dataclass(frozen=True)
class ChooserState:
    """What one update saw and chose (the train record's `adaptive` entry)."""

    bits: int  # the width chosen for the sender's next messages
    rate_mbit: float | None  # the smoothed rate, None before any send was timed
    budget_s: float | None  # compute per micro-batch the transfer must fit under
    transfer_s: float | None  # the chosen width's transfer at that rate


class WidthChooser:
    """One sender's width, updated once per step (the rule: module docstring)."""

    def __init__(self, widths, nbytes: Callable[[int], int], start: int) -> None:
        widths = tuple(sorted(widths))
        if start not in widths:
            raise ValueError(f"WidthChooser: start width {start} is not one of {widths}")
        self.widths, self.nbytes, self.bits = widths, nbytes, start
        self.rate_bytes_s: float | None = None
        self.hold, self._wait, self._probed = HOLD_STEPS, 0, False

    def observe(self, sent_bytes: int, link_s: float) -> None:
        """Fold one step's sends on the link, `sent_bytes` in `link_s` seconds, into the
        smoothed rate (Note [rate estimate])."""
        if sent_bytes <= 0 or link_s <= 0:
            return
        sample = sent_bytes / link_s
        old = self.rate_bytes_s
        if old is None or sample < old:  # a slower link is acted on at once
            self.rate_bytes_s = sample
        else:
            self.rate_bytes_s = SMOOTHING * sample + (1 - SMOOTHING) * old

    def _transfer(self, bits: int) -> float:
        return transfer_s(self.nbytes(bits), self.rate_bytes_s)

    def choose(self, budget_s: float) -> int:
        """The width for the next messages, given the compute per micro-batch."""
        if self.rate_bytes_s is None or not math.isfinite(budget_s) or budget_s <= 0:
            return self.bits
        self._wait = max(0, self._wait - 1)
        current = self.bits
        if self._transfer(current) > (1 + HYSTERESIS) * budget_s:
            down = widest_fitting([b for b in self.widths if b < current] or [current],
                                  self.nbytes, self.rate_bytes_s, budget_s)
            if self._probed:  # fell back from a width just probed: wait longer next time
                self.hold = min(MAX_HOLD_STEPS, 2 * self.hold)
            self.bits, self._wait, self._probed = down, self.hold, False
            return self.bits
        wider = [b for b in self.widths if b > current
                 and self._transfer(b) <= (1 - HYSTERESIS) * budget_s]
        if wider and self._wait == 0:
            self.bits, self._probed = max(wider), True
        elif self._probed:  # the probed width held a step: it is no probe any more
            self._probed, self.hold = False, HOLD_STEPS
        return self.bits

    def update(self, sent_bytes: int, link_s: float, budget_s: float) -> int:
        """`observe` then `choose`."""
        self.observe(sent_bytes, link_s)
        return self.choose(budget_s)

    def state(self, budget_s: float) -> ChooserState:
        rate = self.rate_bytes_s
        return ChooserState(
            bits=self.bits, rate_mbit=None if rate is None else 8 * rate / 1e6,
            budget_s=budget_s, transfer_s=None if rate is None else self._transfer(self.bits))
