"""Bring-up of the netns hosts (see bench/launch/netns/names.py for the layout): the
namespaces, the switch (a bridge in its own namespace) with one veth pair per
host, and, where the kernel lacks netem, the userspace delay line with a TUN
device per host (bench/net/delayline.py). Teardown is by recorded name
(bench/launch/netns/state.py).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from bench.launch.netns.names import MTU, TopologyNames, host_addr
from bench.launch.netns.state import StateFiles
from bench.launch.process import env_with_repo, python_argv, read_ready_line, spawn_group
from bench.net.delayline import DelayLineConfig
from bench.net.executor import Argv, Executor
from bench.net.scenario import NetworkScenario

__all__ = ["create_namespaces", "delay_line_config", "start_delay_line", "switch_argvs",
           "tun_argvs"]


def create_namespaces(ex: Executor, names: TopologyNames, created: list[str]) -> None:
    """Create the switch and host namespaces, appending each to `created` as soon as it
    exists (teardown removes only what this run created)."""
    for ns in names.namespaces()[1:]:  # not the scratch one: probe_capabilities owns it
        ex.run(("ip", "netns", "add", ns))  # fails if the name exists: never adopt one
        created.append(ns)
        ex.run(("ip", "-n", ns, "link", "set", "lo", "up"))
        for knob in ("tcp_wmem", "tcp_rmem"):
            ex.run(tcp_buffer_argv(ns, knob))


# Socket buffers may grow to 64 MiB inside the suite's namespaces. Linux's default
# maximum (4 MiB send, here) caps TCP at about 3 MB per round trip: 50 Mbit/s on a
# 476 ms wide-area link configured at 342 Mbit/s. A long link needs its bandwidth-delay
# product in flight (342 Mbit/s x 476 ms = 20 MB). Written through /proc/sys because the
# `sysctl` tool (procps) is not on every bare machine; each namespace has its own value.
TCP_BUFFER_MAX_BYTES = 64 << 20


def tcp_buffer_argv(ns: str, knob: str) -> Argv:
    """Raise net.ipv4.`knob` (tcp_wmem | tcp_rmem) to min 4096, default as Linux's,
    max TCP_BUFFER_MAX_BYTES inside namespace `ns`."""
    default = {"tcp_wmem": 16384, "tcp_rmem": 131072}[knob]
    value = f"4096 {default} {TCP_BUFFER_MAX_BYTES}"
    return ("ip", "netns", "exec", ns, "sh", "-c",
            f"echo '{value}' > /proc/sys/net/ipv4/{knob}")


def switch_argvs(names: TopologyNames) -> list[Argv]:
    """The bridge in the switch namespace and one veth pair per host: PhI (with its
    address) in host I's namespace, PsI a port of the bridge."""
    sw = names.switch_ns
    argvs: list[Argv] = [("ip", "-n", sw, "link", "add", "name", names.bridge, "type", "bridge"),
                         ("ip", "-n", sw, "link", "set", names.bridge, "up")]
    for i in range(names.n_hosts):
        h = names.host_ns(i)
        argvs += [("ip", "link", "add", "name", names.host_veth(i), "netns", h, "type", "veth",
                   "peer", "name", names.switch_veth(i), "netns", sw),
                  ("ip", "-n", sw, "link", "set", names.switch_veth(i), "master", names.bridge),
                  ("ip", "-n", sw, "link", "set", names.switch_veth(i), "up"),
                  ("ip", "-n", h, "addr", "add", f"{host_addr(i, tun=False)}/24", "dev",
                   names.host_veth(i)),
                  ("ip", "-n", h, "link", "set", names.host_veth(i), "up", "mtu", str(MTU))]
    return argvs


def tun_argvs(names: TopologyNames) -> list[Argv]:
    """Address and raise the TUN devices the delay line has created."""
    argvs: list[Argv] = []
    for i in range(names.n_hosts):
        h = names.host_ns(i)
        argvs += [("ip", "-n", h, "addr", "add", f"{host_addr(i, tun=True)}/24", "dev",
                   names.tun(i)),
                  ("ip", "-n", h, "link", "set", names.tun(i), "up", "mtu", str(MTU),
                   "txqueuelen", "1000")]
    return argvs


def delay_line_config(scenario: NetworkScenario, names: TopologyNames,
                      mechanisms: dict[str, str], control: Path | None = None
                      ) -> DelayLineConfig:
    """The delay line's matrices: each property the delay line delivers (per
    `mechanisms`) from the scenario's links, zeros for the others; `control`: the socket
    it listens on for changes (a scenario whose links have schedules)."""
    n, spec = names.n_hosts, scenario.link_spec

    def matrix(attr: str) -> tuple:
        return tuple(tuple(0.0 if a == b else float(getattr(spec(a, b), attr))
                           for b in range(n)) for a in range(n))

    zeros = tuple((0.0,) * n for _ in range(n))
    kept = {attr: matrix(attr) if mechanisms[prop] == "delayline" else zeros
            for prop, attr in (("delay", "delay_ms"), ("jitter", "jitter_ms"),
                               ("loss", "loss_pct"))}
    return DelayLineConfig(netns=tuple(names.host_ns(i) for i in range(n)),
                           tun=tuple(names.tun(i) for i in range(n)),
                           addrs=tuple(host_addr(i, tun=True) for i in range(n)),
                           control=None if control is None else str(control), **kept)


def start_delay_line(cfg: DelayLineConfig, names: TopologyNames, files: StateFiles,
                     python: str) -> tuple[subprocess.Popen, str]:
    """Start the delay line in the switch namespace (it creates the TUN devices) and
    wait until it is ready. Returns the process and its scheduling ("fifo:10" when it
    got a real-time priority, else "normal")."""
    cfg.save(files.delay_line_config)
    proc = spawn_group(["ip", "netns", "exec", names.switch_ns,
                        *python_argv(python, "-m", "bench.net.delayline", "--config",
                                     str(files.delay_line_config))],
                       env_with_repo(), files.delay_line_log, pipe_stdout=True)
    line = read_ready_line(proc, "ready", "delay line", files.delay_line_log)
    return proc, line.removeprefix("ready ")
