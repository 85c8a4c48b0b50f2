"""The Docker launcher's link probe: bench.net.probe's server in the destination
container, its client in the source's (`docker exec`), one link after the other.

As on the netns launcher (bench/launch/probing.py), a link that falls short of its
rate is measured again with every rate limit on its path lifted (the `tc ... change`
commands of DockerRunSpec.rate_limit_argvs, run in the containers that hold them),
which gives the host's ceiling for that path; the limits are put back afterwards.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from bench.launch.probing import PROBE_PORT, exchange, probe_each
from bench.launch.process import spawn_group
from bench.net.probe import ProbePlan, ProbeRecord

if TYPE_CHECKING:
    from bench.launch.docker import DockerLauncher

__all__ = ["probe_containers"]

def probe_containers(hosts: DockerLauncher, links: list[tuple[int, int]], tolerance: float,
                     duration_s: float) -> list[ProbeRecord]:
    """The containers' links through bench.launch.probing.probe_each, which plans each
    link's probe (bench.net.probe.plan_probe)."""

    def lift_limits(src: int, dst: int, lifted: bool) -> None:
        for i, argv in hosts.spec.rate_limit_argvs(src, dst, lifted):
            hosts.run_as_root(i, argv)

    spec = hosts.spec
    return probe_each(
        hosts.scenario, links, measure=lambda s, d, n: _measure(hosts, s, d, n),
        lift_limits=lift_limits,
        payload_ratio=1.0 if spec.payload_correction else 1.0 / spec.factor,
        delay_dropped=hosts.mechanisms.get("delay", "none").startswith("dropped"),
        tolerance=tolerance, duration_s=duration_s)


def _measure(hosts: DockerLauncher, src: int, dst: int, plan: ProbePlan) -> dict:
    """One bench.net.probe client/server exchange from container src to container dst."""
    server = spawn_group(hosts.exec_argv(dst, [
        "python3", "-m", "bench.net.probe", "serve", "--addr", hosts.addr(dst), "--port",
        str(PROBE_PORT)], tied=True), dict(os.environ), pipe_stdout=True, stdin_pipe=True)
    client = hosts.exec_argv(src, [
        "python3", "-m", "bench.net.probe", "measure", "--addr", hosts.addr(dst),
        "--port", str(PROBE_PORT), *plan.client_args()])
    return exchange(server, client, plan, dict(os.environ), src, dst, f"container {dst}")
