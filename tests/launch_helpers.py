"""What the launcher tests share (tests/bench/launch/): whether a process still runs or
has exited, what a netns run left on the host, and a Docker run spec with its scenarios."""

from __future__ import annotations

import subprocess
from pathlib import Path

from bench.launch.docker.spec import DockerRunSpec
from bench.net.scenario import load_scenario, parse_scenario


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


def docker_spec(scenario="100mbps", n=2, **kw) -> DockerRunSpec:
    return DockerRunSpec(load_scenario(scenario), n, "aqd1a2b3", 300, **kw)


def delay_scenario(delay_ms=10.0, **link):
    return parse_scenario({"description": "delay", "layout": {"stages": 2},
                           "link": {"rate_mbit": 100, "delay_ms": delay_ms, **link}}, "delay")
