"""The parts of a meta.json that say how the links behaved while a cell ran: the scenario
as run, the launcher's record with its schedule runner's changes, and the outage block.

    record = read_record(cell_dir)            # bench.results.record
    record.scenario.link_rate_mbit            # 100.0 (None: unshaped)
    record.link_schedule.run.link_changes     # each applied phase of a scheduled link

Built by parse_scenario / parse_launcher / parse_outages from bench.results.schema.Fields
(a key missing is a SchemaError naming the file and the key). The keys:
docs/results-schema.md, "meta.json" (`scenario`, `launcher`, `schedule`).
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.results.schema import Fields

__all__ = ["CompetingFlow", "CompetingInterval", "HostCap", "LauncherRecord", "LinkChange",
           "LinkSchedule", "Outage", "OutageRecord", "ScenarioRecord", "ScheduleEvent",
           "SchedulePhase", "ScheduleRun", "ScheduledLink", "Straggler", "parse_launcher",
           "parse_outages", "parse_scenario"]


# ------------------------------------------------------------------- scenario
@dataclass(frozen=True)
class CompetingFlow:
    """A scenario's competing flow on link src -> dst, from start_s for duration_s."""

    src: int
    dst: int
    start_s: float
    duration_s: float


@dataclass(frozen=True)
class Straggler:
    """Host `host` computing `factor` times slower from start_s for duration_s."""

    host: int
    factor: float
    start_s: float
    duration_s: float


@dataclass(frozen=True)
class HostCap:
    """A scenario's cap on one host's uplink or downlink (None: uncapped): every link out
    of (into) the host shares that one wire."""

    host: int
    uplink_mbit: float | None
    downlink_mbit: float | None


@dataclass(frozen=True)
class ScenarioRecord:
    """meta.json's `scenario` (NetworkScenario.to_dict()), as the readers use it."""

    link_rate_mbit: float | None  # the scenario's link rate; None: unshaped
    competing: tuple[CompetingFlow, ...] = ()  # absent from a scenario without flows
    stragglers: tuple[Straggler, ...] = ()
    hosts: tuple[HostCap, ...] = ()  # the per-host caps (`hosts`)


def parse_scenario(f: Fields) -> ScenarioRecord:
    competing = tuple(CompetingFlow(c.need("src", int), c.need("dst", int),
                                    c.number("start_s"), c.number("duration_s"))
                      for c in (f.blocks("competing") if f.has("competing") else []))
    stragglers = tuple(Straggler(s.need("host", int), s.number("factor"), s.number("start_s"),
                                 s.number("duration_s"))
                       for s in (f.blocks("stragglers") if f.has("stragglers") else []))
    hosts = tuple(HostCap(h.need("host", int), h.number_or_none("uplink_mbit"),
                          h.number_or_none("downlink_mbit"))
                  for h in (f.blocks("hosts") if f.has("hosts") else []))
    return ScenarioRecord(f.block("link").number_or_none("rate_mbit"), competing, stragglers,
                          hosts)


# ------------------------------------------------------- the launcher's schedule
@dataclass(frozen=True)
class SchedulePhase:
    duration_s: float
    down: bool


@dataclass(frozen=True)
class ScheduledLink:
    """A scheduled directed link: its phases, run once or in a loop."""

    src: int
    dst: int
    loop: bool
    phases: tuple[SchedulePhase, ...]


@dataclass(frozen=True)
class LinkChange:
    """A phase of a scheduled link applied at applied_s (s on the runner's clock); phase
    -1 restores the link's own values at the end. rate_mbit None: the link's own rate."""

    src: int
    dst: int
    phase: int
    lap: int
    applied_s: float
    rate_mbit: float | None
    down: bool


@dataclass(frozen=True)
class ScheduleEvent:
    """A competing flow's start or stop (`flow`), a CPU cap (`host`, `factor`; None: the
    cap lifted) or a byte-counter read, planned at t_s and applied at applied_s."""

    kind: str  # flow_start | flow_stop | cpu | counter
    t_s: float
    applied_s: float
    failed: bool  # the runner recorded an error applying it
    flow: int | None = None
    host: int | None = None
    factor: float | None = None


@dataclass(frozen=True)
class ScheduleRun:
    """The schedule runner's record of this cell: t = 0 at started_unix."""

    started_unix: float
    stopped_unix: float | None
    link_changes: tuple[LinkChange, ...]
    events: tuple[ScheduleEvent, ...]


@dataclass(frozen=True)
class CompetingInterval:
    """A stretch between a link's flows' starts and stops, and the training's share of
    the link's class bytes in it (None: nothing measured)."""

    start_s: float
    training_share: float | None


@dataclass(frozen=True)
class LinkSchedule:
    """The shaped launchers' `schedule` block (links that change, competing flows,
    stragglers); run None when the cell never started its schedule."""

    links: tuple[ScheduledLink, ...]
    run: ScheduleRun | None
    intervals: tuple[CompetingInterval, ...] = ()  # only with competing flows


@dataclass(frozen=True)
class LauncherRecord:
    """meta.json's `launcher`: which launcher ran the cell, why, and its schedule (None
    unless a link has one or the scenario has flows or stragglers)."""

    choice: str
    reason: str
    schedule: LinkSchedule | None = None  # absent for a launcher that shapes nothing


def _change(c: Fields) -> LinkChange:
    return LinkChange(c.need("src", int), c.need("dst", int), c.need("phase", int),
                      c.need("lap", int), c.number("applied_s"), c.number_or_none("rate_mbit"),
                      c.need("down", bool))


def _event(c: Fields) -> ScheduleEvent:
    kind = c.need("kind", str)
    flow = c.need("flow", int) if kind in ("flow_start", "flow_stop") else None
    host, factor = (c.need("host", int), c.number_or_none("factor")) if kind == "cpu" \
        else (None, None)
    return ScheduleEvent(kind, c.number("t_s"), c.number("applied_s"), c.has("error"),
                         flow, host, factor)


def _run(f: Fields) -> ScheduleRun:
    changes = f.blocks("changes")
    return ScheduleRun(f.number("started_unix"), f.number_or_none("stopped_unix"),
                       tuple(_change(c) for c in changes if not c.has("kind")),
                       tuple(_event(c) for c in changes if c.has("kind")))


def _schedule(f: Fields) -> LinkSchedule:
    links = tuple(ScheduledLink(k.need("src", int), k.need("dst", int), k.need("loop", bool),
                                tuple(SchedulePhase(p.number("duration_s"), p.need("down", bool))
                                      for p in k.blocks("phases")))
                  for k in f.blocks("links"))
    run = None if f.need("run", dict, type(None)) is None else _run(f.block("run"))
    intervals = () if not f.has("competing") else tuple(
        CompetingInterval(i.number("start_s"), i.number_or_none("training_share"))
        for i in f.block("competing").blocks("intervals"))
    return LinkSchedule(links, run, intervals)


def parse_launcher(f: Fields) -> LauncherRecord:
    schedule = f.maybe("schedule", None, dict, type(None))
    return LauncherRecord(f.need("choice", str), f.need("reason", str),
                          None if schedule is None else _schedule(f.block("schedule")))


# ------------------------------------------------------------------- outages
@dataclass(frozen=True)
class Outage:
    """Link src -> dst down from down_s to up_s (s after the start; None: still down)."""

    src: int
    dst: int
    down_s: float
    up_s: float | None


@dataclass(frozen=True)
class OutageRecord:
    """meta.json's `schedule` block (bench.harness.outages): the outages and what they
    cost (time_lost_s None: no measured step)."""

    outages: tuple[Outage, ...]
    dist_timeout_s: float
    survivable_outage_s: float
    time_lost_s: float | None


def parse_outages(f: Fields) -> OutageRecord:
    outages = tuple(Outage(o.need("src", int), o.need("dst", int), o.number("down_s"),
                           o.number_or_none("up_s")) for o in f.blocks("outages"))
    return OutageRecord(outages, f.number("dist_timeout_s"), f.number("survivable_outage_s"),
                        f.number_or_none("time_lost_s"))
