"""The link probe of the shaped launchers: bench.net.probe's server on the destination
host, its client on the source, one link after the other.

    records = probe_each(scenario, links, measure=..., lift_limits=..., payload_ratio=1.0,
                         delay_dropped=False, tolerance=0.10, duration_s=1.0)

`LinkProbing.probe` is the Launcher.probe of every shaped launcher; bench.launch.hosts.
ShapedHosts gives it the exchange (`_measure_link`, through the launcher's transport),
the lifted limits (`_lift_limits`) and the payload ratio. A link that falls short is
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
from bench.net.probe import ProbePlan, ProbeRecord, check_links, plan_probe, rate_verdict
from bench.net.scenario import NetworkScenario

__all__ = ["PROBE_PORT", "LinkProbing", "default_probe_links", "exchange", "probe_each"]

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


class LinkProbing:
    """Launcher.probe for a launcher whose links are shaped: bench.launch.hosts.ShapedHosts
    gives one exchange (`_measure_link`), how a path's limits are lifted (`_lift_limits`)
    and the payload rate per Mbit/s configured (`_payload_ratio`); a launcher whose delay
    line carries the packets gives the check that it still runs (`check_delay_line`)."""

    scenario: NetworkScenario
    n_hosts: int
    mechanisms: dict[str, str]
    _probe_records: list[ProbeRecord]

    def _measure_link(self, src: int, dst: int, plan: ProbePlan) -> dict:
        """One bench.net.probe client/server exchange from host src to host dst (its
        JSON reply)."""
        raise NotImplementedError

    def _lift_limits(self, src: int, dst: int, lifted: bool) -> None:
        """Lift every rate limit on the path src -> dst, or put it back."""
        raise NotImplementedError

    def _payload_ratio(self) -> float:
        """The payload rate a link carries per Mbit/s of the scenario (see probe_each)."""
        raise NotImplementedError

    def check_delay_line(self) -> None:
        """Raise if a delay line carrying the run's packets has died (none: nothing)."""

    def probe(self, links: list[tuple[int, int]] | None = None, check: bool = True,
              tolerance: float = 0.10, duration_s: float = 1.0) -> list[ProbeRecord]:
        """Measure each directed link (default: those the placement of the scenario's
        layout uses, default_probe_links) one after the other, each as
        bench.net.probe.plan_probe plans it from its rate, round trip and `duration_s`;
        raise LinkProbeError if one is off by more than `tolerance` (rate, or round trip).

        A link that falls short is measured again with its rate limits lifted (the
        host's ceiling for that path, `rate_mbit_ceiling`); if that ceiling is below
        the configured rate too, the link is recorded as `host_limited` and does not
        stop the run (bench.net.probe.rate_verdict)."""
        self.check_delay_line()
        links = links or default_probe_links(self.scenario, self.n_hosts)
        self._probe_records = probe_each(
            self.scenario, links, measure=self._measure_link, lift_limits=self._lift_limits,
            payload_ratio=self._payload_ratio(),
            delay_dropped=self.mechanisms.get("delay", "none").startswith("dropped"),
            tolerance=tolerance, duration_s=duration_s)
        if check:
            check_links(self._probe_records, tolerance)
        return self._probe_records
