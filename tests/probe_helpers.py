"""What the link-probe tests share (tests/bench/net/probe/): the record of one probed link."""

from bench.net.probe import ProbeRecord


def link_record(achieved, ceiling=None, host_limited=False, configured=10_000.0):
    return ProbeRecord(src=0, dst=1, rate_mbit_configured=configured,
                       rate_mbit_achieved=achieved, rate_mbit_first_to_last=achieved,
                       rate_mbit_ceiling=ceiling, host_limited=host_limited, rtt_ms=0.05,
                       rtt_ms_min=0.04, rtt_ms_configured=0.0, probe_bytes=1 << 20)
