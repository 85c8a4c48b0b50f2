"""What a scenario file may contain: keys, types, units and bounds of scenarios/*.yaml.

    python -m bench.net.scenario_file > scenarios/scenario.schema.json   # after a change here

specfile checks every file against these types (unknown keys, missing keys, wrong types),
and the JSON Schema that editors use comes from them too (each shipped scenario names it in
its first line). Each value's range is declared once, as `Bounds` on its type: the schema
states it, and bench.net.scenario's dataclasses, which say what the values mean, check it
(`check_bounds`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import MISSING, ConfigDict

from specfile import SPEC_CONFIG, SpecError, Unit, json_schema

__all__ = [
    "Bounds",
    "DEFAULT_QUEUE_PACKETS",
    "LINK_KEYS",
    "CompetingEntry",
    "HostEntry",
    "LayoutEntry",
    "LinkEntry",
    "LinkOverrideEntry",
    "MACHINE_RATES_MBIT",
    "MachineLinkEntry",
    "PhaseEntry",
    "RanksPerMachine",
    "ScenarioFile",
    "ScheduleEntry",
    "StragglerEntry",
    "scenario_schema",
]

# Bounds on what one emulated link may ask for: beyond them a value is a typo.
MAX_RATE_MBIT = 400_000.0  # 400 Gbit/s
# The slowest rate a link may have: 50 kbit/s, what the link probe verifies. tc's bound
# lies far below: tc stores a rate in whole bytes per second (iproute2 refuses "rate
# 7bit": 0 bytes/s), and htb and tbf store the bucket as a time, in 32-bit counts of the
# kernel's 64 ns scheduler tick (PSCHED_SHIFT 6; /proc/net/psched): at most 2**32 * 64 ns
# = 274.9 s. The suite's bucket is at least 16 KiB (bench.net.tc.burst_bytes), which fits
# that time only above 16384 B / 274.9 s = 477 bit/s (about 0.5 kbit/s); below, tc
# silently stores another bucket (asked 16384 bytes at 100 bit/s, it kept 3189).
# Measured with the suite's htb argv on this kernel (6.18, iproute2 6.1): 1 kbit/s
# delivered 992 bit/s and 10 kbit/s 9996 bit/s (tc's byte counter over 40 s of 92-byte
# frames, after the bucket drained). The probe's: its steady window starts after two
# 16 KiB buckets and holds at least 10 full segments (bench.net.probe.plan_probe), all
# within the 60 s a probe may take, so it cannot plan below (2 * 16384 + 10 * 1448) B
# * 8 / 60 s = 6.3 kbit/s; and below about 50 kbit/s (a full frame takes 0.4-1.2 s
# there) its readings stray: from a full bucket 10 kbit/s read 0.85 of its rate,
# 20 kbit/s 0.97, 30 kbit/s 1.16; 50 kbit/s read 0.95-1.10 in six probes, 0.1 Mbit/s
# 0.93-1.00 in four, 0.2 Mbit/s 0.94-1.04 and 0.5 Mbit/s 0.98-1.04 in three each.
MIN_RATE_MBIT = 0.05
MIN_RATE_REASON = ("50 kbit/s, the slowest rate the link probe verifies; tc's own bound "
                   "is about 0.5 kbit/s")
MAX_DELAY_MS = 10_000.0
MAX_LOSS_PCT = 99.0
MAX_QUEUE_PACKETS = 1_000_000
MIN_QUEUE_BYTES = 1514  # one full Ethernet frame
MAX_QUEUE_BYTES = 1 << 30
MAX_STAGES = 64
MAX_REPLICAS = 64
MAX_HOSTS = 200  # addresses are 198.18.0.1 .. 198.18.0.200 (one /24)
# Named rates of the link between two ranks of one machine, per direction, in Mbit/s:
# PCIe 3.0 x16 and 4.0 x16 (8 and 16 GT/s x 16 lanes, 128b/130b coding), one NVLink 2/3
# link (25 GB/s). A whole NVLink bundle (300-900 GB/s) lies beyond MAX_RATE_MBIT, what tc
# is asked to emulate: give it as null (unshaped). docs/network.md, "Several ranks per
# machine".
MACHINE_RATES_MBIT = {"pcie3-x16": 126_031.0, "pcie4-x16": 252_062.0, "nvlink-link": 200_000.0}
MachineRateName = Literal[tuple(MACHINE_RATES_MBIT)]
DEFAULT_QUEUE_PACKETS = 1000
# A link's schedule (bench.net.schedule): a phase lasts at most a day, a schedule has at
# most MAX_PHASES phases (a trace's rows), an outage lasts at most MAX_OUTAGE_S: TCP
# retransmits into a dead link with doubling timeouts, so a connection resumes up to about
# one outage length after the link comes back; a worker survives an outage only if its
# process-group timeout outlasts both (bench.harness.outages), and 5 minutes of outage
# with 5 more of back-off stays well inside Linux's tcp_retries2 give-up (about 15 min).
MAX_PHASE_S = 86_400.0
MAX_PHASES = 20_000
MAX_OUTAGE_S = 300.0
MAX_BIN_MS = 3_600_000
# A competing flow or straggler interval lies within a day of the run's start, like a
# phase; at most MAX_COMPETING_FLOWS flows (each a sender and a receiver process beside
# the workers); a straggler computes at most 100 times slower (the CPU quota's floor of
# 1 ms per 100 ms period: bench.net.straggler).
MAX_COMPETING_FLOWS = 64
MAX_STRAGGLER_FACTOR = 100.0

LINK_KEYS = ("rate_mbit", "delay_ms", "jitter_ms", "loss_pct", "queue_packets", "queue_bytes",
             "schedule")


@dataclass(frozen=True)
class Bounds:
    """A value's range, declared once: the JSON Schema states it, and the scenario's
    values are checked against it (bench.net.scenario), in `what` (a unit or a noun),
    with `why_lo` said beside a lower bound that needs a reason."""

    kind: Literal["number", "integer"]
    lo: float
    hi: float
    what: str
    lo_open: bool = False
    why_lo: str = ""

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: Any) -> dict:
        return {"type": self.kind, "exclusiveMinimum" if self.lo_open else "minimum": self.lo,
                "maximum": self.hi}


RateMbit = Annotated[float, Unit("Mbit/s"), Bounds("number", MIN_RATE_MBIT, MAX_RATE_MBIT,
                                                   "Mbit/s", why_lo=MIN_RATE_REASON)]
DelayMs = Annotated[float, Unit("ms"), Bounds("number", 0, MAX_DELAY_MS, "ms")]
LossPct = Annotated[float, Unit("percent"), Bounds("number", 0, MAX_LOSS_PCT, "percent")]
QueuePackets = Annotated[int, Unit("packets"), Bounds("integer", 1, MAX_QUEUE_PACKETS,
                                                      "packets")]
QueueBytes = Annotated[int, Unit("bytes"), Bounds("integer", MIN_QUEUE_BYTES, MAX_QUEUE_BYTES,
                                                  "bytes")]
HostIndex = Annotated[int, Bounds("integer", 0, MAX_HOSTS - 1, "host index")]
Stages = Annotated[int, Bounds("integer", 1, MAX_STAGES, "pipeline stages")]
Replicas = Annotated[int, Bounds("integer", 1, MAX_REPLICAS, "data-parallel replicas")]
RanksPerMachine = Annotated[int, Bounds("integer", 1, MAX_HOSTS, "ranks per machine")]
PhaseS = Annotated[float, Unit("s"), Bounds("number", 0, MAX_PHASE_S, "s", lo_open=True)]
StartS = Annotated[float, Unit("s"), Bounds("number", 0, MAX_PHASE_S, "s")]


@dataclass(frozen=True, kw_only=True)
class PhaseEntry:
    """One phase of a link's schedule; a value left out is the link's own."""

    duration_s: PhaseS
    """How long the phase lasts, in s (a down phase at most MAX_OUTAGE_S)."""
    rate_mbit: RateMbit | None = None
    """Payload rate in Mbit/s during the phase."""
    delay_ms: DelayMs | None = None
    jitter_ms: DelayMs | None = None
    loss_pct: LossPct | None = None
    down: bool = False
    """An outage: the link drops every packet for the phase."""


@dataclass(frozen=True, kw_only=True)
class ScheduleEntry:
    """How a link changes during a run: `phases`, or a trace file (`trace`: CSV
    t_s,rate_mbit[,delay_ms,loss_pct]; `mahimahi`: a Mahimahi packet-delivery trace read
    in bins of `bin_ms`), paths relative to the scenario file."""

    phases: tuple[PhaseEntry, ...] | None = None
    trace: str | None = None
    mahimahi: str | None = None
    bin_ms: Annotated[int, Unit("ms"), Bounds("integer", 1, MAX_BIN_MS, "ms")] = 1000
    """Bin width of a Mahimahi trace, in ms."""
    loop: bool = False
    """Start again after the last phase (else the last phase holds)."""

    def __post_init__(self) -> None:
        given = [k for k in ("phases", "trace", "mahimahi") if getattr(self, k) is not None]
        if len(given) != 1:
            raise SpecError.at("", "exactly one of phases, trace and mahimahi", given)
        if self.bin_ms != 1000 and self.mahimahi is None:
            raise SpecError.at("bin_ms", "bin_ms only with a mahimahi trace", self.bin_ms)


@dataclass(frozen=True, kw_only=True)
class LayoutEntry:
    stages: Stages
    """Pipeline stages."""
    replicas: Replicas = 1
    """Data-parallel copies of the pipeline; hosts = stages * replicas, host i = rank i."""
    ranks_per_machine: RanksPerMachine = 1
    """Hosts (ranks, each with its own address) per machine: hosts 0..k-1 are machine 0,
    k..2k-1 machine 1, ...; the links inside a machine are machine_link's."""
    within_machine: Literal["replicas", "stages"] = "replicas"
    """With several ranks per machine: what a machine's ranks hold, the same stage of
    several replicas (data parallelism inside a machine, the pipeline across machines) or
    consecutive stages of one replica."""


@dataclass(frozen=True, kw_only=True)
class LinkEntry:
    """The default for every directed host-to-host link."""

    rate_mbit: RateMbit | None
    """Payload rate in Mbit/s; null = unshaped."""
    delay_ms: DelayMs = 0.0
    """One-way delay in ms."""
    jitter_ms: DelayMs = 0.0
    """Uniform +- jitter around delay_ms, in ms; at most delay_ms."""
    loss_pct: LossPct = 0.0
    """Random packet loss in percent."""
    queue_packets: QueuePackets | None = None
    """Queue length in packets (1000 when neither queue key is given)."""
    queue_bytes: QueueBytes | None = None
    """Queue length in bytes, instead of queue_packets."""
    schedule: ScheduleEntry | None = None
    """How every link changes during the run (bench.net.schedule); none: it holds."""


@dataclass(frozen=True, kw_only=True)
class MachineLinkEntry:
    """Every directed link between two ranks of one machine (layout.ranks_per_machine
    > 1); the links between machines are `link` and `links`."""

    rate_mbit: RateMbit | MachineRateName | None = None
    """Payload rate in Mbit/s, or a named one (MACHINE_RATES_MBIT); null = unshaped."""
    delay_ms: DelayMs = 0.0
    """One-way delay in ms."""


@dataclass(frozen=True, kw_only=True)
class LinkOverrideEntry:
    """A link that differs from the default: src -> dst, or both directions between
    `hosts`. It changes only the link keys it names; the others are the default link's."""

    src: HostIndex | MISSING = MISSING
    dst: HostIndex | MISSING = MISSING
    hosts: tuple[HostIndex, HostIndex] | MISSING = MISSING
    """Two hosts: the override applies in both directions."""
    rate_mbit: RateMbit | None | MISSING = MISSING
    delay_ms: DelayMs | MISSING = MISSING
    jitter_ms: DelayMs | MISSING = MISSING
    loss_pct: LossPct | MISSING = MISSING
    queue_packets: QueuePackets | None | MISSING = MISSING
    queue_bytes: QueueBytes | None | MISSING = MISSING
    schedule: ScheduleEntry | None | MISSING = MISSING
    """This link's schedule (null: none, whatever the default link has)."""

    def __post_init__(self) -> None:
        given = {k: v for k, v in vars(self).items() if v is not MISSING}
        if self.hosts is not MISSING and (self.src is not MISSING or self.dst is not MISSING):
            raise SpecError.at("hosts", "either hosts: [a, b] or src/dst, not both", given)
        if self.hosts is MISSING and (self.src is MISSING or self.dst is MISSING):
            raise SpecError.at("src", "src and dst, or hosts: [a, b]", given)
        if not self.changes():
            raise SpecError.at("", f"at least one of {list(LINK_KEYS)}", given)

    def changes(self) -> dict[str, Any]:
        """The link keys this override names, with their values."""
        return {k: getattr(self, k) for k in LINK_KEYS if getattr(self, k) is not MISSING}

    def ends(self) -> list[tuple[str, int]]:
        """(key, host index) of the two ends, in the order src, dst."""
        if self.hosts is not MISSING:
            return [("hosts[0]", self.hosts[0]), ("hosts[1]", self.hosts[1])]
        return [("src", self.src), ("dst", self.dst)]

    def directions(self) -> list[tuple[int, int]]:
        """The directed links (src, dst) this override applies to."""
        (_, a), (_, b) = self.ends()
        return [(a, b), (b, a)] if self.hosts is not MISSING else [(a, b)]


@dataclass(frozen=True, kw_only=True)
class HostEntry:
    """Aggregate caps on everything one host sends (uplink) or receives (downlink)."""

    host: HostIndex
    uplink_mbit: RateMbit | None = None
    """Cap in Mbit/s on all the host sends."""
    downlink_mbit: RateMbit | None = None
    """Cap in Mbit/s on all the host receives."""

    def __post_init__(self) -> None:
        if self.uplink_mbit is None and self.downlink_mbit is None:
            raise SpecError.at("", "uplink_mbit or downlink_mbit", {"host": self.host})


@dataclass(frozen=True, kw_only=True)
class CompetingEntry:
    """A bulk TCP flow beside the training (bench.net.competing): from host src to host
    dst, from start_s for duration_s seconds of the run's clock."""

    src: HostIndex
    dst: HostIndex
    start_s: StartS
    """When the flow starts, in s after the cell's workers start."""
    duration_s: PhaseS
    """How long it sends, in s."""
    max_rate_mbit: RateMbit | None = None
    """Pace the flow at most at this rate in Mbit/s (null: as fast as the link lets it)."""


@dataclass(frozen=True, kw_only=True)
class StragglerEntry:
    """A host whose compute runs `factor` times slower over an interval
    (bench.net.straggler: a CPU quota on its processes' cgroup)."""

    host: HostIndex
    factor: Annotated[float, Unit("times slower"), Bounds(
        "number", 1, MAX_STRAGGLER_FACTOR, "times slower", lo_open=True)]
    """How many times slower the host computes (> 1)."""
    start_s: StartS
    """When the slowdown starts, in s after the cell's workers start."""
    duration_s: PhaseS
    """How long it lasts, in s."""


@dataclass(frozen=True, kw_only=True)
class ScenarioFile:
    """A network scenario: the hosts of one pipeline and the links between them."""

    __pydantic_config__ = ConfigDict(**SPEC_CONFIG, title="Network scenario",
                                     use_attribute_docstrings=True)

    description: str
    """What the scenario stands for, in a sentence or two."""
    layout: LayoutEntry
    link: LinkEntry
    machine_link: MachineLinkEntry | None = None
    """The links inside a machine (only with layout.ranks_per_machine > 1; none given:
    unshaped)."""
    links: tuple[LinkOverrideEntry, ...] = ()
    """Links that differ from the default; later entries win."""
    hosts: tuple[HostEntry, ...] = ()
    """Per-host aggregate caps."""
    competing: tuple[CompetingEntry, ...] = ()
    """Bulk TCP flows beside the training, on chosen links over chosen intervals."""
    stragglers: tuple[StragglerEntry, ...] = ()
    """Hosts whose compute runs slower over an interval."""


def scenario_schema() -> dict:
    """The JSON Schema of scenario files (committed as scenarios/scenario.schema.json)."""
    return json_schema(ScenarioFile)


if __name__ == "__main__":
    print(json.dumps(scenario_schema(), indent=2))
