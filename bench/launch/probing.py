"""The netns launcher's link probe: bench.net.probe's server in the destination
host's namespace, its client in the source's, one link after the other.

A link that falls short of its rate is measured again with every rate limit on
its path lifted (the shaping plan's `rate_limit_argvs`), which gives the host's
ceiling for that path; the limits are put back afterwards. bench.net.probe's
`rate_verdict` then tells a host-limited link from a wrongly shaped one.
"""

from __future__ import annotations

import json
import subprocess
from typing import TYPE_CHECKING

from bench.launch.names import MTU
from bench.launch.process import TEARDOWN_GRACE_S, env_with_repo, read_ready_line, stop_group
from bench.net.probe import ProbeRecord, bulk_bytes_for, rate_verdict
from bench.net.scenario import NetworkScenario
from bench.net.tc import payload_factor

if TYPE_CHECKING:
    from bench.launch.netns import NetnsLauncher

__all__ = ["PROBE_PORT", "default_probe_links", "probe_links"]

PROBE_PORT = 5201
MEASURE_TIMEOUT_S = 120.0


def default_probe_links(scenario: NetworkScenario, n_hosts: int) -> list[tuple[int, int]]:
    """The links the pipeline layout uses, or i <-> i+1 when n_hosts is not its size."""
    if scenario.layout.n_hosts == n_hosts:
        return scenario.layout.pipeline_links()
    return [p for i in range(n_hosts - 1) for p in ((i, i + 1), (i + 1, i))]


def probe_links(hosts: NetnsLauncher, links: list[tuple[int, int]], tolerance: float,
                duration_s: float) -> list[ProbeRecord]:
    """One ProbeRecord per directed link, each measured with a bulk transfer of about
    duration_s at its rate (and again, limits lifted, when it falls short)."""
    sc = hosts.scenario
    records = []
    for src, dst in links:
        want = sc.payload_rate_mbit(src, dst)
        # configured literally, tc carries the payload rate times 1448/1514
        expect = None if want is None else want * (1.0 if hosts.payload_correction
                                                   else 1.0 / payload_factor(MTU))
        bulk_bytes = bulk_bytes_for(want, duration_s)
        m = _measure(hosts, src, dst, bulk_bytes)
        ceiling = None
        if rate_verdict(expect, m["rate_mbit"], None, tolerance) == "short":
            ceiling = _measure_ceiling(hosts, src, dst, bulk_bytes)
        verdict = rate_verdict(expect, m["rate_mbit"], ceiling, tolerance)
        rtt = sc.link_spec(src, dst).delay_ms + sc.link_spec(dst, src).delay_ms
        if hosts.mechanisms.get("delay", "none").startswith("dropped"):
            rtt = 0.0
        records.append(ProbeRecord.from_measurement(
            src, dst, m, rate_mbit_configured=expect, rtt_ms_configured=rtt,
            rate_mbit_ceiling=ceiling, host_limited=verdict == "host_limited"))
    return records


def _measure(hosts: NetnsLauncher, src: int, dst: int, bulk_bytes: int) -> dict:
    """One bench.net.probe client/server exchange from host src to host dst."""
    server = hosts.spawn_quiet(dst, ["-m", "bench.net.probe", "serve", "--addr",
                                     hosts.addr(dst), "--port", str(PROBE_PORT)])
    try:
        read_ready_line(server, "listening", f"probe server on host {dst}")
        out = subprocess.run(
            ["ip", "netns", "exec", hosts.netns(src), hosts.python, "-m", "bench.net.probe",
             "measure", "--addr", hosts.addr(dst), "--port", str(PROBE_PORT),
             "--bytes", str(bulk_bytes)],
            capture_output=True, text=True, env=env_with_repo(), timeout=MEASURE_TIMEOUT_S)
        if out.returncode != 0:
            raise RuntimeError(f"link probe {src} -> {dst} failed:\n{out.stderr}")
        server.wait(timeout=10)
        return json.loads(out.stdout)
    finally:
        stop_group(server, TEARDOWN_GRACE_S)


def _measure_ceiling(hosts: NetnsLauncher, src: int, dst: int, bulk_bytes: int) -> float:
    """Payload rate src -> dst with every rate limit on the path lifted (the host's
    ceiling for that path); the limits are restored afterwards."""
    hosts.executor.run_all(hosts.shaping.rate_limit_argvs(src, dst, lifted=True))
    try:
        return _measure(hosts, src, dst, bulk_bytes)["rate_mbit"]
    finally:
        hosts.executor.run_all(hosts.shaping.rate_limit_argvs(src, dst, lifted=False))
