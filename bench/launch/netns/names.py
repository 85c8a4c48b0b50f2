"""Names, addresses and MTU of one netns run: every namespace and device it creates is
derived from a short per-run prefix P (such as "aq3f9c1", bench.launch.hosts.new_prefix),
so that device names fit in Linux's 15 characters and teardown removes them by exact name.

    namespace P-sw:   bridge Pbr -- ports Ps0, Ps1, ...
    namespace P-hI:   veth PhI (198.18.0.I+1/24), peer PsI on the bridge
                      [TUN PtI (198.19.0.I+1/24) and ifb PiI on the delay-line path]
    namespace P-cap:  scratch namespace of the netem capability test
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MTU", "TUN_SUBNET", "VETH_SUBNET", "TopologyNames", "host_addr"]

VETH_SUBNET = "198.18.0"  # 198.18.0.0/15 is reserved for benchmarking (RFC 2544)
TUN_SUBNET = "198.19.0"
MTU = 1500  # of every veth and TUN (bytes)
MAX_DEVICE_NAME = 15  # IFNAMSIZ - 1


def host_addr(i: int, tun: bool) -> str:
    """Host i's address: on its TUN (delay-line path) or on its veth."""
    return f"{TUN_SUBNET if tun else VETH_SUBNET}.{i + 1}"


@dataclass(frozen=True)
class TopologyNames:
    """Every name one run creates, derived from its prefix."""

    prefix: str
    n_hosts: int

    def __post_init__(self) -> None:
        if len(self.tun(self.n_hosts - 1)) > MAX_DEVICE_NAME:
            raise ValueError(f"prefix {self.prefix!r} with {self.n_hosts} hosts gives device "
                             f"names longer than {MAX_DEVICE_NAME} characters")

    @property
    def switch_ns(self) -> str:
        return f"{self.prefix}-sw"

    @property
    def scratch_ns(self) -> str:
        return f"{self.prefix}-cap"

    @property
    def bridge(self) -> str:
        return f"{self.prefix}br"

    def host_ns(self, i: int) -> str:
        return f"{self.prefix}-h{i}"

    def host_veth(self, i: int) -> str:
        return f"{self.prefix}h{i}"

    def switch_veth(self, i: int) -> str:
        return f"{self.prefix}s{i}"

    def tun(self, i: int) -> str:
        return f"{self.prefix}t{i}"

    def ifb(self, i: int) -> str:
        return f"{self.prefix}i{i}"

    def namespaces(self) -> list[str]:
        return [self.scratch_ns, self.switch_ns] + [self.host_ns(i) for i in range(self.n_hosts)]

    def devices(self) -> list[tuple[str, str]]:
        """(namespace, device) pairs, in the order they are deleted."""
        devs = []
        for i in range(self.n_hosts):
            devs += [(self.host_ns(i), self.ifb(i)), (self.host_ns(i), self.tun(i)),
                     (self.host_ns(i), self.host_veth(i)), (self.switch_ns, self.switch_veth(i))]
        return devs + [(self.switch_ns, self.bridge)]
