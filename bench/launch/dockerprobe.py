"""The Docker launcher's link probe: bench.net.probe's server in the destination
container, its client in the source's (`docker exec`), one link after the other.

As on the netns launcher (bench/launch/probing.py), a link that falls short of its
rate is measured again with every rate limit on its path lifted (the `tc ... change`
commands of DockerRunSpec.rate_limit_argvs, run in the containers that hold them),
which gives the host's ceiling for that path; the limits are put back afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import TYPE_CHECKING

from bench.launch.process import TEARDOWN_GRACE_S, read_ready_line, spawn_group, stop_group
from bench.net.probe import ProbeRecord, bulk_bytes_for, rate_verdict

if TYPE_CHECKING:
    from bench.launch.docker import DockerLauncher

__all__ = ["PROBE_PORT", "probe_containers"]

PROBE_PORT = 5201
MEASURE_TIMEOUT_S = 120.0


def probe_containers(hosts: DockerLauncher, links: list[tuple[int, int]], tolerance: float,
                     duration_s: float) -> list[ProbeRecord]:
    """One ProbeRecord per directed link, each measured with a bulk transfer of about
    duration_s at its rate (and again, limits lifted, when it falls short)."""
    sc, spec = hosts.scenario, hosts.spec
    records = []
    for src, dst in links:
        want = sc.payload_rate_mbit(src, dst)
        # configured literally, tc carries the payload rate times 1448/1514
        expect = None if want is None else want * (
            1.0 if spec.payload_correction else 1.0 / spec.factor)
        bulk = bulk_bytes_for(want, duration_s)
        m = _measure(hosts, src, dst, bulk)
        ceiling = None
        if rate_verdict(expect, m["rate_mbit"], None, tolerance) == "short":
            ceiling = _measure_ceiling(hosts, src, dst, bulk)
        verdict = rate_verdict(expect, m["rate_mbit"], ceiling, tolerance)
        rtt = sc.link_spec(src, dst).delay_ms + sc.link_spec(dst, src).delay_ms
        if hosts.mechanisms.get("delay", "none").startswith("dropped"):
            rtt = 0.0
        records.append(ProbeRecord.from_measurement(
            src, dst, m, rate_mbit_configured=expect, rtt_ms_configured=rtt,
            rate_mbit_ceiling=ceiling, host_limited=verdict == "host_limited"))
    return records


def _measure(hosts: DockerLauncher, src: int, dst: int, bulk_bytes: int) -> dict:
    """One bench.net.probe client/server exchange from container src to container dst."""
    server = spawn_group(hosts.exec_argv(dst, [
        "python3", "-m", "bench.net.probe", "serve", "--addr", hosts.addr(dst), "--port",
        str(PROBE_PORT)], tied=True), dict(os.environ), pipe_stdout=True, stdin_pipe=True)
    try:
        read_ready_line(server, "listening", f"probe server in container {dst}")
        out = subprocess.run(hosts.exec_argv(src, [
            "python3", "-m", "bench.net.probe", "measure", "--addr", hosts.addr(dst),
            "--port", str(PROBE_PORT), "--bytes", str(bulk_bytes)]),
            capture_output=True, text=True, timeout=MEASURE_TIMEOUT_S)
        if out.returncode != 0:
            raise RuntimeError(f"link probe {src} -> {dst} failed:\n{out.stderr}")
        server.wait(timeout=10)
        return json.loads(out.stdout)
    finally:
        stop_group(server, TEARDOWN_GRACE_S)


def _measure_ceiling(hosts: DockerLauncher, src: int, dst: int, bulk_bytes: int) -> float:
    """Payload rate src -> dst with every rate limit on the path lifted; restored after."""
    def apply(lifted: bool) -> None:
        for i, argv in hosts.spec.rate_limit_argvs(src, dst, lifted):
            hosts.run_as_root(i, argv)

    apply(True)
    try:
        return _measure(hosts, src, dst, bulk_bytes)["rate_mbit"]
    finally:
        apply(False)
