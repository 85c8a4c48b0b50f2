"""tc and ip commands as pure data (tuples of argv), one command per builder, and the
choice of which mechanism emulates each property of a link.

Nothing here runs a command except `probe_capabilities`; bench/net/executor.py
runs the lists. The host shaping plan that puts these commands together (an htb tree
per host, its leaves and downlink cap) is bench/net/shaping.py.

The builders of rate-limiting commands (`htb_class_argv`, `tbf_argv`) take a
`verb`: "add" creates the class or qdisc, "change" resets its rate in place (the
probe lifts a path's limits that way and puts them back).

Note on payload rates: tc counts whole frames, so a TCP bulk transfer through a
shaper set to R carries about R * 1448/1514 of payload (MSS 1448 with
timestamps, 1514-byte Ethernet frames). `payload_factor` gives the factor by
which the tc rate is raised so that the payload rate equals the scenario's rate.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from bench.net.executor import Argv, CommandError, Executor
from bench.net.scenario import LinkSpec, NetworkScenario

__all__ = [
    "Capabilities",
    "ShapingError",
    "UNLIMITED_BIT",
    "blackhole_argv",
    "burst_bytes",
    "choose_mechanisms",
    "fifo_argv",
    "htb_class_argv",
    "htb_root_argv",
    "ifb_redirect_argvs",
    "leaf_del_argv",
    "link_del_argv",
    "mechanisms_for",
    "netem_argv",
    "payload_factor",
    "probe_capabilities",
    "qdisc_del_argv",
    "tbf_argv",
    "u32_dst_filter_argv",
]

UNLIMITED_BIT = 100_000_000_000  # htb needs a rate on every class: 100 Gbit/s = "unlimited"
TCP_IP_HEADER_BYTES = 52  # IPv4 20 + TCP 20 + timestamp option 12
ETHERNET_HEADER_BYTES = 14
VERBS = ("add", "change")


class ShapingError(ValueError):
    """The scenario asks for something this host cannot emulate."""


def payload_factor(mtu: int = 1500, l2_header_bytes: int = ETHERNET_HEADER_BYTES) -> float:
    """Bytes tc counts per byte of TCP payload: (mtu + l2 header) / (mtu - TCP/IP headers)."""
    return (mtu + l2_header_bytes) / (mtu - TCP_IP_HEADER_BYTES)


def burst_bytes(rate_bit: float) -> int:
    """Token-bucket depth: 2 ms at the rate, at least 16 KiB (a few full frames and
    room for timer slack). Fast links need the 2 ms: measured through veths on a
    2-core machine, a 3 Gbit/s htb class delivered 99.4% of its rate with this
    bucket (750 kB) but 94-96% with 16 KiB, and a 1 Gbit/s class 97% with 4 KiB.
    Small enough that the initial burst is a few percent of a 1 s probe."""
    return max(16 * 1024, int(rate_bit / 8 * 0.002))


def _checked_verb(verb: str) -> str:
    if verb not in VERBS:
        raise ValueError(f"verb: expected one of {', '.join(VERBS)}, got {verb!r}")
    return verb


def _tc(netns: str | None) -> list[str]:
    return ["tc", "-n", netns] if netns else ["tc"]


def _ip(netns: str | None) -> list[str]:
    return ["ip", "-n", netns] if netns else ["ip"]


def htb_root_argv(dev: str, netns: str | None = None) -> Argv:
    # no `default`: unclassified traffic (ARP, control) goes through htb's direct queue
    return (*_tc(netns), "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb")


def htb_class_argv(dev: str, parent: str, classid: str, rate_bit: int, ceil_bit: int,
                   burst: int, netns: str | None = None, verb: str = "add") -> Argv:
    """An htb class (rates in bit/s, burst in bytes); verb "change" resets an existing one."""
    return (*_tc(netns), "class", _checked_verb(verb), "dev", dev, "parent", parent,
            "classid", classid, "htb", "rate", f"{rate_bit}bit", "ceil", f"{ceil_bit}bit",
            "burst", str(burst), "cburst", str(burst))


def tbf_argv(dev: str, rate_bit: int, burst: int, limit_bytes: int, parent: str = "root",
             handle: str | None = None, netns: str | None = None, verb: str = "add") -> Argv:
    """A token-bucket qdisc (rate in bit/s, burst and limit in bytes); verb "change"
    resets an existing one."""
    where = ["root"] if parent == "root" else ["parent", parent]
    if handle:
        where += ["handle", handle]
    return (*_tc(netns), "qdisc", _checked_verb(verb), "dev", dev, *where, "tbf",
            "rate", f"{rate_bit}bit", "burst", str(burst), "limit", str(limit_bytes))


def netem_argv(dev: str, parent: str, handle: str, delay_ms: float, jitter_ms: float = 0.0,
               loss_pct: float = 0.0, limit_packets: int = 1000,
               netns: str | None = None, verb: str = "add") -> Argv:
    """A netem leaf; verb "change" gives an existing one new values (a link's schedule)."""
    argv = [*_tc(netns), "qdisc", _checked_verb(verb), "dev", dev, "parent", parent,
            "handle", handle,
            "netem", "limit", str(limit_packets), "delay", f"{delay_ms:g}ms"]
    if jitter_ms > 0:
        argv.append(f"{jitter_ms:g}ms")
    if loss_pct > 0:
        argv += ["loss", f"{loss_pct:g}%"]
    return tuple(argv)


def fifo_argv(dev: str, parent: str, handle: str, queue_packets: int | None = None,
              queue_bytes: int | None = None, netns: str | None = None) -> Argv:
    if (queue_packets is None) == (queue_bytes is None):
        raise ValueError(f"fifo_argv: give exactly one of queue_packets={queue_packets!r} "
                         f"and queue_bytes={queue_bytes!r}")
    kind, limit = ("pfifo", queue_packets) if queue_packets is not None else ("bfifo",
                                                                              queue_bytes)
    return (*_tc(netns), "qdisc", "add", "dev", dev, "parent", parent, "handle", handle,
            kind, "limit", str(limit))


def blackhole_argv(dev: str, parent: str, handle: str, netns: str | None = None) -> Argv:
    """A leaf that drops every packet: a link that is down (a schedule's outage)."""
    return (*_tc(netns), "qdisc", "add", "dev", dev, "parent", parent, "handle", handle,
            "blackhole")


def leaf_del_argv(dev: str, parent: str, handle: str, netns: str | None = None) -> Argv:
    """Delete the leaf qdisc `handle` under class `parent` (to put another in its place)."""
    return (*_tc(netns), "qdisc", "del", "dev", dev, "parent", parent, "handle", handle)


def u32_dst_filter_argv(dev: str, parent: str, dst_ip: str, flowid: str, prio: int = 1,
                        netns: str | None = None) -> Argv:
    return (*_tc(netns), "filter", "add", "dev", dev, "parent", parent, "protocol", "ip",
            "prio", str(prio), "u32", "match", "ip", "dst", f"{dst_ip}/32", "flowid", flowid)


def ifb_redirect_argvs(dev: str, ifb: str, netns: str | None = None) -> list[Argv]:
    """Create `ifb` and send everything arriving on `dev` through it, so that an egress
    qdisc on `ifb` shapes `dev`'s ingress (a host's downlink)."""
    return [
        (*_ip(netns), "link", "add", "name", ifb, "type", "ifb"),
        (*_ip(netns), "link", "set", "dev", ifb, "up"),
        (*_tc(netns), "qdisc", "add", "dev", dev, "handle", "ffff:", "ingress"),
        (*_tc(netns), "filter", "add", "dev", dev, "parent", "ffff:", "protocol", "all",
         "u32", "match", "u32", "0", "0", "action", "mirred", "egress", "redirect",
         "dev", ifb),
    ]


def qdisc_del_argv(dev: str, parent: str = "root", netns: str | None = None) -> Argv:
    """Delete the qdisc at `parent` ("root" or "ingress") of dev, and everything under it."""
    if parent not in ("root", "ingress"):
        raise ValueError(f"parent: expected 'root' or 'ingress', got {parent!r}")
    return (*_tc(netns), "qdisc", "del", "dev", dev, parent)


def link_del_argv(dev: str, netns: str | None = None) -> Argv:
    """Delete a device (an ifb, a veth pair) with its qdiscs."""
    return (*_ip(netns), "link", "del", dev)


@dataclass(frozen=True)
class Capabilities:
    """What this host can emulate. `delay_line`: a TUN device is available, so the
    userspace delay line (bench/net/delayline.py) can add delay, jitter and loss."""

    netem: bool
    delay_line: bool

    def to_dict(self) -> dict:
        return {"netem": self.netem, "delay_line": self.delay_line}


def probe_capabilities(executor: Executor, scratch_netns: str) -> Capabilities:
    """Try a netem qdisc in a throw-away namespace (never on the host's own devices)."""
    executor.run(("ip", "netns", "add", scratch_netns))
    try:
        executor.run(("ip", "-n", scratch_netns, "link", "set", "lo", "up"))
        try:
            executor.run(("tc", "-n", scratch_netns, "qdisc", "add", "dev", "lo", "root",
                          "netem", "delay", "1ms"))
            netem = True
        except CommandError:
            netem = False
    finally:
        executor.run(("ip", "netns", "del", scratch_netns))
    return Capabilities(netem=netem, delay_line=Path("/dev/net/tun").exists())


def choose_mechanisms(specs: Iterable[LinkSpec], caps: Capabilities, allow_drop: bool,
                      uses_caps: bool = False) -> dict[str, str]:
    """Which mechanism delivers each property: netem where the kernel has it, else
    htb for rate and the userspace delay line for delay/jitter/loss. A property
    nothing here can emulate is refused, unless `allow_drop` (then it is recorded as
    dropped and not emulated)."""
    specs = list(specs)
    wanted = {
        "rate": any(s.rate_mbit is not None for s in specs) or uses_caps,
        "delay": any(s.delay_ms > 0 for s in specs),
        "jitter": any(s.jitter_ms > 0 for s in specs),
        "loss": any(s.loss_pct > 0 for s in specs),
    }
    chosen = {"rate": "htb" if wanted["rate"] else "none"}
    if caps.netem:
        impairment = "netem"
    elif caps.delay_line:
        impairment = "delayline"
    else:
        impairment = None
    for prop in ("delay", "jitter", "loss"):
        if not wanted[prop]:
            chosen[prop] = "none"
        elif impairment is not None:
            chosen[prop] = impairment
        elif allow_drop:
            chosen[prop] = "dropped (allow_drop: not emulated)"
        else:
            raise ShapingError(
                f"the scenario asks for {prop} but this host has no netem qdisc and no TUN "
                f"device for the delay line; to run without emulating {prop}, pass "
                f"allow_drop=True (NetnsLauncher, plan_hosts), or --allow-drop to "
                f"`python -m bench.launch probe|up` or `python -m bench.launch.export.multihost`")
    return chosen


def mechanisms_for(scenario: NetworkScenario, n_hosts: int, caps: Capabilities,
                   allow_drop: bool) -> dict[str, str]:
    """`choose_mechanisms` for every directed link between n_hosts hosts of the
    scenario, as it is and in every phase of its schedule (a host's uplink or downlink
    cap needs htb too)."""
    pairs = [(a, b) for a in range(n_hosts) for b in range(n_hosts) if a != b]
    uses_caps = any(scenario.caps(h).uplink_mbit or scenario.caps(h).downlink_mbit
                    for h in range(n_hosts))
    specs = [scenario.link_spec(a, b) for a, b in pairs]
    phases = [s.in_phase(p) for s in specs if s.schedule is not None for p in s.schedule.phases]
    return choose_mechanisms([*specs, *phases], caps, allow_drop, uses_caps)
