"""What the launcher tests share (tests/bench/launch/): whether a process still runs or
has exited, what a netns run left on the host, the commands the fixtures that build
namespace hosts of their own (sshd, Slurm) run and remove them with, and a Docker run
spec with its scenarios."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from bench.launch.docker.spec import DockerRunSpec
from bench.launch.schedules import ScheduledLinks
from bench.net.executor import CommandError
from bench.net.scenario import load_scenario, parse_scenario
from bench.net.shaping import Interface, shaping_plan


def alive(pid: int) -> bool:
    """Running (not gone, not a zombie that nobody has reaped yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def exited(proc: subprocess.Popen, timeout_s: float = 5.0) -> bool:
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return False
    return True


def leftovers(prefix: str) -> list[str]:
    """Every line naming the run's prefix in namespaces, root links and root qdiscs."""
    out = []
    for argv in (["ip", "netns", "list"], ["ip", "-o", "link", "show"],
                 ["tc", "qdisc", "show"]):
        text = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        out += [f"{argv[0]} {argv[-1]}: {line}" for line in text.splitlines() if prefix in line]
    return out


def sh(argv: list[str], check: bool = True, **kw) -> subprocess.CompletedProcess:
    """A fixture's command: output captured as text, a minute at most."""
    return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=60, **kw)


def extra_qdiscs(ns: str, dev: str) -> list[str]:
    """The qdiscs on dev in namespace ns that are not the kernel's default."""
    out = sh(["ip", "netns", "exec", ns, "tc", "qdisc", "show", "dev", dev]).stdout
    return [ln for ln in out.splitlines() if ln.strip() and " noqueue " not in ln]


def remove_namespaces(names: list[str]) -> None:
    """Kill every process left in the named namespaces, then delete them; a name that
    does not exist is passed over."""
    mine = [ns for ns in names if ns in sh(["ip", "netns", "list"]).stdout.split()]
    for ns in mine:
        for pid in sh(["ip", "netns", "pids", ns], check=False).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
    for ns in mine:
        sh(["ip", "netns", "del", ns], check=False)


def docker_spec(scenario="100mbps", n=2, **kw) -> DockerRunSpec:
    return DockerRunSpec(load_scenario(scenario), n, "aqd1a2b3", 300, **kw)


def delay_scenario(delay_ms=10.0, **link):
    return parse_scenario({"description": "delay", "layout": {"stages": 2},
                           "link": {"rate_mbit": 100, "delay_ms": delay_ms, **link}}, "delay")


class FakeLauncher(ScheduledLinks):
    """A launcher giving only its plan and executor (no delay line)."""

    name = "fake"

    def __init__(self, scenario, fail_on: str | None = None):
        self.scenario, self.n_hosts = scenario, 2
        self.mechanisms = {"rate": "htb", "delay": "none", "jitter": "none", "loss": "none"}
        self.ran: list[tuple[int, tuple]] = []
        self.fail_on = fail_on

    def _schedule_plan(self):
        ifaces = tuple(Interface(f"eth{i}", ("10.0.0.1", "10.0.0.2")) for i in range(2))
        return shaping_plan(self.scenario, 2, factor=1.0, netem=False), ifaces

    def _run_on_host(self, i, argv):
        if self.fail_on and self.fail_on in argv:
            raise CommandError(argv, 2, "RTNETLINK answers: No such device")
        self.ran.append((i, argv))
