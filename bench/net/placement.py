"""Placement: which rank of a cell runs on which host of its scenario, and which links
carry which traffic.

    from bench.net.placement import place
    from bench.net.scenario import load_scenario
    p = place(load_scenario("heterogeneous"), stages=4, replicas=1)
    print(p.table())          # host, rank, stage, replica and what each link carries
    p.probe_links()           # [(0, 1), (1, 0), (1, 2), ...]: exactly the used links
    p.to_dict()               # meta.json's placement block

One rule, here and nowhere else: rank r = replica * stages + stage runs on host r, except
on machines of several ranks (layout.ranks_per_machine > 1) holding replicas (the
default, the paper's setting: data parallelism inside a machine, the pipeline across),
where it runs on host stage * replicas + replica; host h is on machine h //
ranks_per_machine. A cell that needs more hosts than its scenario has is refused
(`PlacementError`), one that needs fewer leaves the last hosts idle (`idle_hosts`). The
traffic each link carries: docs/network.md, "Placement: which links carry what".
"""

from __future__ import annotations

import dataclasses
import io
from dataclasses import dataclass

from bench.net.scenario import NetworkScenario

__all__ = ["LinkUse", "Placement", "PlacementError", "RankPlace", "host_of_rank", "place"]

TABLE_WIDTH = 120  # wide enough for an 8-stage link list without wrapping


class PlacementError(ValueError):
    """A cell that cannot be placed on its scenario's hosts."""


def _check_index(owner: str, name: str, value: object, lo: int, hi: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlacementError(f"{owner}.{name} must be an int, got {value!r}")
    if value < lo or (hi is not None and value >= hi):
        bound = f"in [{lo}, {hi})" if hi is not None else f">= {lo}"
        raise PlacementError(f"{owner}.{name} must be {bound}, got {value}")


@dataclass(frozen=True)
class RankPlace:
    """Where one rank runs and what it computes."""

    rank: int
    host: int
    stage: int
    replica: int
    machine: int | None = None  # None: one rank per machine (the host is the machine)

    def __post_init__(self) -> None:
        for name in ("rank", "host", "stage", "replica"):
            _check_index("RankPlace", name, getattr(self, name), 0)
        if self.machine is not None:
            _check_index("RankPlace", "machine", self.machine, 0)

    def to_dict(self) -> dict:
        out = {"rank": self.rank, "host": self.host, "stage": self.stage,
               "replica": self.replica}
        return out if self.machine is None else {**out, "machine": self.machine}


@dataclass(frozen=True)
class LinkUse:
    """One directed host-to-host link the cell uses: what it carries and what the
    scenario gives it. `rate_mbit` is the payload rate (link rate capped by the hosts'
    uplink and downlink; None = unshaped), `delay_ms` the one-way delay; `kind`, with
    several ranks per machine: "machine" (inside one) or "network" (between two)."""

    src: int
    dst: int
    traffic: tuple[str, ...]
    rate_mbit: float | None
    delay_ms: float
    kind: str | None = None

    def __post_init__(self) -> None:
        _check_index("LinkUse", "src", self.src, 0)
        _check_index("LinkUse", "dst", self.dst, 0)
        if self.src == self.dst:
            raise PlacementError(f"LinkUse joins two different hosts, got {self.src} -> {self.dst}")
        if not self.traffic or not all(isinstance(t, str) and t for t in self.traffic):
            raise PlacementError(f"LinkUse {self.src} -> {self.dst}.traffic must name what the "
                                 f"link carries, got {self.traffic!r}")
        if self.rate_mbit is not None and not self.rate_mbit > 0:
            raise PlacementError(f"LinkUse {self.src} -> {self.dst}.rate_mbit must be > 0 or "
                                 f"None (unshaped), got {self.rate_mbit!r}")
        if not self.delay_ms >= 0:
            raise PlacementError(f"LinkUse {self.src} -> {self.dst}.delay_ms must be >= 0, "
                                 f"got {self.delay_ms!r}")
        if self.kind not in (None, "machine", "network"):
            raise PlacementError(f"LinkUse {self.src} -> {self.dst}.kind must be machine, "
                                 f"network or None, got {self.kind!r}")

    @property
    def pipeline(self) -> bool:
        """Carries activations or gradients (not only the data-parallel exchange)."""
        return any(not t.startswith("dp ") for t in self.traffic)

    def to_dict(self) -> dict:
        out = {"src": self.src, "dst": self.dst, "traffic": list(self.traffic),
               "rate_mbit": self.rate_mbit, "delay_ms": self.delay_ms}
        return out if self.kind is None else {**out, "kind": self.kind}


@dataclass(frozen=True)
class Placement:
    """The ranks of one cell on the hosts of one scenario (see the module docstring)."""

    scenario: str
    stages: int
    replicas: int
    n_hosts: int  # the scenario's hosts; ranks use the first stages * replicas of them
    ranks: tuple[RankPlace, ...]
    links: tuple[LinkUse, ...]
    ranks_per_machine: int = 1
    within_machine: str = "replicas"  # what a machine's ranks hold (module docstring)

    def __post_init__(self) -> None:
        _check_index("Placement", "stages", self.stages, 1)
        _check_index("Placement", "replicas", self.replicas, 1)
        _check_index("Placement", "n_hosts", self.n_hosts, self.world_size)
        want = [(r, r % self.stages, r // self.stages) for r in range(self.world_size)]
        got = [(p.rank, p.stage, p.replica) for p in self.ranks]
        if got != want:
            raise PlacementError(f"Placement.ranks must be ranks 0..{self.world_size - 1} in "
                                 f"order with rank = replica * stages + stage, got {got}")
        hosts = [p.host for p in self.ranks]
        if len(set(hosts)) != len(hosts) or not all(h < self.n_hosts for h in hosts):
            raise PlacementError(f"Placement.ranks must use distinct hosts in [0, "
                                 f"{self.n_hosts}), got {hosts}")
        ends = [(link.src, link.dst) for link in self.links]
        if len(set(ends)) != len(ends) or not set(sum(ends, ())) <= set(hosts):
            raise PlacementError(f"Placement.links must be distinct links between the "
                                 f"placed hosts {hosts}, got {ends}")
        machines = [p.machine for p in self.ranks]
        want_machines = [None if self.ranks_per_machine == 1 else h // self.ranks_per_machine
                         for h in hosts]
        if machines != want_machines:
            raise PlacementError(f"Placement.ranks' machines must be host // "
                                 f"{self.ranks_per_machine} (None with one rank per "
                                 f"machine), got {machines}")

    @property
    def world_size(self) -> int:
        return self.stages * self.replicas

    @property
    def idle_hosts(self) -> tuple[int, ...]:
        """The scenario's hosts no rank runs on."""
        used = {p.host for p in self.ranks}
        return tuple(h for h in range(self.n_hosts) if h not in used)

    def within(self, n_hosts: int) -> Placement:
        """The same placement on the first n_hosts of the scenario's hosts (a launcher
        that gives fewer, as an SSH hostfile: its idle hosts are among those it gives);
        a PlacementError when a rank's host is not among them."""
        return dataclasses.replace(self, n_hosts=min(n_hosts, self.n_hosts))

    def host_of(self, rank: int) -> int:
        _check_index("Placement.host_of", "rank", rank, 0, self.world_size)
        return self.ranks[rank].host

    def links_of(self, rank: int) -> tuple[LinkUse, ...]:
        """The links rank `rank` sends or receives on."""
        host = self.host_of(rank)
        return tuple(link for link in self.links if host in (link.src, link.dst))

    def probe_links(self) -> list[tuple[int, int]]:
        """(src, dst) host pairs to probe: exactly the used links, in table order."""
        return [(link.src, link.dst) for link in self.links]

    def slowest_link(self, pipeline_only: bool = True) -> LinkUse | None:
        """The used link with the lowest payload rate (of those carrying activations or
        gradients unless `pipeline_only` is False); None when every such link is
        unshaped or there is none (a 1-stage cell)."""
        shaped = [link for link in self.links
                  if link.rate_mbit is not None and (link.pipeline or not pipeline_only)]
        return min(shaped, key=lambda link: link.rate_mbit, default=None)

    def to_dict(self) -> dict:
        """meta.json's placement; the machine keys only with several ranks per machine."""
        out = {"scenario": self.scenario, "stages": self.stages, "replicas": self.replicas,
               "n_hosts": self.n_hosts, "idle_hosts": list(self.idle_hosts),
               "ranks": [p.to_dict() for p in self.ranks],
               "links": [link.to_dict() for link in self.links]}
        if self.ranks_per_machine > 1:
            out.update(ranks_per_machine=self.ranks_per_machine,
                       within_machine=self.within_machine)
        return out

    def table(self) -> str:
        """Plain text: one line per rank (host, rank, stage, replica, and its machine where
        machines hold several ranks), then one line per used link (what it carries, its
        rate and delay, and its kind: inside a machine or between two). Drawn by rich."""
        # imported here: placing a cell needs no rich
        from rich.console import Console
        from rich.table import Table

        machines = self.ranks_per_machine > 1
        ranks = Table(box=None, pad_edge=False)
        for name in ("host", "rank", "stage", "replica", *(["machine"] if machines else []),
                     "links"):
            ranks.add_column(name, justify="left" if name == "links" else "right")
        for p in self.ranks:
            peers = ", ".join(f"{link.src}->{link.dst}" for link in self.links_of(p.rank))
            ranks.add_row(str(p.host), str(p.rank), str(p.stage), str(p.replica),
                          *([str(p.machine)] if machines else []), peers or "-")
        if self.idle_hosts:
            ranks.caption = f"idle hosts: {', '.join(map(str, self.idle_hosts))}"
            ranks.caption_justify = "left"
        links = Table(box=None, pad_edge=False, caption="rate: payload Mbit/s; delay: one way, ms",
                      caption_justify="left")
        for name in ("link", *(["kind"] if machines else []), "rate", "delay", "carries"):
            links.add_column(name, justify="right" if name in ("rate", "delay") else "left")
        for link in self.links:
            rate = "unshaped" if link.rate_mbit is None else f"{link.rate_mbit:g}"
            links.add_row(f"{link.src} -> {link.dst}", *([link.kind] if machines else []),
                          rate, f"{link.delay_ms:g}", "; ".join(link.traffic))
        out = io.StringIO()
        console = Console(file=out, width=TABLE_WIDTH, markup=False, highlight=False,
                          color_system=None)
        rule = (f"{self.ranks_per_machine} ranks per machine, a machine holding "
                f"{self.within_machine}" if machines else "rank = replica * stages + stage")
        console.print(f"placement: {self.stages} stages x {self.replicas} "
                      f"replica{'s' if self.replicas > 1 else ''} on {self.scenario!r} "
                      f"({self.n_hosts} hosts, {rule})")
        console.print(ranks)
        if self.links:
            console.print(links)
        # rich pads every line to the table's width; the report embeds the text
        return "\n".join(line.rstrip() for line in out.getvalue().splitlines())


def _traffic(stages: int, replicas: int) -> dict[tuple[int, int], list[str]]:
    """What each directed (src rank, dst rank) pair carries, in a stable order: the
    pipeline links of each replica, then the data-parallel pairs of each stage."""
    carries: dict[tuple[int, int], list[str]] = {}
    for r in range(replicas):
        tag = f" (replica {r})" if replicas > 1 else ""
        for s in range(stages - 1):
            a, b = r * stages + s, r * stages + s + 1
            carries.setdefault((a, b), []).append(f"activations stage {s}->{s + 1}{tag}")
            carries.setdefault((b, a), []).append(f"gradients stage {s + 1}->{s}{tag}")
    for s in range(stages):
        for r in range(replicas):
            for q in range(replicas):
                if q != r:
                    carries.setdefault((r * stages + s, q * stages + s), []).append(f"dp stage {s}")
    return carries


def host_of_rank(rank: int, stages: int, replicas: int, scenario: NetworkScenario) -> int:
    """The host rank `rank` of a stages x replicas cell runs on (the module docstring's
    rule): consecutive hosts (one machine) hold one stage's replicas where machines hold
    replicas, else one replica's consecutive stages."""
    layout = scenario.layout
    if layout.ranks_per_machine > 1 and layout.within_machine == "replicas":
        return (rank % stages) * replicas + rank // stages
    return rank


def place(scenario: NetworkScenario, stages: int, replicas: int = 1) -> Placement:
    """The one placement of a cell of `stages` x `replicas` ranks on `scenario`'s hosts
    (see the module docstring). Raises PlacementError when the cell needs more hosts
    than the scenario has."""
    _check_index("place", "stages", stages, 1)
    _check_index("place", "replicas", replicas, 1)
    world = stages * replicas
    layout = scenario.layout
    if world > scenario.n_hosts:
        raise PlacementError(
            f"cell of {stages} stages x {replicas} replica(s) needs {world} hosts; scenario "
            f"{scenario.name!r} has {scenario.n_hosts} (layout {layout.stages} stages x "
            f"{layout.replicas} replica(s)): run at most {scenario.n_hosts} ranks on it, or "
            f"use a scenario with {world} hosts or more")
    machines = layout.ranks_per_machine > 1
    host = [host_of_rank(r, stages, replicas, scenario) for r in range(world)]
    ranks = tuple(RankPlace(r, host[r], r % stages, r // stages,
                            scenario.machine_of(host[r]) if machines else None)
                  for r in range(world))

    def kind(a: int, b: int) -> str | None:
        if not machines:
            return None
        return "machine" if scenario.same_machine(a, b) else "network"

    links = tuple(
        LinkUse(host[a], host[b], tuple(what), scenario.payload_rate_mbit(host[a], host[b]),
                scenario.link_spec(host[a], host[b]).delay_ms, kind(host[a], host[b]))
        for (a, b), what in _traffic(stages, replicas).items())
    return Placement(scenario.name, stages, replicas, scenario.n_hosts, ranks, links,
                     layout.ranks_per_machine, layout.within_machine)
