"""What a Docker run creates, as data: names, addresses, GPUs, environment, the tc
commands of each container (the host shaping plan, bench.net.shaping, rendered on its
eth0 or TUN). No Docker call here; the launcher and the compose file are built from it.

    spec = DockerRunSpec.new(scenario, n_hosts=2, run_id="ab12cd", gpu_count=0)
    spec.container(0), spec.network, spec.addr(1)       # aqd3f9c1-h0, aqd3f9c1-net, 198.18.0.3
    spec.shaping_argvs(0)                               # tc commands run inside container 0

Every name carries the run prefix P ("aqd" + 5 hex digits, bench.launch.hosts.new_prefix):
containers P-hI (and P-cap, the netem test), network P-net, volume P-cache. The network
is a /24 of 198.18.0.0/15 chosen from the prefix (gateway .1, host I .I+2). With the
delay line (`delay_line=True`) the workers talk over each container's TUN aqtun0, in the
other half of the /15 with the same third octet (`addr(i)`), its datagrams carried on
eth0 (`network_addr(i)`). The table of names and the delay line: docs/docker.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.launch.hosts import MAX_HOSTS, check_host, new_prefix
from bench.net.delayline import TUNNEL_OVERHEAD_BYTES, TunnelConfig
from bench.net.executor import Argv
from bench.net.scenario import NetworkScenario
from bench.net.shaping import Interface, ShapingPlan, shaping_plan
from bench.net.tc import ETHERNET_HEADER_BYTES, payload_factor

__all__ = ["CONTAINER_DEV", "DELAY_LINE_LOG_FILE", "DELAY_LINE_PID_FILE",
           "DELAY_LINE_PORT", "DELAY_LINE_READY_FILE",
           "DOCKER_IMAGE", "DockerRunSpec", "GpuShortage", "TUN_DEV", "TUN_DEVICE",
           "gpu_for_rank"]

# The image the launcher, the compose file and the tests use: `make docker-image` builds it.
DOCKER_IMAGE = "aqsgd-bench-worker:latest"
CONTAINER_DEV = "eth0"  # the run network's interface inside every container
CONTAINER_IFB = "ifb0"  # inside the container's own namespace, so no per-run name needed
CONTAINER_MTU = 1500
TUN_DEVICE = "/dev/net/tun"  # the host's TUN clone device, given to delay-line containers
TUN_DEV = "aqtun0"  # the delay line's TUN inside every container (its own namespace)
# With the delay line, every packet crosses two Python processes: jumbo frames on the
# run's network (and TUNs just below them, so a tunnelled packet fits one frame) cut
# the packets per second they handle six-fold.
TUNNEL_NETWORK_MTU = 9000
TUN_MTU = TUNNEL_NETWORK_MTU - TUNNEL_OVERHEAD_BYTES
DELAY_LINE_PORT = 47000  # UDP, on eth0 of every container of the run
# The delay line's ready file ("ready SCHEDULING"), the pid the image's entrypoint
# started it with and its log (docker/entrypoint.py writes the same paths)
DELAY_LINE_READY_FILE = "/run/aqsgd/delayline.ready"
DELAY_LINE_PID_FILE = "/run/aqsgd/delayline.pid"
DELAY_LINE_LOG_FILE = "/run/aqsgd/delayline.log"
SHAPED_FILE = "/run/aqsgd/shaped"  # the image's entrypoint waits for it (docker/entrypoint.py)
WORKER_USER = "worker"  # the image's non-root user (docker/Dockerfile)


class GpuShortage(ValueError):
    """Fewer GPUs than ranks that need one (NCCL refuses two ranks on one GPU)."""


def gpu_for_rank(rank: int, n_ranks: int, gpu_count: int, use_gpus: bool) -> int | None:
    """The GPU index rank `rank` gets: GPU i for rank i (one stage or replica per GPU;
    NCCL refuses two ranks on one GPU), None when the run uses no GPU. Raises
    GpuShortage when there are fewer GPUs than ranks."""
    if not 0 <= rank < n_ranks:
        raise IndexError(f"rank {rank} out of range [0, {n_ranks})")
    if not use_gpus:
        return None
    if gpu_count < n_ranks:
        raise GpuShortage(f"the run needs one GPU per rank: {n_ranks} ranks, but this host "
                          f"has {gpu_count} GPU(s); run fewer stages or replicas, or pass "
                          f"gpus=False for a CPU run")
    return rank


@dataclass(frozen=True)
class DockerRunSpec:
    """Every name, address, GPU and command of one Docker run (see module doc).

    `subnet_index`: which /24 of 198.18.0.0/15 the run's network takes (0..511).
    `use_gpus`: place rank i on GPU i (device requests); `gpu_count`: GPUs on the host.
    `payload_correction`: tc rates are raised by the frame overhead so that TCP
    payload rates equal the scenario's (as on the netns launcher). `netem`: delay,
    jitter and loss go into netem leaves on eth0; `delay_line`: they come from each
    container's delay line, the workers talking over its TUN (see module doc)."""

    scenario: NetworkScenario
    n_hosts: int
    prefix: str
    subnet_index: int
    use_gpus: bool = False
    gpu_count: int = 0
    netem: bool = False
    delay_line: bool = False
    payload_correction: bool = True
    image: str = DOCKER_IMAGE

    def __post_init__(self) -> None:
        if not 1 <= self.n_hosts <= MAX_HOSTS:
            raise ValueError(f"n_hosts: expected 1..{MAX_HOSTS}, got {self.n_hosts}")
        if not 0 <= self.subnet_index < 512:
            raise ValueError(f"subnet_index: expected 0..511 (a /24 of 198.18.0.0/15), "
                             f"got {self.subnet_index}")
        if self.netem and self.delay_line:
            raise ValueError("netem and delay_line: expected at most one delay mechanism, "
                             "got both")
        for rank in range(self.n_hosts):  # a GPU shortage is refused before anything exists
            gpu_for_rank(rank, self.n_hosts, self.gpu_count, self.use_gpus)

    @classmethod
    def new(cls, scenario: NetworkScenario, n_hosts: int, run_id: str, **kw) -> DockerRunSpec:
        prefix = new_prefix(run_id, "aqd")
        return cls(scenario, n_hosts, prefix, int(prefix[3:], 16) % 512, **kw)

    # -- names -----------------------------------------------------------------------
    def container(self, i: int) -> str:
        self._check_host(i)
        return f"{self.prefix}-h{i}"

    def containers(self) -> list[str]:
        return [self.container(i) for i in range(self.n_hosts)]

    @property
    def network(self) -> str:
        return f"{self.prefix}-net"

    @property
    def scratch_container(self) -> str:
        """The throw-away container of the netem test (bench/launch/docker/checks.py)."""
        return f"{self.prefix}-cap"

    @property
    def volume(self) -> str:
        """The run's cache (tokenizers, checkpoints), shared by its containers only."""
        return f"{self.prefix}-cache"

    # -- addresses ---------------------------------------------------------------------
    @property
    def _net_base(self) -> str:
        return f"198.{18 + self.subnet_index // 256}.{self.subnet_index % 256}"

    @property
    def _tun_base(self) -> str:
        return f"198.{19 - self.subnet_index // 256}.{self.subnet_index % 256}"

    @property
    def subnet(self) -> str:
        return f"{self._net_base}.0/24"

    @property
    def gateway(self) -> str:
        return f"{self._net_base}.1"

    def network_addr(self, i: int) -> str:
        """Container i's address on the run's network (eth0)."""
        self._check_host(i)
        return f"{self._net_base}.{i + 2}"

    def tun_addr(self, i: int) -> str:
        """Container i's address on its delay line's TUN."""
        self._check_host(i)
        return f"{self._tun_base}.{i + 2}"

    def addr(self, i: int) -> str:
        """The address workers use for container i: on the TUN with the delay line."""
        return self.tun_addr(i) if self.delay_line else self.network_addr(i)

    @property
    def network_mtu(self) -> int:
        """The MTU of the run's network (eth0 of every container)."""
        return TUNNEL_NETWORK_MTU if self.delay_line else CONTAINER_MTU

    @property
    def device(self) -> str:
        """The interface the workers' traffic leaves on, inside every container."""
        return TUN_DEV if self.delay_line else CONTAINER_DEV

    # -- environment and GPUs ----------------------------------------------------------
    def gpu(self, i: int) -> int | None:
        return gpu_for_rank(i, self.n_hosts, self.gpu_count, self.use_gpus)

    def worker_env(self, i: int) -> dict[str, str]:
        """Every worker in container i: sockets on the shaped interface only, and no
        NCCL path around it (P2P and shared memory off, a host id of its own)."""
        self._check_host(i)
        dev = self.device
        return {"GLOO_SOCKET_IFNAME": dev, "NCCL_SOCKET_IFNAME": dev,
                "TP_SOCKET_IFNAME": dev, "NCCL_P2P_DISABLE": "1",
                "NCCL_SHM_DISABLE": "1", "NCCL_HOSTID": f"{self.prefix}-host{i}"}

    # -- shaping -----------------------------------------------------------------------
    @property
    def factor(self) -> float:
        if not self.payload_correction:
            return 1.0
        # a TUN carries bare IP packets: no Ethernet header for tc to count
        return payload_factor(TUN_MTU, 0) if self.delay_line else \
            payload_factor(CONTAINER_MTU, ETHERNET_HEADER_BYTES)

    def shaping(self) -> ShapingPlan:
        """The host shaping plan of every container (bench.net.shaping): its rates in tc
        bit/s of this run's framing (`factor`), delay, jitter and loss in netem leaves
        when `netem`."""
        return shaping_plan(self.scenario, self.n_hosts, factor=self.factor, netem=self.netem)

    def interface(self, i: int) -> Interface:
        """Where container i's shaping goes: its eth0, or its TUN with the delay line,
        towards the other containers' addresses there; a downlink cap on an ifb fed from
        that device's ingress. Every command runs inside the container (no netns)."""
        self._check_host(i)
        return Interface(self.device, tuple(self.addr(j) for j in range(self.n_hosts)),
                         ifb=CONTAINER_IFB)

    def shaping_argvs(self, i: int) -> list[Argv]:
        """The commands shaping container i, in order: with the delay line, first the
        address and MTU of its TUN (which the delay line has created), then tc (and ip,
        for the ifb)."""
        argvs: list[Argv] = []
        if self.delay_line:
            argvs += [("ip", "addr", "add", f"{self.tun_addr(i)}/24", "dev", TUN_DEV),
                      ("ip", "link", "set", TUN_DEV, "up", "mtu", str(TUN_MTU),
                       "txqueuelen", "1000")]
        return argvs + self.shaping().setup_argvs(i, self.interface(i))

    def rate_limit_argvs(self, src: int, dst: int, lifted: bool) -> list[tuple[int, Argv]]:
        """(container, command) pairs lifting every rate limit on src -> dst, or putting
        them back (the probe's ceiling measurement; bench.net.shaping.ShapingPlan.
        rate_limit_argvs)."""
        interfaces = [self.interface(j) for j in range(self.n_hosts)]
        return self.shaping().rate_limit_argvs(src, dst, lifted, interfaces)

    def tunnel_config(self, i: int) -> TunnelConfig:
        """The delay line of container i: the loss of its outgoing links, the delay and
        jitter of its incoming ones (bench.net.delayline.TunnelConfig)."""
        self._check_host(i)
        n, link = self.n_hosts, self.scenario.link_spec

        def row(attr: str, outgoing: bool) -> tuple[float, ...]:
            return tuple(0.0 if j == i else
                         float(getattr(link(i, j) if outgoing else link(j, i), attr))
                         for j in range(n))

        return TunnelConfig(host=i, tun=TUN_DEV,
                            tun_addrs=tuple(self.tun_addr(j) for j in range(n)),
                            peer_addrs=tuple(self.network_addr(j) for j in range(n)),
                            port=DELAY_LINE_PORT, delay_in_ms=row("delay_ms", False),
                            jitter_in_ms=row("jitter_ms", False),
                            loss_out_pct=row("loss_pct", True), seed=i)

    def _check_host(self, i: int) -> None:
        check_host(i, self.n_hosts)
