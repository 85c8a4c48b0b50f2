"""Network scenarios: one YAML file per scenario in `scenarios/`, parsed into a frozen,
validated `NetworkScenario` (every unit is in the key's name):

    description: Paper setting, 100 Mbit/s between every pair of hosts.
    layout: {stages: 4, replicas: 1}   # hosts = stages * replicas, host i = rank i
    layout: {stages: 2, replicas: 2, ranks_per_machine: 2}   # 2 machines x 2 ranks
    machine_link: {rate_mbit: pcie4-x16}                      # inside a machine
    link: {rate_mbit: 100, delay_ms: 0, jitter_ms: 0, loss_pct: 0, queue_packets: 1000}
    links: [{src: 1, dst: 2, rate_mbit: 10}, {hosts: [0, 3], delay_ms: 40}]  # overrides
    hosts: [{host: 3, uplink_mbit: 50, downlink_mbit: 200}]       # per-host caps
    competing: [{src: 0, dst: 1, start_s: 20, duration_s: 30}]    # bulk TCP flows
    stragglers: [{host: 2, factor: 2, start_s: 20, duration_s: 30}]

    load_scenario("100mbps"); load_scenario("path/to/file.yaml")

Every mistake raises `ScenarioError` naming the file, the field and the value. Schedules,
competing flows, stragglers, the ranges (`Bounds`, checked by `check_bounds`) and the file
schema: docs/architecture/launch.md, "Scenarios".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, TypeVar

from bench import SCENARIO_DIR
from bench.net.competing import CompetingFlow
from bench.net.links import HostCaps, Layout, LinkOverride, LinkSpec, ScenarioError, check_bounds
from bench.net.scenario_file import (
    DEFAULT_QUEUE_PACKETS,
    LINK_KEYS,
    MACHINE_RATES_MBIT,
    MAX_COMPETING_FLOWS,
    MAX_HOSTS,
    ScenarioFile,
)
from bench.net.schedule import schedule_from_entry
from bench.net.straggler import Straggler
from specfile import SpecError, raising, read_file, validate

__all__ = [
    "SCENARIO_DIR",
    "HostCaps",
    "Layout",
    "LinkOverride",
    "LinkSpec",
    "NetworkScenario",
    "ScenarioError",
    "available_scenarios",
    "check_bounds",
    "load_scenario",
    "parse_scenario",
    "with_link",
]


T = TypeVar("T")




@dataclass(frozen=True)
class NetworkScenario:
    name: str
    description: str
    layout: Layout
    link: LinkSpec
    overrides: tuple[LinkOverride, ...] = ()
    host_caps: tuple[HostCaps, ...] = ()
    competing: tuple[CompetingFlow, ...] = ()
    stragglers: tuple[Straggler, ...] = ()
    # the links inside a machine (layout.ranks_per_machine > 1), and the name of its rate
    machine_link: LinkSpec = LinkSpec(None)
    machine_rate: str | None = None

    def __post_init__(self) -> None:
        if not self.description.strip():
            raise ScenarioError.at("description", "a non-empty string", self.description)
        n = self.layout.n_hosts
        if n > MAX_HOSTS:
            raise ScenarioError.at("layout", f"at most {MAX_HOSTS} hosts", n)
        for o in self.overrides:
            for end in ("src", "dst"):
                if not 0 <= getattr(o, end) < n:
                    raise ScenarioError.at(f"links.{end}", f"a host index in [0, {n})",
                                           getattr(o, end))
            if self.same_machine(o.src, o.dst):
                raise ScenarioError.at("links", f"a link between two machines (hosts {o.src} "
                                       f"and {o.dst} share machine {self.machine_of(o.src)}: "
                                       f"machine_link sets the links inside a machine)",
                                       [o.src, o.dst])
        if self.layout.ranks_per_machine > 1 and self.host_caps:
            raise ScenarioError.at("hosts", "no per-host caps with several ranks per machine "
                                   "(a machine's ranks share its network card, which caps on "
                                   "each rank's own address cannot model)",
                                   [c.host for c in self.host_caps])
        self._check_competing(n)
        self._check_stragglers(n)

    def _check_competing(self, n: int) -> None:
        if len(self.competing) > MAX_COMPETING_FLOWS:
            raise ScenarioError.at("competing", f"at most {MAX_COMPETING_FLOWS} flows",
                                   len(self.competing))
        for k, flow in enumerate(self.competing):
            for end in ("src", "dst"):
                if not 0 <= getattr(flow, end) < n:
                    raise ScenarioError.at(f"competing[{k}].{end}",
                                           f"a host index in [0, {n})", getattr(flow, end))
            if self.payload_rate_mbit(flow.src, flow.dst) is None:
                raise ScenarioError.at(f"competing[{k}]", f"a flow on a shaped link (link "
                                       f"{flow.src} -> {flow.dst} has no rate_mbit, so "
                                       f"nothing is shared)", flow.to_dict())

    def _check_stragglers(self, n: int) -> None:
        for k, s in enumerate(self.stragglers):
            if not 0 <= s.host < n:
                raise ScenarioError.at(f"stragglers[{k}].host", f"a host index in [0, {n})",
                                       s.host)
            for j, other in enumerate(self.stragglers[:k]):
                if other.host == s.host and s.start_s < other.end_s \
                        and other.start_s < s.end_s:
                    raise ScenarioError.at(f"stragglers[{k}].start_s", f"an interval of "
                                           f"host {s.host} apart from stragglers[{j}]'s "
                                           f"({other.start_s:g}-{other.end_s:g} s)", s.start_s)

    @property
    def n_hosts(self) -> int:
        return self.layout.n_hosts

    def machine_of(self, host: int) -> int:
        """The machine host `host` is on (hosts 0..k-1 are machine 0, with k ranks per
        machine)."""
        return host // self.layout.ranks_per_machine

    def same_machine(self, a: int, b: int) -> bool:
        return self.machine_of(a) == self.machine_of(b)

    def link_spec(self, src: int, dst: int) -> LinkSpec:
        """The spec of the directed link src -> dst: machine_link inside a machine, else
        the last matching override or the default link."""
        if self.same_machine(src, dst):
            return self.machine_link
        spec = self.link
        for o in self.overrides:
            if (o.src, o.dst) == (src, dst):
                spec = o.spec
        return spec

    def caps(self, host: int) -> HostCaps:
        for c in self.host_caps:
            if c.host == host:
                return c
        return HostCaps(host)

    def payload_rate_mbit(self, src: int, dst: int) -> float | None:
        """What src -> dst can carry: the link rate, capped by src's uplink and dst's
        downlink. None = unshaped."""
        rates = [self.link_spec(src, dst).rate_mbit, self.caps(src).uplink_mbit,
                 self.caps(dst).downlink_mbit]
        rates = [r for r in rates if r is not None]
        return min(rates) if rates else None

    def specs(self, n_hosts: int) -> list[LinkSpec]:
        return [self.link_spec(a, b) for a in range(n_hosts) for b in range(n_hosts) if a != b]

    def competing_within(self, n_hosts: int) -> tuple[CompetingFlow, ...]:
        """The competing flows between the first n_hosts hosts (a cell may use fewer)."""
        return tuple(f for f in self.competing if f.src < n_hosts and f.dst < n_hosts)

    def stragglers_within(self, n_hosts: int) -> tuple[Straggler, ...]:
        """The stragglers among the first n_hosts hosts."""
        return tuple(s for s in self.stragglers if s.host < n_hosts)

    def changes_during_run(self, n_hosts: int) -> bool:
        """Whether anything changes during a run on n_hosts hosts: a link's schedule, a
        competing flow or a straggler."""
        return bool(self.scheduled_links(n_hosts) or self.competing_within(n_hosts)
                    or self.stragglers_within(n_hosts))

    def scheduled_links(self, n_hosts: int) -> list[tuple[int, int, LinkSpec]]:
        """(src, dst, spec) of every directed link between n_hosts hosts with a schedule."""
        return [(a, b, self.link_spec(a, b)) for a in range(n_hosts) for b in range(n_hosts)
                if a != b and self.link_spec(a, b).schedule is not None]

    def longest_outage_s(self, n_hosts: int) -> float:
        """The longest down phase of any link between n_hosts hosts (0: none)."""
        return max((s.schedule.longest_outage_s for _, _, s in self.scheduled_links(n_hosts)),
                   default=0.0)

    def between_machines(self) -> NetworkScenario:
        """The links between machines as a scenario of one host per machine (what a
        launcher shaping each machine's one interface renders; the links inside a machine
        are not in it); itself with one rank per machine. A ScenarioError where two
        machines' ranks have different links between them, or competing flows or
        stragglers name a rank."""
        k, m = self.layout.ranks_per_machine, self.layout.machines
        if k == 1:
            return self
        if self.competing or self.stragglers:
            raise ScenarioError.at("competing", "no competing flows or stragglers on "
                                   "machines of several ranks", self.name)
        overrides = []
        for a in range(m):
            for b in (b for b in range(m) if b != a):
                spec = self.link_spec(a * k, b * k)
                for x in range(a * k, a * k + k):
                    for y in range(b * k, b * k + k):
                        if self.link_spec(x, y) != spec:
                            raise ScenarioError.at("links", f"the same link between every "
                                                   f"rank of machine {a} and of machine {b}",
                                                   f"{x} -> {y} differs from {a * k} -> {b * k}")
                if spec != self.link:
                    overrides.append(LinkOverride(a, b, spec))
        return replace(self, layout=Layout(m), overrides=tuple(overrides),
                       machine_link=LinkSpec(None), machine_rate=None)

    def to_dict(self) -> dict:
        """The scenario's values; `competing` and `stragglers` only where it has them."""
        out = {
            "name": self.name, "description": self.description,
            "layout": self.layout.to_dict(),
            "link": self.link.to_dict(),
            "links": [{"src": o.src, "dst": o.dst, **o.spec.to_dict()} for o in self.overrides],
            "hosts": [{"host": c.host, "uplink_mbit": c.uplink_mbit,
                       "downlink_mbit": c.downlink_mbit} for c in self.host_caps],
        }
        if self.layout.ranks_per_machine > 1:
            out["machine_link"] = {**self.machine_link.to_dict(), "rate": self.machine_rate}
        if self.competing:
            out["competing"] = [f.to_dict() for f in self.competing]
        if self.stragglers:
            out["stragglers"] = [s.to_dict() for s in self.stragglers]
        return out


def _within(prefix: str, build: Callable[..., T], *args: Any) -> T:
    """build(*args), its SpecError's field seen from `prefix` (where it is in the file)."""
    try:
        return build(*args)
    except SpecError as e:
        raise e.within(prefix) from None


def _fields(spec: LinkSpec) -> dict:
    return {f.name: getattr(spec, f.name) for f in fields(spec)}


def _link(base: dict, changes: dict, directory: Path) -> LinkSpec:
    """`base` (LinkSpec fields and values) with `changes` (a file's link keys); naming one
    queue unit drops the other, and a link with neither gets the default queue; a
    schedule entry is read (its trace files relative to `directory`)."""
    changes = dict(changes)
    if changes.get("schedule") is not None:
        changes["schedule"] = _within("schedule", schedule_from_entry, changes["schedule"],
                                      directory)
    values = {**base, **changes}
    for key, other in (("queue_bytes", "queue_packets"), ("queue_packets", "queue_bytes")):
        if key in changes and other not in changes:
            values[other] = None
    if values["queue_packets"] is None and values["queue_bytes"] is None:
        values["queue_packets"] = DEFAULT_QUEUE_PACKETS
    return LinkSpec(**values)


def _scenario(file: ScenarioFile, name: str, directory: Path) -> NetworkScenario:
    """The network a checked file describes; the values' own checks run here."""
    layout = _within("layout", Layout, file.layout.stages, file.layout.replicas,
                     file.layout.ranks_per_machine, file.layout.within_machine)
    n = layout.n_hosts
    machine_link, machine_rate = _machine_link(file, layout)
    default = _within("link", _link, {}, {k: getattr(file.link, k) for k in LINK_KEYS},
                      directory)

    overrides: list[LinkOverride] = []
    for k, entry in enumerate(file.links):
        where = f"links[{k}]"
        for key, host in entry.ends():
            if not 0 <= host < n:
                raise ScenarioError.at(f"{where}.{key}", f"a host index in [0, {n})", host)
        (_, a), (_, b) = entry.ends()
        if a == b:
            raise ScenarioError.at(where, "two different hosts", [a, b])
        spec = _within(where, _link, _fields(default), entry.changes(), directory)
        overrides += [LinkOverride(src, dst, spec) for src, dst in entry.directions()]

    caps: list[HostCaps] = []
    for k, entry in enumerate(file.hosts):
        where = f"hosts[{k}]"
        if not 0 <= entry.host < n:
            raise ScenarioError.at(f"{where}.host", f"a host index in [0, {n})", entry.host)
        if any(c.host == entry.host for c in caps):
            raise ScenarioError.at(f"{where}.host", "each host listed once", entry.host)
        caps.append(_within(where, HostCaps, entry.host, entry.uplink_mbit, entry.downlink_mbit))
    flows = tuple(_within(f"competing[{k}]", CompetingFlow, e.src, e.dst, e.start_s,
                          e.duration_s, e.max_rate_mbit) for k, e in enumerate(file.competing))
    stragglers = tuple(_within(f"stragglers[{k}]", Straggler, e.host, e.factor, e.start_s,
                               e.duration_s) for k, e in enumerate(file.stragglers))
    return NetworkScenario(name=name, description=file.description.strip(), layout=layout,
                           link=default, overrides=tuple(overrides), host_caps=tuple(caps),
                           competing=flows, stragglers=stragglers,
                           machine_link=machine_link, machine_rate=machine_rate)


def _machine_link(file: ScenarioFile, layout: Layout) -> tuple[LinkSpec, str | None]:
    """The links inside a machine and the name of their rate (unshaped when the file
    gives none); a machine_link needs several ranks per machine."""
    entry = file.machine_link
    if entry is None:
        return LinkSpec(None), None
    if layout.ranks_per_machine == 1:
        raise ScenarioError.at("machine_link", "layout.ranks_per_machine > 1 (with one rank "
                               "per machine no link lies inside a machine)", "given")
    named = entry.rate_mbit if isinstance(entry.rate_mbit, str) else None
    rate = MACHINE_RATES_MBIT[named] if named else entry.rate_mbit
    return _within("machine_link", LinkSpec, rate, entry.delay_ms), named


def parse_scenario(raw: Any, name: str, source: str | None = None,
                   directory: Path | None = None) -> NetworkScenario:
    """Build a NetworkScenario from parsed YAML; `source` names the file in errors;
    `directory`: where its trace files are (None: the folder of `source` where that is a
    file, else SCENARIO_DIR)."""
    if directory is None:
        directory = Path(source).parent if source and Path(source).is_file() else SCENARIO_DIR
    with raising(ScenarioError, source=source or name):
        return _scenario(validate(ScenarioFile, raw), name, directory)


def available_scenarios(directory: Path = SCENARIO_DIR) -> list[str]:
    return sorted(p.stem for p in directory.glob("*.yaml"))


def load_scenario(name_or_path: str | Path, directory: Path = SCENARIO_DIR) -> NetworkScenario:
    """Load `scenarios/NAME.yaml` by name, or any YAML file by path."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = directory / f"{name_or_path}.yaml"
    if not path.is_file():
        names = ", ".join(available_scenarios(directory)) or "(none)"
        raise ScenarioError(f"no scenario {str(name_or_path)!r} (looked for {path}); "
                            f"available: {names}")
    raw = read_file(path, error=ScenarioError, what="scenario file")
    return parse_scenario(raw, name=path.stem, source=str(path), directory=path.parent)


def with_link(scenario: NetworkScenario, **changes: Any) -> NetworkScenario:
    """A copy of `scenario` whose default link has `changes` (used by tests and probes)."""
    return replace(scenario, link=replace(scenario.link, **changes))
