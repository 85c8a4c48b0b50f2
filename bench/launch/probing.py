"""The link probe of the shaped launchers: bench.net.probe's server on the destination
host, its client on the source, one link after the other.

    records = probe_each(scenario, links, measure=..., lift_limits=..., payload_ratio=1.0,
                         delay_dropped=False, tolerance=0.10, duration_s=1.0)

bench.launch.hosts.ShapedHosts.probe (every shaped launcher's Launcher.probe) calls
`probe_each` with the exchange (`measure`, through the launcher's transport), the lifted
limits (`lift_limits`) and the payload ratio. A link that falls short is
measured once more, then with every rate limit on its path lifted (the host's ceiling),
which bench.net.probe's `rate_verdict` reads to tell a host-limited link from a wrongly
shaped one. `exchange` runs one client against a started server.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Callable

from bench.launch.process import TEARDOWN_GRACE_S, read_ready_line, stop_group
from bench.net.placement import place
from bench.net.probe import ProbePlan, ProbeRecord, plan_probe, rate_verdict
from bench.net.scenario import NetworkScenario

__all__ = ["PROBE_PORT", "default_probe_links", "exchange", "probe_each"]

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


def exchange(server: subprocess.Popen, client: list[str], plan: ProbePlan,
             env: dict[str, str], src: int, dst: int, where: str) -> dict:
    """Wait for the probe `server` (started by the caller) to listen, run the `client`
    command (given `plan.client_args()`) to completion within the plan's
    `process_timeout_s` and return its JSON result; the server is stopped whatever
    happens. Every shaped launcher's probe goes through here."""
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

