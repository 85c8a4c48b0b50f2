"""Network-namespace launcher: one namespace per emulated host on a bridge, shaped links,
removal by exact recorded names.

    with NetnsLauncher(load_scenario("100mbps"), n_hosts=2) as hosts:
        print(format_table(hosts.probe()))             # achieved link table
        p = hosts.spawn(0, [sys.executable, "-m", "aqsgd.train.worker", ...], env, log)

Its transport (bench.launch.hosts): a command runs from this host naming its namespace
(`tc -n`), a process through `ip netns exec`. This folder holds the rest: names.py
(every name from the run prefix), state.py (the state file and teardown by name),
topology.py (namespaces, switch, veths; the userspace delay line and its TUNs, used
without netem), shaping.py (the host plan on the veths or TUNs), cgroups.py (a CPU
cgroup per straggler host). docs/architecture/launch.md, "Launchers", says how they fit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from bench.launch.hosts import ShapedHosts, new_prefix
from bench.launch.netns.cgroups import CpuCgroups, cgroup_name
from bench.launch.netns.names import MTU, TopologyNames, host_addr
from bench.launch.netns.shaping import NetnsShaping, plan_shaping
from bench.launch.netns.state import (
    StateFiles,
    existing_namespaces,
    teardown_recorded,
    write_state,
)
from bench.launch.netns.topology import (
    create_namespaces,
    delay_line_config,
    start_delay_line,
    switch_argvs,
    tun_argvs,
)
from bench.launch.process import TEARDOWN_GRACE_S, isolated, spawn_group, stop_all
from bench.launch.schedules import LinkChange
from bench.net.competing import sent_bytes
from bench.net.delayline import set_link
from bench.net.executor import Argv, Executor
from bench.net.scenario import NetworkScenario
from bench.net.shaping import Interface, ShapingPlan
from bench.net.straggler import PERIOD_US, cpu_quota_us
from bench.net.tc import (
    ETHERNET_HEADER_BYTES,
    Capabilities,
    mechanisms_for,
    payload_factor,
    probe_capabilities,
)

__all__ = ["NetnsLauncher", "require_netns"]


def require_netns() -> None:
    """Raise PermissionError unless this process may create network namespaces."""
    if os.geteuid() != 0:
        raise PermissionError("the netns launcher needs root (CAP_NET_ADMIN); use "
                              "LocalLauncher (bench/launch/local.py) for an unshaped run")


class NetnsLauncher(ShapedHosts):
    """Context manager building `n_hosts` emulated hosts for one run (see module doc).

    `state_dir`: where the state file goes (default DEFAULT_STATE_DIR). `allow_drop`:
    run even if the host cannot emulate a property (it is then recorded as dropped).
    `payload_correction`: raise tc rates by the frame overhead so that the TCP payload
    rate equals the scenario's rate_mbit. `executor`: runs the ip/tc commands (a
    RecordingExecutor records them instead). `python`: the interpreter of the helper
    processes (delay line, probe)."""

    name = "netns"
    shaped = True
    during_run = frozenset({"competing", "stragglers"})

    def __init__(self, scenario: NetworkScenario, n_hosts: int | None = None, *,
                 run_id: str | None = None, state_dir: Path | str | None = None,
                 allow_drop: bool = False, payload_correction: bool = True,
                 executor: Executor | None = None, python: str = sys.executable):
        super().__init__(scenario, n_hosts, run_id=run_id, state_dir=state_dir,
                         allow_drop=allow_drop, payload_correction=payload_correction)
        self.names = TopologyNames(new_prefix(self.run_id), self.n_hosts)
        self.prefix = self.names.prefix
        self.files = StateFiles(self.state_dir, self.names.prefix)
        self.executor = executor or Executor()
        self.python = python
        self.capabilities: Capabilities | None = None
        self.use_delay_line = False
        self.shaping: NetnsShaping | None = None
        self.delay_line: subprocess.Popen | None = None
        self.delay_line_scheduling: str | None = None
        self._created_namespaces: list[str] = []
        self.cgroups: CpuCgroups | None = None
        self._cgroups: dict[int, Path] = {}  # straggler host -> its cgroup, once created

    # -- names and addresses -------------------------------------------------------
    def addr(self, i: int) -> str:
        self._check_host(i)
        return host_addr(i, tun=self.use_delay_line)

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

    def _write_state(self) -> None:
        write_state(self.files, self.names, self.run_id, self._started,
                    list(self._cgroup_paths().values()))

    def _cgroup_paths(self) -> dict[int, Path]:
        """The cgroup this run may create per straggler host, by exact name."""
        if self.cgroups is None:
            return {}
        hosts = sorted({s.host for s in self.scenario.stragglers_within(self.n_hosts)})
        return {h: self.cgroups.path(cgroup_name(self.names.prefix, h)) for h in hosts}

    # -- lifecycle -----------------------------------------------------------------
    def _prepare(self) -> None:
        require_netns()
        while set(self.names.namespaces()) & existing_namespaces(self.executor):
            self.names = TopologyNames(new_prefix(self.run_id), self.n_hosts)  # name clash
        self.prefix = self.names.prefix
        self.files = StateFiles(self.state_dir, self.names.prefix)

    def _build(self) -> None:
        self._write_state()  # before anything exists: a kill at any point is cleanable
        ex, nm = self.executor, self.names
        self._created_namespaces.append(nm.scratch_ns)  # probe_capabilities removes it
        self.capabilities = probe_capabilities(ex, nm.scratch_ns)
        self._created_namespaces.remove(nm.scratch_ns)
        self.mechanisms = mechanisms_for(self.scenario, self.n_hosts, self.capabilities,
                                         self.allow_drop)
        self.use_delay_line = "delayline" in self.mechanisms.values()
        self.check_schedule()
        if self.scenario.stragglers_within(self.n_hosts):
            self.cgroups = CpuCgroups.find()
            self._write_state()  # the cgroups' names, before they exist
            for host, path in self._cgroup_paths().items():
                self._cgroups[host] = self.cgroups.create(path.name)
        create_namespaces(ex, nm, self._created_namespaces)
        ex.run_all(switch_argvs(nm))
        if self.use_delay_line:
            control = self.files.delay_line_control if self.scenario.scheduled_links(
                self.n_hosts) else None
            cfg = delay_line_config(self.scenario, nm, self.mechanisms, control)
            self.delay_line, self.delay_line_scheduling = start_delay_line(
                cfg, nm, self.files, self.python)
            self._started_process(self.delay_line)
            ex.run_all(tun_argvs(nm))
        self.shaping = plan_shaping(self.scenario, nm, tun=self.use_delay_line,
                                    netem="netem" in self.mechanisms.values(),
                                    payload_correction=self.payload_correction)
        ex.run_all(self.shaping.setup_argvs())

    def _remove(self) -> None:
        if self._schedule is not None:
            self._schedule.stop()  # the namespaces go: nothing to put back
        stop_all([*self._procs, self.delay_line], TEARDOWN_GRACE_S)
        # only what this launcher created: a name it failed to create may be another's
        teardown_recorded(self._created_namespaces, self.names.devices(), self.executor)
        for path in self._cgroups.values():  # empty now: every process was stopped
            CpuCgroups.remove(path)
        if self.files.flow_logs.is_dir():
            shutil.rmtree(self.files.flow_logs)
        for path in (self.files.state, self.files.delay_line_config,
                     self.files.delay_line_log, self.files.delay_line_control):
            path.unlink(missing_ok=True)

    # -- processes -----------------------------------------------------------------
    def check_delay_line(self) -> None:
        """Raise if the delay line, which carries every packet, has died."""
        if self.delay_line is not None and self.delay_line.poll() is not None:
            raise RuntimeError(f"the delay line exited with {self.delay_line.returncode}; "
                               f"its log ({self.files.delay_line_log}):\n"
                               f"{self.files.delay_line_log.read_text()}")

    def spawn(self, i: int, argv: list[str], env: dict[str, str] | None = None,
              log_path: Path | str | None = None) -> subprocess.Popen:
        """Run argv inside host i's namespace, in its own process group (so teardown can
        kill it and its children). Environment: `env` (default: this process's) with
        worker_env(i) on top; stdout and stderr go to log_path (appended). A straggler
        host's processes run in its CPU cgroup from their start."""
        command = ["ip", "netns", "exec", self.netns(i), *isolated(argv)]
        if i in self._cgroups:
            command = self.cgroups.enter_argv(self._cgroups[i], command)
        proc = spawn_group(command, self.worker_environ(i, env), log_path)
        self._procs.append(proc)
        self._note_log(log_path)
        self._started_process(proc)
        return proc

    # -- the transport (bench.launch.hosts) ------------------------------------------
    def _run_on_host(self, i: int, argv: Argv) -> subprocess.CompletedProcess:
        return self.executor.run(argv)  # every command names its namespace (tc -n)

    def helper_argv(self, i: int, argv: list[str]) -> list[str]:
        """argv in host i's namespace (a leading "python": `python`, the helpers'
        interpreter). Not stopped by teardown: removing the namespaces kills what runs
        inside."""
        argv = [self.python, *argv[1:]] if argv[:1] == ["python"] else argv
        return ["ip", "netns", "exec", self.netns(i), *isolated(argv)]

    # -- links that change (ScheduledLinks) -------------------------------------------
    def _schedule_plan(self) -> tuple[ShapingPlan, tuple[Interface, ...]]:
        return self.shaping.plan, self.shaping.interfaces

    def _set_delay_line(self, change: LinkChange) -> str:
        self.check_delay_line()
        s = change.spec
        set_link(self.files.delay_line_control, change.src, change.dst, s.delay_ms,
                 s.jitter_ms, s.loss_pct)
        return (f"delay line: link {change.src} -> {change.dst} delay_ms={s.delay_ms:g} "
                f"jitter_ms={s.jitter_ms:g} loss_pct={s.loss_pct:g}")

    def _class_bytes(self, src: int, dst: int) -> int:
        iface = self.shaping.interfaces[src]
        classid = self.shaping.plan.hosts[src].link_to(dst).classid
        out = self.executor.run(("tc", "-n", iface.netns, "-s", "class", "show", "dev",
                                 iface.dev, "classid", classid)).stdout
        return sent_bytes(out)

    def _framing(self) -> float:
        return payload_factor(MTU, 0 if self.use_delay_line else ETHERNET_HEADER_BYTES)

    def _flow_log_dir(self) -> Path:
        return self.files.flow_logs

    def _cpu_mechanism(self) -> str:
        return (f"cgroup v{self.cgroups.version} cpu quota ({self.cgroups.base}), period "
                f"{PERIOD_US} us, quota = period x cores / factor, cores = "
                f"{self._host_cores():g} (bench.net.straggler)")

    def _host_cores(self) -> float:
        """One emulated host's share of the CPUs this process may run on (they share
        one machine: bench.net.straggler, Note [straggler quota])."""
        return len(os.sched_getaffinity(0)) / self.n_hosts

    def _set_cpu(self, host: int, factor: float | None) -> str:
        path = self._cgroups[host]
        quota = None if factor is None else cpu_quota_us(factor, self._host_cores())
        done = self.cgroups.set_quota(path, quota, PERIOD_US)
        return f"{done}; cpu.stat {self.cgroups.stat(path)}"

    def _commands(self) -> list[str]:
        return [" ".join(c) for c in self.executor.history]

    def _record(self) -> dict:
        """Which mechanism delivered each property, the names, the delay line."""
        delay_mech = {"netem": "netem qdisc (kernel)",
                      "delayline": "userspace TUN delay line (bench/net/delayline.py)"}
        return {
            "capabilities": self.capabilities.to_dict() if self.capabilities else None,
            "shaping": {p: delay_mech.get(m, m) if p != "rate" else
                        ("htb qdisc (kernel)" if m == "htb" else m)
                        for p, m in self.mechanisms.items()},
            "data_plane": "TUN via delay line" if self.use_delay_line else "veth + bridge",
            "delay_line_scheduling": self.delay_line_scheduling,
            "delay_line_alive": None if self.delay_line is None
            else self.delay_line.poll() is None,
            "payload_correction_factor": None if self.shaping is None else self.shaping.factor,
            "hosts": [{"host": i, "netns": self.names.host_ns(i), "device": self.device(i),
                       "addr": self.addr(i)} for i in range(self.n_hosts)],
            "namespaces": self.names.namespaces(),
            "cgroups": [str(p) for p in self._cgroups.values()],
        }
