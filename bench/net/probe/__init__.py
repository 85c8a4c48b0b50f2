"""Link probe: what a shaped link actually delivers.

For one directed link src -> dst: a small TCP ping-pong (round-trip time) and a TCP bulk
transfer, timed at the receiver. One module per part of that contract between the
launcher and the processes it starts inside the namespaces or containers:

- plan: `plan_probe` sizes a link's probe (`ProbePlan`: bytes, steady window, timeouts,
  pacing cap) from its configured rate and round trip;
- wire: the timestamping server and client that carry a plan out, started once per link
  as `python -m bench.net.probe serve|measure ...` (`ProbePlan.client_args`);
- record: `ProbeRecord`, one link as measured, what every launcher returns;
- verdict: `rate_verdict` (ok, short, host-limited or off), `check_links` and
  `host_limited_warning` over the records;
- table: `format_table`, the records as a plain-text table;
- stream and timeline: the time-resolved probe of a link whose rate changes (one stream
  for a fixed time, bytes per bin of the receiver's clock, `stream-serve|stream-send`),
  and `phase_rates` / `check_phases`, each phase of a schedule against its rate.

Every module loads the standard library only when imported (bench.net.tc and rich are
loaded by the functions that need them), so starting the server or the client loads this
package and nothing of the suite outside it. docs/network.md says how a link is probed and
which rates it can verify.
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
