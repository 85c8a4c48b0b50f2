"""Network-namespace launcher: one namespace per emulated host, shaped links,
removal by exact recorded names.

    with NetnsLauncher(load_scenario("100mbps"), n_hosts=2) as hosts:
        hosts.probe()                                   # achieved link table
        p = hosts.spawn(0, [sys.executable, "-m", "aqsgd.train.worker", ...], env, log)

Topology (P = per-run prefix such as "aq3f9c1", so device names fit in 15 chars):

    namespace P-sw:  bridge Pbr  -- ports Ps0, Ps1, ...
    namespace P-hI:  veth PhI (198.18.0.I+1/24), peer PsI on the bridge
                     [TUN PtI (198.19.0.I+1/24) when the delay line is in use]

Shaping (see bench/tc.py): an htb tree on the egress of the device that carries
host I's traffic gives each destination its rate (and its delay, jitter, loss
where netem exists). A host's downlink cap is a tbf on the switch port towards
it (veth path) or, on the TUN path, a tbf on an ifb fed from the TUN's ingress.
Without netem, delay, jitter and loss come from the userspace delay line
(bench/delayline.py): the workers then talk over the TUN devices.

Every name is written to a state file before it is created; teardown deletes
exactly those names, in a `finally`, on success, worker crash, Ctrl-C or
SIGTERM. `python -m bench.launch cleanup` does the same for a run that was killed.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench.net.delayline import DelayLineConfig
from bench.net.executor import CommandError, Executor
from bench.net.probe import bulk_bytes_for, check_links, format_table, rate_verdict
from bench.net.scenario import NetworkScenario
from bench.net.tc import (
    ETHERNET_HEADER_BYTES,
    UNLIMITED_BIT,
    EgressLink,
    burst_bytes,
    choose_mechanisms,
    egress_argvs,
    ifb_redirect_argvs,
    payload_factor,
    probe_capabilities,
    tbf_argv,
)

__all__ = ["DEFAULT_STATE_DIR", "NetnsLauncher", "TopologyNames", "require_netns",
           "teardown_recorded"]

DEFAULT_STATE_DIR = Path("/run/aqsgd-bench/netns")  # tmpfs: cleared at reboot, as netns are
REPO_ROOT = Path(__file__).resolve().parents[2]
VETH_SUBNET = "198.18.0"  # 198.18.0.0/15 is reserved for benchmarking (RFC 2544)
TUN_SUBNET = "198.19.0"
MTU = 1500
PROBE_PORT = 5201
READY_TIMEOUT_S = 20.0
KILL_GRACE_S = 2.0


def require_netns() -> None:
    """Raise PermissionError unless this process may create network namespaces."""
    if os.geteuid() != 0:
        raise PermissionError("the netns launcher needs root (CAP_NET_ADMIN); use "
                              "LocalLauncher (bench/local.py) for an unshaped run")


@dataclass(frozen=True)
class TopologyNames:
    """Every name one run creates, derived from its prefix."""

    prefix: str
    n_hosts: int

    def __post_init__(self) -> None:
        if len(self.tun(self.n_hosts - 1)) > 15:
            raise ValueError(f"prefix {self.prefix!r} with {self.n_hosts} hosts gives device "
                             f"names longer than 15 characters")

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


def _existing_namespaces(ex: Executor) -> set[str]:
    out = ex.run(("ip", "netns", "list")).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def _existing_devices(ex: Executor, netns: str) -> set[str]:
    out = ex.run(("ip", "-n", netns, "-o", "link", "show")).stdout
    # lines look like "3: aq1h0@if2: <BROADCAST,...": the name ends at '@' or ':'
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line}


def teardown_recorded(state: dict, ex: Executor | None = None) -> list[str]:
    """Remove what a state file records, by exact name: kill the processes inside the
    recorded namespaces, delete the recorded devices, delete the namespaces. Names
    not present are skipped. Returns what was removed."""
    ex = ex or Executor()
    removed = []
    present = _existing_namespaces(ex)
    namespaces = [ns for ns in state["namespaces"] if ns in present]
    for ns in namespaces:
        for pid in ex.run(("ip", "netns", "pids", ns)).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
                removed.append(f"process {pid} in {ns}")
            except ProcessLookupError:
                pass
    devices = {ns: _existing_devices(ex, ns) for ns in namespaces}
    for ns, dev in state["devices"]:
        if ns in namespaces and dev in devices[ns]:
            try:
                ex.run(("ip", "-n", ns, "link", "del", dev))
                removed.append(f"device {dev} in {ns}")
            except CommandError:
                # a veth's peer or a TUN whose process just died vanishes on its own
                if dev in _existing_devices(ex, ns):
                    raise
    for ns in reversed(namespaces):
        ex.run(("ip", "netns", "del", ns))
        removed.append(f"namespace {ns}")
    return removed


def _kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    for sig, wait_s in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _new_prefix(run_id: str) -> str:
    """'aq' + 5 hex digits: short enough for 15-character device names."""
    digest = hashlib.sha1(f"{run_id}-{os.getpid()}-{time.time_ns()}".encode())
    return "aq" + digest.hexdigest()[:5]


def _as_change(argv: tuple[str, ...], rate_bit: int | None = None) -> tuple[str, ...]:
    """A `tc ... add` argv as `tc ... change`; with `rate_bit`, its rate (and htb ceil,
    burst) replaced so that the class or qdisc no longer limits the path."""
    out = list(argv)
    out[out.index("add")] = "change"
    if rate_bit is not None:
        for key, value in (("rate", f"{rate_bit}bit"), ("ceil", f"{rate_bit}bit"),
                           ("burst", str(burst_bytes(rate_bit))),
                           ("cburst", str(burst_bytes(rate_bit)))):
            if key in out:
                out[out.index(key) + 1] = value
    return tuple(out)


def _raise_system_exit(signum, frame):
    raise SystemExit(128 + signum)


class NetnsLauncher:
    """Context manager building `n_hosts` emulated hosts for one run (see module doc).

    `allow_drop`: run even if the host cannot emulate a property (it is then recorded as
    dropped). `payload_correction`: raise tc rates by the frame overhead so that the TCP
    payload rate equals the scenario's rate_mbit."""

    def __init__(self, scenario: NetworkScenario, n_hosts: int | None = None, *,
                 run_id: str | None = None, state_dir: Path | str | None = None,
                 allow_drop: bool = False, payload_correction: bool = True,
                 executor: Executor | None = None, python: str = sys.executable):
        self.scenario = scenario
        self.n_hosts = scenario.n_hosts if n_hosts is None else n_hosts
        if not 1 <= self.n_hosts <= 200:
            raise ValueError(f"n_hosts: expected 1..200, got {self.n_hosts}")
        self.run_id = run_id or f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        self.names = TopologyNames(_new_prefix(self.run_id), self.n_hosts)
        self.state_dir = Path(state_dir) if state_dir else DEFAULT_STATE_DIR
        self.state_path = self.state_dir / f"{self.names.prefix}.json"
        self.allow_drop = allow_drop
        self.payload_correction = payload_correction
        self.executor = executor or Executor()
        self.python = python
        self.mechanisms: dict[str, str] = {}
        self.capabilities = None
        self.use_delay_line = False
        self._procs: list[subprocess.Popen] = []
        self._delay_line: subprocess.Popen | None = None
        self._delay_line_log = self.state_dir / f"{self.names.prefix}-delayline.log"
        self._created_namespaces: list[str] = []
        self._probe_results: list[dict] = []
        self._timing = {}
        self._prev_sigterm = None

    # -- names and addresses -------------------------------------------------------
    def addr(self, i: int) -> str:
        self._check_host(i)
        return f"{TUN_SUBNET if self.use_delay_line else VETH_SUBNET}.{i + 1}"

    def device(self, i: int) -> str:
        """The interface carrying host i's traffic (inside its namespace)."""
        self._check_host(i)
        return self.names.tun(i) if self.use_delay_line else self.names.host_veth(i)

    def netns(self, i: int) -> str:
        self._check_host(i)
        return self.names.host_ns(i)

    def worker_env(self, i: int) -> dict[str, str]:
        dev = self.device(i)
        # NCCL would bypass the shaped link through P2P/shared memory: force sockets
        return {"GLOO_SOCKET_IFNAME": dev, "NCCL_SOCKET_IFNAME": dev, "TP_SOCKET_IFNAME": dev,
                "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1",
                "NCCL_HOSTID": f"{self.names.prefix}-host{i}"}

    def _check_host(self, i: int) -> None:
        if not 0 <= i < self.n_hosts:
            raise IndexError(f"host index {i} out of range [0, {self.n_hosts})")

    # -- state file ----------------------------------------------------------------
    def _state(self) -> dict:
        return {"run_id": self.run_id, "prefix": self.names.prefix, "launcher_pid": os.getpid(),
                "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "namespaces": self.names.namespaces(),
                "devices": [list(d) for d in self.names.devices()],
                "spawned_pids": [p.pid for p in self._procs]}

    def _write_state(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._state(), indent=1))
        tmp.replace(self.state_path)

    # -- lifecycle -----------------------------------------------------------------
    def __enter__(self) -> NetnsLauncher:
        require_netns()
        while set(self.names.namespaces()) & _existing_namespaces(self.executor):
            self.names = TopologyNames(_new_prefix(self.run_id), self.n_hosts)  # name clash
        self.state_path = self.state_dir / f"{self.names.prefix}.json"
        self._delay_line_log = self.state_dir / f"{self.names.prefix}-delayline.log"
        if threading.current_thread() is threading.main_thread():
            self._prev_sigterm = signal.signal(signal.SIGTERM, _raise_system_exit)
        t0 = time.perf_counter()
        try:
            self._write_state()  # before anything exists: a kill at any point is cleanable
            self._build()
        except BaseException:
            self._teardown()
            raise
        self._timing["up_s"] = time.perf_counter() - t0
        return self

    def __exit__(self, *exc) -> None:
        self._teardown()

    def _build(self) -> None:
        ex, nm, n = self.executor, self.names, self.n_hosts
        self._created_namespaces.append(nm.scratch_ns)  # probe_capabilities removes it
        self.capabilities = probe_capabilities(ex, nm.scratch_ns)
        self._created_namespaces.remove(nm.scratch_ns)
        pairs = [(a, b) for a in range(n) for b in range(n) if a != b]
        uses_caps = any(self.scenario.caps(h).uplink_mbit or self.scenario.caps(h).downlink_mbit
                        for h in range(n))
        self.mechanisms = choose_mechanisms([self.scenario.link_spec(a, b) for a, b in pairs],
                                            self.capabilities, self.allow_drop, uses_caps)
        self.use_delay_line = "delayline" in self.mechanisms.values()

        for ns in nm.namespaces()[1:]:
            ex.run(("ip", "netns", "add", ns))  # fails if the name exists: never adopt one
            self._created_namespaces.append(ns)
            ex.run(("ip", "-n", ns, "link", "set", "lo", "up"))
        sw = nm.switch_ns
        ex.run(("ip", "-n", sw, "link", "add", "name", nm.bridge, "type", "bridge"))
        ex.run(("ip", "-n", sw, "link", "set", nm.bridge, "up"))
        for i in range(n):
            h = nm.host_ns(i)
            ex.run(("ip", "link", "add", "name", nm.host_veth(i), "netns", h, "type", "veth",
                    "peer", "name", nm.switch_veth(i), "netns", sw))
            ex.run(("ip", "-n", sw, "link", "set", nm.switch_veth(i), "master", nm.bridge))
            ex.run(("ip", "-n", sw, "link", "set", nm.switch_veth(i), "up"))
            ex.run(("ip", "-n", h, "addr", "add", f"{VETH_SUBNET}.{i + 1}/24", "dev",
                    nm.host_veth(i)))
            ex.run(("ip", "-n", h, "link", "set", nm.host_veth(i), "up", "mtu", str(MTU)))
        if self.use_delay_line:
            self._start_delay_line()
        self._shape()

    def _start_delay_line(self) -> None:
        nm, n = self.names, self.n_hosts
        spec = self.scenario.link_spec

        def matrix(attr: str) -> tuple:
            return tuple(tuple(0.0 if a == b else float(getattr(spec(a, b), attr))
                               for b in range(n)) for a in range(n))

        keep = {p: self.mechanisms[p] == "delayline" for p in ("delay", "jitter", "loss")}
        zeros = tuple((0.0,) * n for _ in range(n))
        cfg = DelayLineConfig(
            netns=tuple(nm.host_ns(i) for i in range(n)), tun=tuple(nm.tun(i) for i in range(n)),
            addrs=tuple(f"{TUN_SUBNET}.{i + 1}" for i in range(n)),
            delay_ms=matrix("delay_ms") if keep["delay"] else zeros,
            jitter_ms=matrix("jitter_ms") if keep["jitter"] else zeros,
            loss_pct=matrix("loss_pct") if keep["loss"] else zeros)
        cfg_path = self.state_dir / f"{nm.prefix}-delayline.json"
        cfg.save(cfg_path)
        with open(self._delay_line_log, "wb") as log:
            self._delay_line = subprocess.Popen(
                ["ip", "netns", "exec", nm.switch_ns, self.python, "-m", "bench.net.delayline",
                 "--config", str(cfg_path)],
                stdout=subprocess.PIPE, stderr=log, env=self._python_env(),
                start_new_session=True)
        line = self._wait_line(self._delay_line, "ready", "delay line", self._delay_line_log)
        self.delay_line_scheduling = line.removeprefix("ready ")
        for i in range(n):
            h = nm.host_ns(i)
            self.executor.run(("ip", "-n", h, "addr", "add", f"{TUN_SUBNET}.{i + 1}/24", "dev",
                               nm.tun(i)))
            self.executor.run(("ip", "-n", h, "link", "set", nm.tun(i), "up", "mtu", str(MTU),
                               "txqueuelen", "1000"))

    def _shape(self) -> None:
        nm, n = self.names, self.n_hosts
        l2 = 0 if self.use_delay_line else ETHERNET_HEADER_BYTES
        self.factor = payload_factor(MTU, l2) if self.payload_correction else 1.0
        for i in range(n):
            self.executor.run_all(self._egress_argvs(i))
            down = self._downlink_tbf_argv(i)
            if down is None:
                continue
            if self.use_delay_line:  # TUN ingress -> ifb egress, shaped there
                self.executor.run_all(ifb_redirect_argvs(nm.tun(i), nm.ifb(i), nm.host_ns(i)))
            self.executor.run(down)

    def _egress_argvs(self, i: int) -> list[tuple[str, ...]]:
        """The htb tree on host i's device: one class per destination (bench/tc.py)."""
        sc = self.scenario
        links = [EgressLink(self.addr(j), sc.link_spec(i, j))
                 for j in range(self.n_hosts) if j != i]
        return egress_argvs(self.device(i), links, sc.caps(i).uplink_mbit, self.factor,
                            "netem" in self.mechanisms.values(), self.names.host_ns(i))

    def _downlink_tbf_argv(self, i: int) -> tuple[str, ...] | None:
        """The tbf capping host i's downlink: on the ifb fed from its TUN (delay-line
        path) or on the switch port towards it, whose egress is host i's ingress."""
        sc, nm = self.scenario, self.names
        down = sc.caps(i).downlink_mbit
        if down is None:
            return None
        rate = int(down * 1e6 * self.factor)
        q = sc.link.queue_bytes or sc.link.queue_packets * (MTU + ETHERNET_HEADER_BYTES)
        dev, ns = ((nm.ifb(i), nm.host_ns(i)) if self.use_delay_line
                   else (nm.switch_veth(i), nm.switch_ns))
        return tbf_argv(dev, rate, burst_bytes(rate), q, netns=ns)

    def _teardown(self) -> None:
        t0 = time.perf_counter()
        # no Ctrl-C or SIGTERM in the middle of removing things; they land afterwards
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            for proc in [*self._procs, *([self._delay_line] if self._delay_line else [])]:
                _kill_group(proc)
            # only what this launcher created: a name it failed to create may be another's
            state = dict(self._state(), namespaces=self._created_namespaces)
            teardown_recorded(state, self.executor)
            self.state_path.unlink(missing_ok=True)
            (self.state_dir / f"{self.names.prefix}-delayline.json").unlink(missing_ok=True)
            self._delay_line_log.unlink(missing_ok=True)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            if self._prev_sigterm is not None:
                signal.signal(signal.SIGTERM, self._prev_sigterm)
                self._prev_sigterm = None
        self._timing["down_s"] = time.perf_counter() - t0

    # -- processes -----------------------------------------------------------------
    def _python_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT),
                                                          env.get("PYTHONPATH")]))
        return env

    @staticmethod
    def _wait_line(proc: subprocess.Popen, expected: str, what: str,
                   log: Path | None = None) -> str:
        """Wait for the first stdout line of `proc`; it must start with `expected`."""
        ready, _, _ = select.select([proc.stdout], [], [], READY_TIMEOUT_S)
        line = proc.stdout.readline().decode().strip() if ready else ""
        if not line.startswith(expected):
            proc.kill()
            proc.wait()
            err = log.read_text() if log else proc.stderr.read().decode()
            raise RuntimeError(f"{what} did not start (expected {expected!r} within "
                               f"{READY_TIMEOUT_S} s, got {line!r}); stderr:\n{err}")
        return line

    def check_delay_line(self) -> None:
        """Raise if the delay line, which carries every packet, has died."""
        if self._delay_line is not None and self._delay_line.poll() is not None:
            raise RuntimeError(f"the delay line exited with {self._delay_line.returncode}; "
                               f"its log ({self._delay_line_log}):\n"
                               f"{self._delay_line_log.read_text()}")

    def spawn(self, i: int, argv: list[str], env: dict[str, str] | None = None,
              log_path: Path | str | None = None) -> subprocess.Popen:
        """Run argv inside host i's namespace, in its own process group (so teardown can
        kill it and its children). Environment: `env` (default: this process's) with
        worker_env(i) on top; stdout and stderr go to log_path (appended)."""
        full_env = dict(os.environ if env is None else env)
        full_env.update(self.worker_env(i))
        if log_path is not None:
            with open(log_path, "ab") as log:
                proc = subprocess.Popen(["ip", "netns", "exec", self.netns(i), *argv],
                                        env=full_env, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        else:
            proc = subprocess.Popen(["ip", "netns", "exec", self.netns(i), *argv],
                                    env=full_env, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        self._procs.append(proc)
        self._write_state()
        return proc

    # -- link probe and record -----------------------------------------------------
    def default_probe_links(self) -> list[tuple[int, int]]:
        if self.scenario.layout.n_hosts == self.n_hosts:
            return self.scenario.layout.pipeline_links()
        return [p for i in range(self.n_hosts - 1) for p in ((i, i + 1), (i + 1, i))]

    def probe(self, links: list[tuple[int, int]] | None = None, check: bool = True,
              tolerance: float = 0.10, duration_s: float = 1.0) -> list[dict]:
        """Measure each directed link (default: those the pipeline layout uses) one
        after the other; raise LinkProbeError if one is off by more than `tolerance`.

        A link that falls short is measured again with its rate limits lifted (the
        host's ceiling for that path, `rate_mbit_ceiling`); if that ceiling is below
        the configured rate too, the link is recorded as `host_limited` and does not
        stop the run (bench.net.probe.rate_verdict)."""
        self.check_delay_line()
        links = links or self.default_probe_links()
        sc = self.scenario
        results = []
        for src, dst in links:
            want = sc.payload_rate_mbit(src, dst)
            expect = None if want is None else want * (1.0 if self.payload_correction
                                                       else 1.0 / payload_factor(MTU))
            m = self._measure(src, dst, bulk_bytes_for(want, duration_s))
            ceiling = None
            if rate_verdict(expect, m["rate_mbit"], None, tolerance) == "short":
                ceiling = self._measure_ceiling(src, dst, bulk_bytes_for(want, duration_s))
            verdict = rate_verdict(expect, m["rate_mbit"], ceiling, tolerance)
            rtt = sc.link_spec(src, dst).delay_ms + sc.link_spec(dst, src).delay_ms
            if self.mechanisms.get("delay", "none").startswith("dropped"):
                rtt = 0.0
            results.append({"src": src, "dst": dst, "rate_mbit_configured": expect,
                            "rate_mbit_achieved": m["rate_mbit"],
                            "rate_mbit_first_to_last": m["rate_mbit_first_to_last"],
                            "rate_mbit_ceiling": ceiling,
                            "host_limited": verdict == "host_limited",
                            "rtt_ms": m["rtt_ms"], "rtt_ms_min": m["rtt_ms_min"],
                            "rtt_ms_configured": rtt, "probe_bytes": m["bytes"]})
        self._probe_results = results
        if check:
            check_links(results, tolerance)
        return results

    def _measure(self, src: int, dst: int, bulk_bytes: int) -> dict:
        """One bench.net.probe client/server exchange from host src to host dst."""
        server = self.spawn_quiet(dst, ["-m", "bench.net.probe", "serve", "--addr",
                                        self.addr(dst), "--port", str(PROBE_PORT)])
        try:
            self._wait_line(server, "listening", f"probe server on host {dst}")
            out = subprocess.run(
                ["ip", "netns", "exec", self.netns(src), self.python, "-m", "bench.net.probe",
                 "measure", "--addr", self.addr(dst), "--port", str(PROBE_PORT),
                 "--bytes", str(bulk_bytes)],
                capture_output=True, text=True, env=self._python_env(), timeout=120)
            if out.returncode != 0:
                raise RuntimeError(f"link probe {src} -> {dst} failed:\n{out.stderr}")
            server.wait(timeout=10)
            return json.loads(out.stdout)
        finally:
            _kill_group(server)

    def _measure_ceiling(self, src: int, dst: int, bulk_bytes: int) -> float:
        """Payload rate src -> dst with every rate limit on the path lifted (the
        host's ceiling for that path); the limits are restored afterwards."""
        self.executor.run_all(self.rate_limit_argvs(src, dst, lifted=True))
        try:
            return self._measure(src, dst, bulk_bytes)["rate_mbit"]
        finally:
            self.executor.run_all(self.rate_limit_argvs(src, dst, lifted=False))

    def rate_limit_argvs(self, src: int, dst: int, lifted: bool) -> list[tuple[str, ...]]:
        """`tc ... change` commands setting every rate limit on the path src -> dst (the
        htb classes of src's egress towards dst, and dst's downlink tbf) to 100 Gbit/s
        (`lifted`) or back to what `_shape` configured."""
        k = dst if dst < src else dst - 1  # dst's position among src's egress links
        classes = {"1:1", f"1:{10 + k}"}
        argvs = [a for a in self._egress_argvs(src)
                 if "class" in a and a[a.index("classid") + 1] in classes]
        down = self._downlink_tbf_argv(dst)
        if down is not None:
            argvs.append(down)
        return [_as_change(a, UNLIMITED_BIT if lifted else None) for a in argvs]

    def spawn_quiet(self, i: int, python_args: list[str]) -> subprocess.Popen:
        """A helper Python process in host i's namespace with stdout on a pipe."""
        return subprocess.Popen(["ip", "netns", "exec", self.netns(i), self.python,
                                 *python_args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=self._python_env(), start_new_session=True)

    def probe_table(self) -> str:
        return format_table(self._probe_results)

    def record(self) -> dict:
        """What meta.json needs: launcher, which mechanism delivered each property,
        names, link settings, probe results, bring-up and tear-down times."""
        delay_mech = {"netem": "netem qdisc (kernel)",
                      "delayline": "userspace TUN delay line (bench/delayline.py)"}
        return {
            "launcher": "netns",
            "shaped": True,
            "run_id": self.run_id,
            "prefix": self.names.prefix,
            "n_hosts": self.n_hosts,
            "scenario": self.scenario.to_dict(),
            "capabilities": self.capabilities.to_dict() if self.capabilities else None,
            "shaping": {p: delay_mech.get(m, m) if p != "rate" else
                        ("htb qdisc (kernel)" if m == "htb" else m)
                        for p, m in self.mechanisms.items()},
            "allow_drop": self.allow_drop,
            "data_plane": "TUN via delay line" if self.use_delay_line else "veth + bridge",
            "delay_line_scheduling": getattr(self, "delay_line_scheduling", None),
            "delay_line_alive": None if self._delay_line is None
            else self._delay_line.poll() is None,
            "payload_correction_factor": getattr(self, "factor", None),
            "hosts": [{"host": i, "netns": self.names.host_ns(i), "device": self.device(i),
                       "addr": self.addr(i)} for i in range(self.n_hosts)],
            "namespaces": self.names.namespaces(),
            "links": [{"src": a, "dst": b, **self.scenario.link_spec(a, b).to_dict(),
                       "payload_rate_mbit": self.scenario.payload_rate_mbit(a, b)}
                      for a in range(self.n_hosts) for b in range(self.n_hosts) if a != b],
            "probe": self._probe_results,
            "timing": dict(self._timing),
            "commands": [" ".join(c) for c in self.executor.history],
        }
