"""One host shaping plan, as data: the tc rates, leaves and queues of every host of a
scenario, computed once, before any launcher names a device; each launcher renders it
on its own interfaces (`Interface`), so the numbers live here and only the names differ.

    plan = shaping_plan(scenario, 4, factor=payload_factor(), netem=True)
    plan.hosts[1].link_to(2)                 # host 1's class towards host 2: rate, leaf
    eth0 = Interface("eth0", addrs=("10.0.0.1", "10.0.0.2", ...), ifb="ifb-aqsgd")
    plan.setup_argvs(1, eth0)                # the tc/ip commands shaping host 1 there
    plan.rate_limit_argvs(1, 2, True, ifs)   # (host, command) pairs lifting path 1 -> 2
    plan.removal_argvs(1, eth0)              # and those removing the shaping again

Rates are tc rates in bit/s (the payload Mbit/s times `factor`). No command runs here.
The layout on a host's device, the units and how one class is re-rendered (the probe's
lifted limits, a schedule's phases): docs/shaping.md, "The host shaping plan".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from bench.net.executor import Argv
from bench.net.scenario import LinkSpec, NetworkScenario
from bench.net.tc import (
    ETHERNET_HEADER_BYTES,
    UNLIMITED_BIT,
    blackhole_argv,
    burst_bytes,
    fifo_argv,
    htb_class_argv,
    htb_root_argv,
    ifb_redirect_argvs,
    leaf_del_argv,
    link_del_argv,
    netem_argv,
    qdisc_del_argv,
    tbf_argv,
    u32_dst_filter_argv,
)

__all__ = ["FRAME_BYTES", "UPLINK_CLASSID", "DownlinkCap", "EgressLink", "FifoLeaf",
           "HostShaping", "Interface", "LinkClass", "NetemLeaf", "ShapingPlan",
           "egress_argvs", "egress_path_argvs", "link_class", "link_classid", "shaping_plan"]

UPLINK_CLASSID = "1:1"  # the htb class every destination's class hangs under
# A full Ethernet frame at the suite's 1500-byte MTU: a queue given in packets is that many
# of these in bytes (a downlink tbf), and a queue given in bytes that many packets (netem).
FRAME_BYTES = 1500 + ETHERNET_HEADER_BYTES


def link_classid(k: int) -> str:
    """The htb class of a host's k-th destination (k counts the host's links)."""
    return f"1:{10 + k}"


@dataclass(frozen=True)
class NetemLeaf:
    """A link's delay, jitter and loss in a netem qdisc (its queue in packets)."""

    delay_ms: float
    jitter_ms: float
    loss_pct: float
    limit_packets: int


@dataclass(frozen=True)
class FifoLeaf:
    """A link's queue alone: pfifo in packets or bfifo in bytes (exactly one given)."""

    queue_packets: int | None
    queue_bytes: int | None


@dataclass(frozen=True)
class LinkClass:
    """The htb class of one destination on a host's egress: `rate_bit` (tc bit/s; the
    uplink's rate when the link has none), its leaf, and `k`, its position among the
    host's classes (classid 1:10+k, leaf handle 10+k:)."""

    dst: int
    k: int
    rate_bit: int
    leaf: NetemLeaf | FifoLeaf

    @property
    def classid(self) -> str:
        return link_classid(self.k)

    @property
    def handle(self) -> str:
        return f"{10 + self.k}:"


@dataclass(frozen=True)
class DownlinkCap:
    """The tbf capping everything one host receives: `rate_bit` (tc bit/s), queue
    `limit_bytes`."""

    rate_bit: int
    limit_bytes: int


@dataclass(frozen=True)
class HostShaping:
    """One host's shaping. `htb`: its egress gets an htb tree (it has a rate, a cap or a
    netem leaf to hold); `uplink_bit`: class 1:1's rate (its uplink cap, UNLIMITED_BIT
    without one); `classes`: one per destination, in host order; `downlink`: its cap."""

    htb: bool
    uplink_bit: int
    classes: tuple[LinkClass, ...]
    downlink: DownlinkCap | None

    def link_to(self, dst: int) -> LinkClass:
        for c in self.classes:
            if c.dst == dst:
                return c
        raise IndexError(f"dst: expected one of this host's destinations "
                         f"{[c.dst for c in self.classes]}, got {dst}")


@dataclass(frozen=True)
class Interface:
    """Where one host's shaping goes. `dev`: the device its traffic leaves on, in
    namespace `netns` (None: the namespace the commands run in, such as a container's
    or a real host's); `addrs[j]`: host j's address as that device's packets name it (the
    filters match it); the downlink cap goes on `ifb`, fed from dev's ingress, or on
    `downlink_dev` in `downlink_netns`, a device whose egress is this host's ingress."""

    dev: str
    addrs: tuple[str, ...]
    netns: str | None = None
    ifb: str | None = None
    downlink_dev: str | None = None
    downlink_netns: str | None = None

    def __post_init__(self) -> None:
        if self.ifb is not None and self.downlink_dev is not None:
            raise ValueError(f"Interface: expected at most one of ifb and downlink_dev, got "
                             f"{self.ifb!r} and {self.downlink_dev!r}")

    def _downlink_site(self) -> tuple[str, str | None]:
        """(device, namespace) of the downlink tbf."""
        if self.ifb is not None:
            return self.ifb, self.netns
        if self.downlink_dev is None:
            raise ValueError(f"Interface {self.dev}: a downlink cap needs an ifb or a "
                             f"downlink_dev, got neither")
        return self.downlink_dev, self.downlink_netns


def link_class(dst: int, k: int, spec: LinkSpec, uplink_bit: int, factor: float,
               netem: bool) -> LinkClass:
    """The class of one link: its payload rate times `factor`, at most `uplink_bit`; its
    delay, jitter and loss in a netem leaf when `netem` and it has any, else its queue."""
    rate = uplink_bit if spec.rate_mbit is None else min(_bits(spec.rate_mbit, factor),
                                                         uplink_bit)
    phases = [] if spec.schedule is None else [spec.in_phase(p) for p in spec.schedule.phases]
    if netem and any(s.delay_ms > 0 or s.jitter_ms > 0 or s.loss_pct > 0
                     for s in (spec, *phases)):
        limit = spec.queue_packets or max(1, spec.queue_bytes // FRAME_BYTES)
        leaf: NetemLeaf | FifoLeaf = NetemLeaf(spec.delay_ms, spec.jitter_ms, spec.loss_pct,
                                               limit)
    else:
        leaf = FifoLeaf(spec.queue_packets, spec.queue_bytes)
    return LinkClass(dst, k, rate, leaf)


def _bits(mbit: float, factor: float) -> int:
    return math.ceil(mbit * 1e6 * factor)


def _host(links: Sequence[tuple[int, LinkSpec]], uplink_mbit: float | None, factor: float,
          netem: bool, downlink: DownlinkCap | None) -> HostShaping:
    """One host's shaping from its (destination, link) pairs, in that order."""
    top = UNLIMITED_BIT if uplink_mbit is None else _bits(uplink_mbit, factor)
    classes = tuple(link_class(dst, k, spec, top, factor, netem)
                    for k, (dst, spec) in enumerate(links))
    htb = (uplink_mbit is not None or any(spec.rate_mbit is not None for _, spec in links)
           or any(isinstance(c.leaf, NetemLeaf) for c in classes))
    return HostShaping(htb, top, classes, downlink)


def shaping_plan(scenario: NetworkScenario, n_hosts: int, *, factor: float,
                 netem: bool) -> ShapingPlan:
    """The shaping of hosts 0..n_hosts-1 of `scenario` (see module doc); `netem`: delay,
    jitter and loss go into netem leaves (else into another mechanism, or nowhere)."""
    link = scenario.link
    queue_bytes = link.queue_bytes or link.queue_packets * FRAME_BYTES
    hosts = []
    for i in range(n_hosts):
        caps = scenario.caps(i)
        down = None if caps.downlink_mbit is None else DownlinkCap(
            int(caps.downlink_mbit * 1e6 * factor), queue_bytes)
        links = [(j, scenario.link_spec(i, j)) for j in range(n_hosts) if j != i]
        hosts.append(_host(links, caps.uplink_mbit, factor, netem, down))
    return ShapingPlan(tuple(hosts), factor)


# -- rendering -----------------------------------------------------------------------
def _rate_class_argv(iface: Interface, parent: str, classid: str, rate_bit: int,
                     verb: str) -> Argv:
    # rate = ceil: a class never borrows beyond its link's rate
    return htb_class_argv(iface.dev, parent, classid, rate_bit, rate_bit,
                          burst_bytes(rate_bit), iface.netns, verb)


def _leaf_argv(c: LinkClass, iface: Interface, verb: str = "add") -> Argv:
    if isinstance(c.leaf, NetemLeaf):
        return netem_argv(iface.dev, c.classid, c.handle, c.leaf.delay_ms, c.leaf.jitter_ms,
                          c.leaf.loss_pct, c.leaf.limit_packets, iface.netns, verb)
    return fifo_argv(iface.dev, c.classid, c.handle, c.leaf.queue_packets,
                     c.leaf.queue_bytes, iface.netns)


def _egress_argvs(h: HostShaping, iface: Interface) -> list[Argv]:
    if not h.htb:
        return []
    argvs = [htb_root_argv(iface.dev, iface.netns),
             _rate_class_argv(iface, "1:", UPLINK_CLASSID, h.uplink_bit, "add")]
    for c in h.classes:
        argvs += [_rate_class_argv(iface, UPLINK_CLASSID, c.classid, c.rate_bit, "add"),
                  _leaf_argv(c, iface),
                  u32_dst_filter_argv(iface.dev, "1:", iface.addrs[c.dst], c.classid,
                                      netns=iface.netns)]
    return argvs


def _egress_path_argvs(h: HostShaping, c: LinkClass, iface: Interface,
                       rate_bit: int | None) -> list[Argv]:
    if not h.htb:
        return []
    top, rate = (h.uplink_bit, c.rate_bit) if rate_bit is None else (rate_bit, rate_bit)
    return [_rate_class_argv(iface, "1:", UPLINK_CLASSID, top, "change"),
            _rate_class_argv(iface, UPLINK_CLASSID, c.classid, rate, "change")]


def _tbf_argv(cap: DownlinkCap, iface: Interface, verb: str, rate_bit: int | None) -> Argv:
    dev, netns = iface._downlink_site()
    rate = cap.rate_bit if rate_bit is None else rate_bit
    return tbf_argv(dev, rate, burst_bytes(rate), cap.limit_bytes, netns=netns, verb=verb)


@dataclass(frozen=True)
class ShapingPlan:
    """Every host's shaping; `factor` multiplied the payload rates into its tc rates."""

    hosts: tuple[HostShaping, ...]
    factor: float

    def setup_argvs(self, i: int, iface: Interface) -> list[Argv]:
        """The commands shaping host i on `iface`, in the order they run."""
        h = self.hosts[i]
        argvs = _egress_argvs(h, iface)
        if h.downlink is not None:
            if iface.ifb is not None:
                argvs += ifb_redirect_argvs(iface.dev, iface.ifb, iface.netns)
            argvs.append(_tbf_argv(h.downlink, iface, "add", None))
        return argvs

    def path_argvs(self, src: int, dst: int, interfaces: Sequence[Interface],
                   rate_bit: int | None = None) -> list[tuple[int, Argv]]:
        """(host, command) pairs setting every rate limit on the path src -> dst (the
        htb classes of src's egress it passes, and dst's downlink tbf) to `rate_bit`,
        or with None back to the planned rates, by `tc ... change`; `interfaces[i]`:
        host i's."""
        if src == dst:
            raise ValueError(f"path_argvs: src and dst must differ, got {src} -> {dst}")
        h = self.hosts[src]
        out = [(src, a) for a in _egress_path_argvs(h, h.link_to(dst), interfaces[src],
                                                    rate_bit)]
        down = self.hosts[dst].downlink
        if down is not None:
            out.append((dst, _tbf_argv(down, interfaces[dst], "change", rate_bit)))
        return out

    def phase_argvs(self, src: int, dst: int, spec: LinkSpec, *, down: bool, was_down: bool,
                    interfaces: Sequence[Interface]) -> list[tuple[int, Argv]]:
        """(host, command) pairs turning the link src -> dst into `spec` (the link in a
        phase of its schedule, `LinkSpec.in_phase`): its class's rate by `tc class
        change` and a netem leaf's values by `tc qdisc change`; `down`: its leaf replaced
        by a blackhole (nothing passes); `was_down`: the blackhole it had replaced by
        the link's leaf again. The downlink caps stay (a host's caps have no schedule)."""
        if src == dst:
            raise ValueError(f"phase_argvs: src and dst must differ, got {src} -> {dst}")
        h, iface = self.hosts[src], interfaces[src]
        planned = h.link_to(dst)
        if not h.htb:
            raise ValueError(f"phase_argvs: host {src} has no htb tree to change (a link "
                             f"with a schedule has a rate), link {src} -> {dst}")
        c = link_class(dst, planned.k, replace(spec, schedule=None), h.uplink_bit,
                       self.factor, netem=isinstance(planned.leaf, NetemLeaf))
        argvs: list[Argv] = []
        if down and not was_down:
            argvs += [leaf_del_argv(iface.dev, c.classid, c.handle, iface.netns),
                      blackhole_argv(iface.dev, c.classid, c.handle, iface.netns)]
        if not down:
            argvs.append(_rate_class_argv(iface, UPLINK_CLASSID, c.classid, c.rate_bit,
                                          "change"))
            if was_down:
                argvs += [leaf_del_argv(iface.dev, c.classid, c.handle, iface.netns),
                          _leaf_argv(c, iface)]
            elif isinstance(c.leaf, NetemLeaf):
                argvs.append(_leaf_argv(c, iface, "change"))
        return [(src, a) for a in argvs]

    def rate_limit_argvs(self, src: int, dst: int, lifted: bool,
                         interfaces: Sequence[Interface]) -> list[tuple[int, Argv]]:
        """`path_argvs` lifting every limit on src -> dst (UNLIMITED_BIT) or, not
        `lifted`, putting the planned ones back: the probe's host-ceiling measurement."""
        return self.path_argvs(src, dst, interfaces, UNLIMITED_BIT if lifted else None)

    def removal_argvs(self, i: int, iface: Interface) -> list[Argv]:
        """The commands removing what `setup_argvs(i, iface)` created (a host whose
        devices outlive the run, such as a real machine's interface)."""
        h = self.hosts[i]
        argvs = [qdisc_del_argv(iface.dev, "root", iface.netns)] if h.htb else []
        if h.downlink is not None:
            if iface.ifb is not None:
                argvs += [qdisc_del_argv(iface.dev, "ingress", iface.netns),
                          link_del_argv(iface.ifb, iface.netns)]
            else:
                argvs.append(qdisc_del_argv(iface.downlink_dev, "root", iface.downlink_netns))
        return argvs


# -- one device from a list of links ------------------------------------------------
@dataclass(frozen=True)
class EgressLink:
    """One directed link as seen from the sender's device: its peer's address, its spec."""

    dst_ip: str
    spec: LinkSpec


def _one_device(dev: str, links: list[EgressLink], uplink_mbit: float | None, factor: float,
                netem: bool, netns: str | None) -> tuple[HostShaping, Interface]:
    h = _host([(k, lk.spec) for k, lk in enumerate(links)], uplink_mbit, factor, netem, None)
    return h, Interface(dev, tuple(lk.dst_ip for lk in links), netns)


def egress_argvs(dev: str, links: list[EgressLink], uplink_mbit: float | None,
                 factor: float, netem: bool, netns: str | None = None) -> list[Argv]:
    """The htb tree on `dev` giving each of `links` its rate (and, with `netem`, its delay,
    jitter and loss), `uplink_mbit` capping their sum: one host's egress of the plan,
    for a device given its links directly. Rates are payload rates times `factor`."""
    h, iface = _one_device(dev, links, uplink_mbit, factor, netem, netns)
    return _egress_argvs(h, iface)


def egress_path_argvs(dev: str, links: list[EgressLink], uplink_mbit: float | None,
                      factor: float, netem: bool, k: int, rate_bit: int | None = None,
                      netns: str | None = None) -> list[Argv]:
    """`tc class change` commands for the htb classes a packet to links[k] passes on
    `dev` (the uplink class, then the link's), from the same arguments as `egress_argvs`:
    at `rate_bit` (bit/s; UNLIMITED_BIT lifts the limits), or with rate_bit None at the
    rates egress_argvs configured. [] when it built no tree."""
    if not 0 <= k < len(links):
        raise IndexError(f"k: expected a link index in [0, {len(links)}), got {k}")
    h, iface = _one_device(dev, links, uplink_mbit, factor, netem, netns)
    return _egress_path_argvs(h, h.classes[k], iface, rate_bit)
