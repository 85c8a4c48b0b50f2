"""The netns launcher's link probe: bench.net.probe's server in the destination
host's namespace, its client in the source's, one link after the other.

A link that falls short of its rate is measured again with every rate limit on
its path lifted (the shaping plan's `rate_limit_argvs`), which gives the host's
ceiling for that path; the limits are put back afterwards. bench.net.probe's
`rate_verdict` then tells a host-limited link from a wrongly shaped one. The loop
over links (`probe_each`) is every launcher's and plans each link's probe
(bench.net.probe.plan_probe: bytes, steady window, timeouts); the Docker launcher gives
it its own `measure` and `lift_limits` (bench/launch/dockerprobe.py).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Callable
from typing import TYPE_CHECKING

from bench.launch.names import MTU
from bench.launch.process import TEARDOWN_GRACE_S, env_with_repo, read_ready_line, stop_group
from bench.net.placement import place
from bench.net.probe import ProbePlan, ProbeRecord, plan_probe, rate_verdict
from bench.net.scenario import NetworkScenario
from bench.net.tc import payload_factor

if TYPE_CHECKING:
    from bench.launch.netns import NetnsLauncher

__all__ = ["PROBE_PORT", "default_probe_links", "exchange", "probe_each", "probe_links"]

PROBE_PORT = 5201


def default_probe_links(scenario: NetworkScenario, n_hosts: int) -> list[tuple[int, int]]:
    """The links the placement of the scenario's own layout uses
    (bench.net.placement.place); with fewer hosts up than the layout has, the links of a
    pipeline of n_hosts stages on them (more: the placement's PlacementError)."""
    layout = scenario.layout
    if layout.n_hosts == n_hosts:
        return place(scenario, layout.stages, layout.replicas).probe_links()
    return place(scenario, n_hosts).probe_links()


def probe_each(scenario: NetworkScenario, links: list[tuple[int, int]], *,
               measure: Callable[[int, int, ProbePlan], dict],
               lift_limits: Callable[[int, int, bool], None], payload_ratio: float,
               delay_dropped: bool, tolerance: float, duration_s: float) -> list[ProbeRecord]:
    """One ProbeRecord per directed link, each measured as bench.net.probe.plan_probe
    plans it from the link's rate and round trip (a bulk transfer of about duration_s
    where slow start and the token bucket allow), and again with the path's rate limits
    lifted when it falls short twice (the host's ceiling; a short link is measured once
    more first and the better reading kept). What differs between launchers comes
    in as callables: `measure(src, dst, plan)` is one bench.net.probe exchange (its JSON
    reply),
    `lift_limits(src, dst, lifted)` lifts or restores the limits on that path.
    `payload_ratio`: the payload rate the link should carry per Mbit/s of the scenario
    (1.0 with payload correction; configured literally, tc carries rate * 1448/1514)."""
    records = []
    for src, dst in links:
        want = scenario.payload_rate_mbit(src, dst)
        expect = None if want is None else want * payload_ratio
        rtt = 0.0 if delay_dropped else (scenario.link_spec(src, dst).delay_ms
                                         + scenario.link_spec(dst, src).delay_ms)
        plan = plan_probe(expect, rtt, duration_s)
        m = measure(src, dst, plan)
        ceiling = None
        if rate_verdict(expect, m["rate_mbit"], None, tolerance) == "short":
            # One slow reading happens (a quiet 2-core machine: one 10 Gbit/s link read
            # 8772 Mbit/s, its neighbours 9069-10041, the host carrying 18651 unshaped):
            # measured once more, the better reading stands; a wrongly shaped link is
            # short both times.
            again = measure(src, dst, plan)
            m = again if again["rate_mbit"] > m["rate_mbit"] else m
        if rate_verdict(expect, m["rate_mbit"], None, tolerance) == "short":
            lift_limits(src, dst, True)
            try:
                # unpaced: the host's ceiling, not twice the link's rate
                unpaced = dataclasses.replace(plan, max_pacing_mbit=None)
                ceiling = measure(src, dst, unpaced)["rate_mbit"]
            finally:
                lift_limits(src, dst, False)
        verdict = rate_verdict(expect, m["rate_mbit"], ceiling, tolerance)
        records.append(ProbeRecord.from_measurement(
            src, dst, m, rate_mbit_configured=expect, rtt_ms_configured=rtt,
            rate_mbit_ceiling=ceiling, host_limited=verdict == "host_limited"))
    return records


def probe_links(hosts: NetnsLauncher, links: list[tuple[int, int]], tolerance: float,
                duration_s: float) -> list[ProbeRecord]:
    """The netns hosts' links through `probe_each`."""

    def lift_limits(src: int, dst: int, lifted: bool) -> None:
        hosts.executor.run_all(hosts.shaping.rate_limit_argvs(src, dst, lifted=lifted))

    return probe_each(
        hosts.scenario, links, measure=lambda s, d, n: _measure(hosts, s, d, n),
        lift_limits=lift_limits,
        payload_ratio=1.0 if hosts.payload_correction else 1.0 / payload_factor(MTU),
        delay_dropped=hosts.mechanisms.get("delay", "none").startswith("dropped"),
        tolerance=tolerance, duration_s=duration_s)


def _measure(hosts: NetnsLauncher, src: int, dst: int, plan: ProbePlan) -> dict:
    """One bench.net.probe client/server exchange from host src to host dst."""
    server = hosts.spawn_quiet(dst, ["-m", "bench.net.probe", "serve", "--addr",
                                     hosts.addr(dst), "--port", str(PROBE_PORT)])
    client = ["ip", "netns", "exec", hosts.netns(src), hosts.python, "-m", "bench.net.probe",
              "measure", "--addr", hosts.addr(dst), "--port", str(PROBE_PORT),
              *plan.client_args()]
    return exchange(server, client, plan, env_with_repo(), src, dst, f"host {dst}")


def exchange(server: subprocess.Popen, client: list[str], plan: ProbePlan,
             env: dict[str, str], src: int, dst: int, where: str) -> dict:
    """Wait for the probe `server` (started by the caller) to listen, run the `client`
    command (given `plan.client_args()`) to completion within the plan's
    `process_timeout_s` and return its JSON result; the server is stopped whatever
    happens. Both launchers' probes go through here."""
    try:
        read_ready_line(server, "listening", f"probe server on {where}")
        out = subprocess.run(client, capture_output=True, text=True, env=env,
                             timeout=plan.process_timeout_s)
        if out.returncode != 0:
            raise RuntimeError(f"link probe {src} -> {dst} failed:\n{out.stderr}")
        server.wait(timeout=10)
        return json.loads(out.stdout)
    finally:
        stop_group(server, TEARDOWN_GRACE_S)
