"""Network scenarios: one YAML file per scenario in `scenarios/`, parsed into a
frozen, validated `NetworkScenario`.

    python -c "from bench.net.scenario import load_scenario; print(load_scenario('100mbps'))"

File format (every unit is in the key's name):

    description: Paper setting, 100 Mbit/s between every pair of hosts.
    layout: {stages: 4, replicas: 1}     # hosts = stages * replicas, host i = pipeline rank i
    link:                                # default for every directed host-to-host link
      rate_mbit: 100                     # payload rate; null = unshaped
      delay_ms: 0                        # one-way delay
      jitter_ms: 0                       # +- uniform around delay_ms
      loss_pct: 0                        # random packet loss, percent
      queue_packets: 1000                # or queue_bytes; at most one of the two
    links:                               # optional overrides, later entries win
      - {src: 1, dst: 2, rate_mbit: 10}  # one direction (asymmetric links)
      - {hosts: [0, 3], delay_ms: 40}    # both directions
    hosts:                               # optional per-host aggregate caps
      - {host: 3, uplink_mbit: 50, downlink_mbit: 200}

Every mistake (unknown key, missing field, wrong type such as "100mbps" where a
number is expected, a value out of range) raises `ScenarioError` naming the file,
the field and the value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "SCENARIO_DIR",
    "HostCaps",
    "Layout",
    "LinkOverride",
    "LinkSpec",
    "NetworkScenario",
    "ScenarioError",
    "available_scenarios",
    "load_scenario",
    "parse_scenario",
    "with_link",
]

SCENARIO_DIR = Path(__file__).resolve().parents[2] / "scenarios"

# Bounds on what one emulated link may ask for: beyond them a value is a typo.
MAX_RATE_MBIT = 400_000.0  # 400 Gbit/s
MAX_DELAY_MS = 10_000.0
MAX_QUEUE_PACKETS = 1_000_000
MIN_QUEUE_BYTES = 1514  # one full Ethernet frame
MAX_QUEUE_BYTES = 1 << 30
MAX_STAGES = 64
MAX_REPLICAS = 64
MAX_HOSTS = 200  # addresses are 198.18.0.1 .. 198.18.0.200 (one /24)
DEFAULT_QUEUE_PACKETS = 1000


class ScenarioError(ValueError):
    """A scenario file or value that does not describe a valid network."""


def _fail(source: str, field_name: str, expected: str, value: Any) -> ScenarioError:
    return ScenarioError(f"{source}: field '{field_name}': expected {expected}, got {value!r}")


def _number(source: str, name: str, value: Any, lo: float, hi: float, unit: str,
            lo_open: bool = False) -> float:
    # bool is an int subclass in Python and YAML `yes` parses to True: refuse it.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(source, name, f"a number in {unit}", value)
    if not math.isfinite(value) or value > hi or value < lo or (lo_open and value == lo):
        bound = f"> {lo:g}" if lo_open else f">= {lo:g}"
        raise _fail(source, name, f"a number {bound} and <= {hi:g} ({unit})", value)
    return float(value)


def _integer(source: str, name: str, value: Any, lo: int, hi: int, unit: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(source, name, f"an integer ({unit})", value)
    if not lo <= value <= hi:
        raise _fail(source, name, f"an integer in [{lo}, {hi}] ({unit})", value)
    return value


def _mapping(source: str, name: str, value: Any, allowed: set[str], required: set[str]) -> dict:
    if not isinstance(value, dict):
        raise _fail(source, name or "(top level)", "a mapping", value)
    for key in value:
        if key not in allowed:
            raise _fail(source, f"{name}.{key}" if name else str(key),
                        f"one of the keys {sorted(allowed)}", key)
    for key in sorted(required):
        if key not in value:
            raise _fail(source, f"{name}.{key}" if name else key, "a value (field is required)",
                        None)
    return value


@dataclass(frozen=True)
class LinkSpec:
    """One direction of one host-to-host link. rate_mbit None = unshaped."""

    rate_mbit: float | None
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss_pct: float = 0.0
    queue_packets: int | None = DEFAULT_QUEUE_PACKETS
    queue_bytes: int | None = None
    source: str = field(default="<LinkSpec>", compare=False, repr=False)

    def __post_init__(self) -> None:
        s = self.source
        if self.rate_mbit is not None:
            _number(s, "rate_mbit", self.rate_mbit, 0.0, MAX_RATE_MBIT, "Mbit/s", lo_open=True)
        _number(s, "delay_ms", self.delay_ms, 0.0, MAX_DELAY_MS, "ms")
        _number(s, "jitter_ms", self.jitter_ms, 0.0, MAX_DELAY_MS, "ms")
        _number(s, "loss_pct", self.loss_pct, 0.0, 99.0, "percent")
        if self.jitter_ms > self.delay_ms:
            raise _fail(s, "jitter_ms", f"at most delay_ms ({self.delay_ms:g} ms)", self.jitter_ms)
        if (self.queue_packets is None) == (self.queue_bytes is None):
            raise _fail(s, "queue_packets", "exactly one of queue_packets and queue_bytes",
                        (self.queue_packets, self.queue_bytes))
        if self.queue_packets is not None:
            _integer(s, "queue_packets", self.queue_packets, 1, MAX_QUEUE_PACKETS, "packets")
        if self.queue_bytes is not None:
            _integer(s, "queue_bytes", self.queue_bytes, MIN_QUEUE_BYTES, MAX_QUEUE_BYTES,
                     "bytes")
        # store numbers as float whatever YAML gave (100 and 100.0 are the same link)
        for name in ("delay_ms", "jitter_ms", "loss_pct"):
            object.__setattr__(self, name, float(getattr(self, name)))
        if self.rate_mbit is not None:
            object.__setattr__(self, "rate_mbit", float(self.rate_mbit))

    @property
    def shaped(self) -> bool:
        return self.rate_mbit is not None or self.delay_ms > 0 or self.jitter_ms > 0 \
            or self.loss_pct > 0

    def to_dict(self) -> dict:
        return {"rate_mbit": self.rate_mbit, "delay_ms": self.delay_ms,
                "jitter_ms": self.jitter_ms, "loss_pct": self.loss_pct,
                "queue_packets": self.queue_packets, "queue_bytes": self.queue_bytes}


@dataclass(frozen=True)
class LinkOverride:
    """The spec of the directed link src -> dst (host indices)."""

    src: int
    dst: int
    spec: LinkSpec


@dataclass(frozen=True)
class HostCaps:
    """Aggregate caps on everything host `host` sends (uplink) or receives (downlink)."""

    host: int
    uplink_mbit: float | None = None
    downlink_mbit: float | None = None


@dataclass(frozen=True)
class Layout:
    stages: int
    replicas: int = 1

    def __post_init__(self) -> None:
        _integer("<Layout>", "stages", self.stages, 1, MAX_STAGES, "pipeline stages")
        _integer("<Layout>", "replicas", self.replicas, 1, MAX_REPLICAS, "data-parallel replicas")

    @property
    def n_hosts(self) -> int:
        return self.stages * self.replicas

    def pipeline_links(self) -> list[tuple[int, int]]:
        """Directed links the workload uses: neighbouring stages of each replica (both
        directions: activations forward, gradients back) and the data-parallel ring of
        each stage. Host index = replica * stages + stage."""
        links: list[tuple[int, int]] = []
        for r in range(self.replicas):
            for s in range(self.stages - 1):
                a, b = r * self.stages + s, r * self.stages + s + 1
                links += [(a, b), (b, a)]
        if self.replicas > 1:
            for s in range(self.stages):
                for r in range(self.replicas):
                    a = r * self.stages + s
                    b = ((r + 1) % self.replicas) * self.stages + s
                    if (a, b) not in links:
                        links.append((a, b))
        return links


@dataclass(frozen=True)
class NetworkScenario:
    name: str
    description: str
    layout: Layout
    link: LinkSpec
    overrides: tuple[LinkOverride, ...] = ()
    host_caps: tuple[HostCaps, ...] = ()

    def __post_init__(self) -> None:
        if not self.description.strip():
            raise _fail(self.name, "description", "a non-empty string", self.description)
        n = self.layout.n_hosts
        if n > MAX_HOSTS:
            raise _fail(self.name, "layout", f"at most {MAX_HOSTS} hosts", n)
        for o in self.overrides:
            for end in ("src", "dst"):
                if not 0 <= getattr(o, end) < n:
                    raise _fail(self.name, f"links.{end}", f"a host index in [0, {n})",
                                getattr(o, end))

    @property
    def n_hosts(self) -> int:
        return self.layout.n_hosts

    def link_spec(self, src: int, dst: int) -> LinkSpec:
        """The spec of the directed link src -> dst (the last matching override wins)."""
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

    def to_dict(self) -> dict:
        return {
            "name": self.name, "description": self.description,
            "layout": {"stages": self.layout.stages, "replicas": self.layout.replicas},
            "link": self.link.to_dict(),
            "links": [{"src": o.src, "dst": o.dst, **o.spec.to_dict()} for o in self.overrides],
            "hosts": [{"host": c.host, "uplink_mbit": c.uplink_mbit,
                       "downlink_mbit": c.downlink_mbit} for c in self.host_caps],
        }


_LINK_KEYS = {"rate_mbit", "delay_ms", "jitter_ms", "loss_pct", "queue_packets", "queue_bytes"}
_TOP_KEYS = {"description", "layout", "link", "links", "hosts"}


def _parse_link(source: str, name: str, raw: dict, base: LinkSpec | None) -> LinkSpec:
    """Merge the link keys of `raw` over `base` (None: `raw` is the default link)."""
    values = base.to_dict() if base is not None else {
        "rate_mbit": None, "delay_ms": 0.0, "jitter_ms": 0.0, "loss_pct": 0.0,
        "queue_packets": None, "queue_bytes": None}
    for key in _LINK_KEYS & raw.keys():
        values[key] = raw[key]
    if "queue_bytes" in raw and "queue_packets" not in raw:
        values["queue_packets"] = None
    if "queue_packets" in raw and "queue_bytes" not in raw:
        values["queue_bytes"] = None
    if values["queue_packets"] is None and values["queue_bytes"] is None:
        values["queue_packets"] = DEFAULT_QUEUE_PACKETS
    try:
        return LinkSpec(**values, source=source)
    except ScenarioError as e:
        # re-raise with the field's full path in the file
        raise ScenarioError(str(e).replace("field '", f"field '{name}.", 1)) from None


def _host_index(source: str, name: str, value: Any, n_hosts: int) -> int:
    return _integer(source, name, value, 0, n_hosts - 1, f"host index, {n_hosts} hosts")


def parse_scenario(raw: Any, name: str, source: str | None = None) -> NetworkScenario:
    """Build a NetworkScenario from parsed YAML; `source` names the file in errors."""
    src = source or name
    top = _mapping(src, "", raw, _TOP_KEYS, {"description", "layout", "link"})
    if not isinstance(top["description"], str) or not top["description"].strip():
        raise _fail(src, "description", "a non-empty string", top["description"])
    lay = _mapping(src, "layout", top["layout"], {"stages", "replicas"}, {"stages"})
    stages = _integer(src, "layout.stages", lay["stages"], 1, MAX_STAGES, "pipeline stages")
    replicas = _integer(src, "layout.replicas", lay.get("replicas", 1), 1, MAX_REPLICAS,
                        "data-parallel replicas")
    if stages * replicas > MAX_HOSTS:
        raise _fail(src, "layout", f"stages * replicas <= {MAX_HOSTS}", stages * replicas)
    n = stages * replicas
    link_raw = _mapping(src, "link", top["link"], _LINK_KEYS, {"rate_mbit"})
    default = _parse_link(src, "link", link_raw, None)

    overrides: list[LinkOverride] = []
    links_raw = top.get("links", [])
    if not isinstance(links_raw, list):
        raise _fail(src, "links", "a list of link overrides", links_raw)
    for k, item in enumerate(links_raw):
        where = f"links[{k}]"
        item = _mapping(src, where, item, _LINK_KEYS | {"src", "dst", "hosts"}, set())
        if "hosts" in item:
            if "src" in item or "dst" in item:
                raise _fail(src, f"{where}.hosts", "either hosts: [a, b] or src/dst, not both",
                            item)
            pair = item["hosts"]
            if not isinstance(pair, list) or len(pair) != 2:
                raise _fail(src, f"{where}.hosts", "a list of two host indices", pair)
            a = _host_index(src, f"{where}.hosts[0]", pair[0], n)
            b = _host_index(src, f"{where}.hosts[1]", pair[1], n)
            directions = [(a, b), (b, a)]
        elif "src" in item and "dst" in item:
            directions = [(_host_index(src, f"{where}.src", item["src"], n),
                           _host_index(src, f"{where}.dst", item["dst"], n))]
        else:
            raise _fail(src, f"{where}.src", "src and dst, or hosts: [a, b]", item)
        for a, b in directions:
            if a == b:
                raise _fail(src, where, "two different hosts", [a, b])
        if not _LINK_KEYS & item.keys():
            raise _fail(src, where, f"at least one of {sorted(_LINK_KEYS)}", item)
        spec = _parse_link(src, where, item, default)
        overrides += [LinkOverride(a, b, spec) for a, b in directions]

    caps: list[HostCaps] = []
    hosts_raw = top.get("hosts", [])
    if not isinstance(hosts_raw, list):
        raise _fail(src, "hosts", "a list of per-host caps", hosts_raw)
    for k, item in enumerate(hosts_raw):
        where = f"hosts[{k}]"
        item = _mapping(src, where, item, {"host", "uplink_mbit", "downlink_mbit"}, {"host"})
        host = _host_index(src, f"{where}.host", item["host"], n)
        if any(c.host == host for c in caps):
            raise _fail(src, f"{where}.host", "each host listed once", host)
        up, down = item.get("uplink_mbit"), item.get("downlink_mbit")
        if up is None and down is None:
            raise _fail(src, where, "uplink_mbit or downlink_mbit", item)
        if up is not None:
            up = _number(src, f"{where}.uplink_mbit", up, 0.0, MAX_RATE_MBIT, "Mbit/s", True)
        if down is not None:
            down = _number(src, f"{where}.downlink_mbit", down, 0.0, MAX_RATE_MBIT, "Mbit/s",
                           True)
        caps.append(HostCaps(host, up, down))
    return NetworkScenario(name=name, description=top["description"].strip(),
                           layout=Layout(stages, replicas), link=default,
                           overrides=tuple(overrides), host_caps=tuple(caps))


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
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ScenarioError(f"{path}: not valid YAML: {e}") from None
    return parse_scenario(raw, name=path.stem, source=str(path))


def with_link(scenario: NetworkScenario, **changes: Any) -> NetworkScenario:
    """A copy of `scenario` whose default link has `changes` (used by tests and probes)."""
    return replace(scenario, link=replace(scenario.link, **changes))
