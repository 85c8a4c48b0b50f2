"""The netns launcher's rendering of the host shaping plan (bench.net.shaping) on its
devices: host I's egress on its veth PhI, or on its TUN PtI on the delay-line path, in
its namespace P-hI; its downlink cap on the switch port PsI towards it (that port's
egress is host I's ingress) or, on the TUN path, on the ifb PiI fed from the TUN's
ingress (names: bench/launch/netns/names.py).

    shaping = plan_shaping(scenario, names, tun=False, netem=True, payload_correction=True)
    executor.run_all(shaping.setup_argvs())                        # every host, in order
    executor.run_all(shaping.rate_limit_argvs(0, 1, lifted=True))  # the probe's ceiling

Every command names its namespace (`tc -n`, `ip -n`): they all run from the host.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.launch.netns.names import MTU, TopologyNames, host_addr
from bench.net.executor import Argv
from bench.net.scenario import NetworkScenario
from bench.net.shaping import Interface, ShapingPlan, shaping_plan
from bench.net.tc import ETHERNET_HEADER_BYTES, payload_factor

__all__ = ["NetnsShaping", "host_interface", "plan_shaping"]


@dataclass(frozen=True)
class NetnsShaping:
    """The plan and each host's interface (`interfaces[i]`: host i's)."""

    plan: ShapingPlan
    interfaces: tuple[Interface, ...]

    @property
    def factor(self) -> float:
        """tc rate per payload rate (bench.net.tc.payload_factor, or 1.0)."""
        return self.plan.factor

    def setup_argvs(self) -> list[Argv]:
        """The commands that shape every host, in the order they run."""
        return [a for i, iface in enumerate(self.interfaces)
                for a in self.plan.setup_argvs(i, iface)]

    def rate_limit_argvs(self, src: int, dst: int, lifted: bool) -> list[Argv]:
        """`tc ... change` commands setting every rate limit on the path src -> dst (the
        htb classes of src's egress towards dst, and dst's downlink tbf) to UNLIMITED_BIT
        (`lifted`) or back to what `setup_argvs` configured."""
        return [a for _, a in self.plan.rate_limit_argvs(src, dst, lifted, self.interfaces)]


def host_interface(names: TopologyNames, i: int, tun: bool) -> Interface:
    """Where host i's shaping goes (see module doc)."""
    addrs = tuple(host_addr(j, tun) for j in range(names.n_hosts))
    if tun:
        return Interface(names.tun(i), addrs, names.host_ns(i), ifb=names.ifb(i))
    return Interface(names.host_veth(i), addrs, names.host_ns(i),
                     downlink_dev=names.switch_veth(i), downlink_netns=names.switch_ns)


def plan_shaping(scenario: NetworkScenario, names: TopologyNames, *, tun: bool, netem: bool,
                 payload_correction: bool) -> NetnsShaping:
    """The shaping of every host of `names` for `scenario`; `tun`: the workers talk over
    the delay line's TUN devices (no Ethernet header), else over the veths; `netem`:
    delay, jitter and loss in netem leaves; `payload_correction`: tc rates raised by the
    framing so that TCP payload rates equal the scenario's."""
    l2 = 0 if tun else ETHERNET_HEADER_BYTES
    factor = payload_factor(MTU, l2) if payload_correction else 1.0
    return NetnsShaping(shaping_plan(scenario, names.n_hosts, factor=factor, netem=netem),
                        tuple(host_interface(names, i, tun) for i in range(names.n_hosts)))
