"""The shaping plan of a netns run: which tc commands shape each host, as data.

Host I's egress: an htb tree on the device carrying its traffic (its veth, or
its TUN on the delay-line path), one class per destination (bench/net/tc.py).
Host I's downlink cap: a tbf on the switch port towards it (its egress is host
I's ingress) or, on the TUN path, on an ifb fed from the TUN's ingress.

The plan keeps the arguments the "add" commands are built from, so that the
probe can lift every rate limit on one path and put it back (`rate_limit_argvs`)
with "change" commands built from the same data.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.launch.names import MTU, TopologyNames, host_addr
from bench.net.executor import Argv
from bench.net.scenario import NetworkScenario
from bench.net.tc import (
    ETHERNET_HEADER_BYTES,
    UNLIMITED_BIT,
    EgressLink,
    burst_bytes,
    egress_argvs,
    egress_path_argvs,
    ifb_redirect_argvs,
    payload_factor,
    tbf_argv,
)

__all__ = ["DownlinkCap", "HostShaping", "ShapingPlan", "plan_shaping"]


@dataclass(frozen=True)
class DownlinkCap:
    """The tbf capping one host's downlink: on `dev` in `netns`, `rate_bit` (tc bit/s,
    payload correction included), queue `limit_bytes`."""

    dev: str
    netns: str
    rate_bit: int
    limit_bytes: int

    def argv(self, verb: str = "add", rate_bit: int | None = None) -> Argv:
        """The tbf command; with rate_bit, at that rate instead of the configured one."""
        rate = self.rate_bit if rate_bit is None else rate_bit
        return tbf_argv(self.dev, rate, burst_bytes(rate), self.limit_bytes,
                        netns=self.netns, verb=verb)


@dataclass(frozen=True)
class HostShaping:
    """What shapes one host: the htb tree on `dev` (in `netns`) towards `links` (one per
    other host, in host order), capped by `uplink_mbit`; its downlink cap, if any,
    with `ifb` the device fed from dev's ingress when the cap sits there."""

    dev: str
    netns: str
    links: tuple[EgressLink, ...]
    uplink_mbit: float | None
    downlink: DownlinkCap | None
    ifb: str | None


@dataclass(frozen=True)
class ShapingPlan:
    """Every host's shaping; `factor` multiplies payload rates into tc rates
    (bench.net.tc.payload_factor, or 1.0), `netem`: delay, jitter and loss go into
    netem leaves of the htb trees."""

    hosts: tuple[HostShaping, ...]
    factor: float
    netem: bool

    def setup_argvs(self) -> list[Argv]:
        """The commands that shape every host, in the order they run."""
        argvs: list[Argv] = []
        for h in self.hosts:
            argvs += egress_argvs(h.dev, list(h.links), h.uplink_mbit, self.factor, self.netem,
                                  h.netns)
            if h.downlink is None:
                continue
            if h.ifb is not None:
                argvs += ifb_redirect_argvs(h.dev, h.ifb, h.netns)
            argvs.append(h.downlink.argv())
        return argvs

    def rate_limit_argvs(self, src: int, dst: int, lifted: bool) -> list[Argv]:
        """`tc ... change` commands setting every rate limit on the path src -> dst (the
        htb classes of src's egress towards dst, and dst's downlink tbf) to UNLIMITED_BIT
        (`lifted`) or back to what `setup_argvs` configured."""
        if src == dst:
            raise ValueError(f"rate_limit_argvs: src and dst must differ, got {src} -> {dst}")
        h = self.hosts[src]
        k = dst if dst < src else dst - 1  # dst's position among src's egress links
        rate = UNLIMITED_BIT if lifted else None
        argvs = egress_path_argvs(h.dev, list(h.links), h.uplink_mbit, self.factor,
                                  self.netem, k, rate, h.netns)
        down = self.hosts[dst].downlink
        if down is not None:
            argvs.append(down.argv("change", rate))
        return argvs


def plan_shaping(scenario: NetworkScenario, names: TopologyNames, *, tun: bool, netem: bool,
                 payload_correction: bool) -> ShapingPlan:
    """The shaping of every host of `names` for `scenario`; `tun`: the workers talk over
    the delay line's TUN devices (no Ethernet header), else over the veths."""
    n = names.n_hosts
    l2 = 0 if tun else ETHERNET_HEADER_BYTES
    factor = payload_factor(MTU, l2) if payload_correction else 1.0
    frame_bytes = MTU + ETHERNET_HEADER_BYTES
    queue_bytes = scenario.link.queue_bytes or scenario.link.queue_packets * frame_bytes
    hosts = []
    for i in range(n):
        caps = scenario.caps(i)
        downlink = None
        if caps.downlink_mbit is not None:
            dev, ns = ((names.ifb(i), names.host_ns(i)) if tun
                       else (names.switch_veth(i), names.switch_ns))
            downlink = DownlinkCap(dev, ns, int(caps.downlink_mbit * 1e6 * factor),
                                   queue_bytes)
        hosts.append(HostShaping(
            dev=names.tun(i) if tun else names.host_veth(i), netns=names.host_ns(i),
            links=tuple(EgressLink(host_addr(j, tun), scenario.link_spec(i, j))
                        for j in range(n) if j != i),
            uplink_mbit=caps.uplink_mbit, downlink=downlink,
            ifb=names.ifb(i) if tun and downlink is not None else None))
    return ShapingPlan(tuple(hosts), factor, netem)
