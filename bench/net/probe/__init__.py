"""Link probe: what a shaped link actually delivers.

    plan = plan_probe(rate_mbit=100.0, rtt_ms=20.0)       # bytes, steady window, timeouts
    python -m bench.net.probe serve|measure ...            # started by the launchers per link
    check_links(records, tolerance=0.10); print(format_table(records))

For one directed link: a small TCP ping-pong (round trip) and a bulk transfer timed at
the receiver. Modules: plan (`plan_probe`), wire (the server and client), record
(`ProbeRecord`, what every launcher returns), verdict (`rate_verdict`, `check_links`),
table (`format_table`), stream and timeline (the time-resolved probe of a link whose rate
changes, `phase_rates` / `check_phases`). Importing it loads the standard library only,
so starting the server or client loads nothing of the suite outside this package.
docs/network.md says how a link is probed and which rates it can verify.
"""

from bench.net.probe.plan import (
    MAX_TRANSFER_S,
    ProbePlan,
    ProbePlanError,
    plan_probe,
    slow_start_bytes,
    slow_start_rtts,
)
from bench.net.probe.record import ProbeRecord
from bench.net.probe.table import format_table
from bench.net.probe.timeline import (
    PhaseRate,
    PhaseRateError,
    PhaseWindow,
    check_phases,
    phase_rates,
    resume_s,
)
from bench.net.probe.verdict import (
    CEILING_HEADROOM,
    CEILING_TOLERANCE,
    LinkProbeError,
    check_links,
    host_limited_warning,
    rate_verdict,
)
from bench.net.probe.wire import main, measure, serve

__all__ = ["CEILING_HEADROOM", "CEILING_TOLERANCE", "LinkProbeError", "MAX_TRANSFER_S",
           "PhaseRate", "PhaseRateError", "PhaseWindow", "ProbePlan", "ProbePlanError",
           "ProbeRecord", "check_links", "check_phases", "format_table",
           "host_limited_warning", "main", "measure", "phase_rates", "plan_probe",
           "rate_verdict", "resume_s", "serve", "slow_start_bytes", "slow_start_rtts"]
