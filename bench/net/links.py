"""The values a network scenario is made of, each checked where it is built: a directed
link (`LinkSpec`), an override of one, a host's caps, the layout of hosts on machines,
and `check_bounds`, which checks a dataclass's fields against the `Bounds` their types
declare (bench.net.scenario_file). `ScenarioError` names the field and the value.

    LinkSpec(rate_mbit=100.0, delay_ms=20.0)
    Layout(stages=2, replicas=2, ranks_per_machine=2).machines   # 2

bench.net.scenario builds them from a file and re-exports them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Annotated, Any, get_args, get_origin, get_type_hints

from bench.net.scenario_file import (
    DEFAULT_QUEUE_PACKETS,
    Bounds,
    DelayMs,
    HostIndex,
    LossPct,
    QueueBytes,
    QueuePackets,
    RanksPerMachine,
    RateMbit,
    Replicas,
    Stages,
)
from bench.net.schedule import LinkSchedule, Phase
from specfile import SpecError

__all__ = ["HostCaps", "Layout", "LinkOverride", "LinkSpec", "ScenarioError", "check_bounds"]


class ScenarioError(SpecError):
    """A scenario file or value that does not describe a valid network."""


def check_bounds(obj: Any) -> None:
    """Check each field of dataclass `obj` whose type declares `Bounds` (scenario_file):
    its type and range, a ScenarioError naming the field (None passes where the type
    allows it; files are type-checked before they get here, this is also for values
    given in code, e.g. with_link)."""
    for name, hint in get_type_hints(type(obj), include_extras=True).items():
        bounds = _bounds(hint)
        value = getattr(obj, name)
        if bounds is None or (value is None and get_origin(hint) is not Annotated):
            continue
        b, integer = bounds, bounds.kind == "integer"
        # bool is an int subclass in Python: refuse it
        if isinstance(value, bool) or not isinstance(value, int if integer else int | float):
            raise ScenarioError.at(name, f"an integer ({b.what})" if integer
                                   else f"a number in {b.what}", value)
        low_ok = value > b.lo if b.lo_open else value >= b.lo
        if not (math.isfinite(value) and low_ok and value <= b.hi):
            why = f" ({b.why_lo})" if b.why_lo else ""
            raise ScenarioError.at(name, f"an integer in [{b.lo}, {b.hi}] ({b.what})" if integer
                                   else f"a number >= {b.lo:g}{why} and <= {b.hi:g} "
                                        f"({b.what})", value)


def _bounds(hint: Any) -> Bounds | None:
    """The Bounds of `hint` (inside `X | None` too), None where it declares none."""
    options = [hint, *get_args(hint)] if get_origin(hint) is not Annotated else [hint]
    for option in options:
        if get_origin(option) is Annotated:
            found = [m for m in option.__metadata__ if isinstance(m, Bounds)]
            if found:
                return found[0]
    return None


@dataclass(frozen=True)
class LinkSpec:
    """One direction of one host-to-host link. rate_mbit None = unshaped. `schedule`: how
    the link changes during a run (bench.net.schedule; None: it holds these values)."""

    rate_mbit: RateMbit | None
    delay_ms: DelayMs = 0.0
    jitter_ms: DelayMs = 0.0
    loss_pct: LossPct = 0.0
    queue_packets: QueuePackets | None = DEFAULT_QUEUE_PACKETS
    queue_bytes: QueueBytes | None = None
    schedule: LinkSchedule | None = None

    def __post_init__(self) -> None:
        check_bounds(self)
        if self.jitter_ms > self.delay_ms:
            raise ScenarioError.at("jitter_ms", f"at most delay_ms ({self.delay_ms:g} ms)",
                                   self.jitter_ms)
        if (self.queue_packets is None) == (self.queue_bytes is None):
            raise ScenarioError.at("queue_packets", "exactly one of queue_packets and queue_bytes",
                                   (self.queue_packets, self.queue_bytes))
        # store numbers as float whatever the caller gave (100 and 100.0 are the same link)
        for name in ("delay_ms", "jitter_ms", "loss_pct"):
            object.__setattr__(self, name, float(getattr(self, name)))
        if self.rate_mbit is not None:
            object.__setattr__(self, "rate_mbit", float(self.rate_mbit))
        if self.schedule is not None:
            self._check_schedule()

    def _check_schedule(self) -> None:
        if not isinstance(self.schedule, LinkSchedule):
            raise ScenarioError.at("schedule", "a bench.net.schedule.LinkSchedule",
                                   self.schedule)
        if self.rate_mbit is None:
            raise ScenarioError.at("rate_mbit", "a rate on a link with a schedule (the rate "
                                   "before the run and wherever a phase names none)", None)
        for k, phase in enumerate(self.schedule.phases):
            where = f"phases[{k}]" if self.schedule.source == "phases" else \
                f"trace {self.schedule.source} phase {k}"
            try:
                self.in_phase(phase)
            except ScenarioError as e:
                raise e.within(f"schedule.{where}") from None

    def in_phase(self, phase: Phase) -> LinkSpec:
        """This link as it is during `phase` (no schedule; a down phase keeps the rate,
        the shaping drops its packets)."""
        return replace(self, schedule=None, **phase.changes())

    @property
    def shaped(self) -> bool:
        return self.rate_mbit is not None or self.delay_ms > 0 or self.jitter_ms > 0 \
            or self.loss_pct > 0

    def to_dict(self) -> dict:
        """The link's values; `schedule` only where it has one."""
        out = {"rate_mbit": self.rate_mbit, "delay_ms": self.delay_ms,
               "jitter_ms": self.jitter_ms, "loss_pct": self.loss_pct,
               "queue_packets": self.queue_packets, "queue_bytes": self.queue_bytes}
        if self.schedule is not None:
            out["schedule"] = self.schedule.to_dict()
        return out


@dataclass(frozen=True)
class LinkOverride:
    """The spec of the directed link src -> dst (host indices)."""

    src: int
    dst: int
    spec: LinkSpec


@dataclass(frozen=True)
class HostCaps:
    """Aggregate caps on everything host `host` sends (uplink) or receives (downlink)."""

    host: HostIndex
    uplink_mbit: RateMbit | None = None
    downlink_mbit: RateMbit | None = None

    def __post_init__(self) -> None:
        check_bounds(self)


@dataclass(frozen=True)
class Layout:
    """stages x replicas hosts (one rank each), `ranks_per_machine` of them per machine;
    `within_machine`: what a machine's ranks hold (bench.net.placement)."""

    stages: Stages
    replicas: Replicas = 1
    ranks_per_machine: RanksPerMachine = 1
    within_machine: str = "replicas"

    def __post_init__(self) -> None:
        check_bounds(self)
        if self.within_machine not in ("replicas", "stages"):
            raise ScenarioError.at("within_machine", "replicas or stages", self.within_machine)
        if self.n_hosts % self.ranks_per_machine:
            raise ScenarioError.at("ranks_per_machine", f"a divisor of the {self.n_hosts} "
                                   f"hosts (stages x replicas)", self.ranks_per_machine)

    @property
    def n_hosts(self) -> int:
        return self.stages * self.replicas

    @property
    def machines(self) -> int:
        return self.n_hosts // self.ranks_per_machine

    def to_dict(self) -> dict:
        """stages and replicas; the machine keys only with several ranks per machine (a
        one-rank-per-host scenario's dict, and so its identity, as before they existed)."""
        out: dict[str, Any] = {"stages": self.stages, "replicas": self.replicas}
        if self.ranks_per_machine > 1:
            out.update(ranks_per_machine=self.ranks_per_machine,
                       within_machine=self.within_machine)
        return out
