"""Competing traffic: bulk TCP flows a scenario puts beside the training on chosen links
over chosen intervals, and the share of a link the training got while they ran.

    competing:                               # in a scenario file
      - {src: 0, dst: 1, start_s: 20, duration_s: 30}
      - {src: 0, dst: 1, start_s: 20, duration_s: 30, max_rate_mbit: 5}   # paced

A flow is the suite's own stream sender (bench.net.probe.stream) from host src to a
receiver on host dst, started `start_s` after the run's clock starts and stopped
`duration_s` later; `training_share` is Note [training share] below. Why not iperf3,
and the measured shares: docs/network.md, "Competing traffic and stragglers".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bench.net.scenario_file import MAX_PHASE_S, MAX_RATE_MBIT, MIN_RATE_MBIT
from bench.net.schedule import bounded_number
from specfile import SpecError

__all__ = ["CompetingFlow", "LinkInterval", "link_intervals", "sent_bytes", "training_share"]

_SENT = re.compile(r"^\s*Sent (\d+) bytes ", re.MULTILINE)



@dataclass(frozen=True)
class CompetingFlow:
    """A bulk TCP flow from host `src` to host `dst` from `start_s` to `start_s +
    duration_s` seconds of the run's clock; `max_rate_mbit`: paced at most at this rate
    (None: as fast as the link lets it)."""

    src: int
    dst: int
    start_s: float
    duration_s: float
    max_rate_mbit: float | None = None

    def __post_init__(self) -> None:
        for end in ("src", "dst"):
            value = getattr(self, end)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise SpecError.at(end, "a host index >= 0", value)
        if self.src == self.dst:
            raise SpecError.at("dst", f"a host other than src ({self.src})", self.dst)
        object.__setattr__(self, "start_s", bounded_number("start_s", self.start_s, 0.0,
                                                    MAX_PHASE_S, "s"))
        object.__setattr__(self, "duration_s", bounded_number("duration_s", self.duration_s, 0.0,
                                                       MAX_PHASE_S, "s", open_lo=True))
        if self.max_rate_mbit is not None:
            object.__setattr__(self, "max_rate_mbit", bounded_number(
                "max_rate_mbit", self.max_rate_mbit, MIN_RATE_MBIT, MAX_RATE_MBIT, "Mbit/s"))

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s

    def to_dict(self) -> dict:
        return {"src": self.src, "dst": self.dst, "start_s": self.start_s,
                "duration_s": self.duration_s, "max_rate_mbit": self.max_rate_mbit}


@dataclass(frozen=True)
class LinkInterval:
    """Link src -> dst from `start_s` to `end_s` with the flows `flows` (indices into the
    scenario's list) running through all of it."""

    src: int
    dst: int
    start_s: float
    end_s: float
    flows: tuple[int, ...]


def link_intervals(flows: tuple[CompetingFlow, ...]) -> list[LinkInterval]:
    """Per link, the stretches between consecutive starts and stops of its flows in which
    at least one flow runs (in time order, links in order of first appearance)."""
    out = []
    for link in dict.fromkeys((f.src, f.dst) for f in flows):
        on = [(k, f) for k, f in enumerate(flows) if (f.src, f.dst) == link]
        edges = sorted({t for _, f in on for t in (f.start_s, f.end_s)})
        for a, b in zip(edges, edges[1:], strict=False):
            running = tuple(k for k, f in on if f.start_s <= a and f.end_s >= b)
            if running:
                out.append(LinkInterval(*link, a, b, running))
    return out


# Note [training share]: over an interval [a, b) of link src -> dst, the link's htb class
# counted `class_bytes` (frames: training, competing flows and the reverse flows' ACKs);
# the flows' receivers counted `competing_bytes` of payload, which is competing_bytes x
# `framing` bytes on the wire (bench.net.tc.payload_factor: full segments). The
# training's share is (class_bytes - framing x competing_bytes) / class_bytes, 1.0 with
# no competing flow; the training bytes are the link's other frames. The receivers count
# payload per bin on CLOCK_REALTIME, the clock the schedule's start is recorded on, so the
# bytes of each interval need no second clock.
def training_share(class_bytes: int, competing_bytes: int, framing: float) -> float | None:
    """The training's share of a link over an interval (module doc, Note [training
    share]); None when the link carried nothing."""
    if class_bytes <= 0:
        return None
    return max(0.0, class_bytes - framing * competing_bytes) / class_bytes


def sent_bytes(tc_stats: str) -> int:
    """The byte counter of one class in `tc -s class show ... classid X`'s output
    (" Sent 12345 bytes 67 pkt ..."); ValueError when the output has none or several."""
    found = _SENT.findall(tc_stats)
    if len(found) != 1:
        raise ValueError(f"expected one class's 'Sent N bytes' in tc's output, got "
                         f"{len(found)}: {tc_stats.strip()[:200]!r}")
    return int(found[0])
