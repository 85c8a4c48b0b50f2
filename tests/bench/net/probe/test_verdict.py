"""The link probe's verdict on a link's rate and the links it stops a run for
(bench.net.probe.verdict; pure logic: the netns tests measure real links)."""

from __future__ import annotations

import dataclasses

import pytest
from probe_helpers import link_record

from bench.net.probe import LinkProbeError, ProbeRecord, check_links, rate_verdict


@pytest.mark.parametrize("configured, achieved, ceiling, verdict", [
    (None, 5.0, None, "ok"),                 # unshaped: nothing to hold it to
    (100.0, 95.0, None, "ok"),               # within 10%
    (100.0, 111.0, None, "off"),             # faster than shaped: the shaping is wrong
    (100.0, 111.0, 5000.0, "off"),
    (10_000.0, 4_000.0, None, "short"),      # short, ceiling not measured yet
    (10_000.0, 4_000.0, 5_000.0, "host_limited"),
    (10_000.0, 5_400.0, 3_700.0, "host_limited"),  # load noise between the two probes
    (10_000.0, 8_950.0, 8_990.0, "host_limited"),  # ceiling just below 90%
    (1_000.0, 891.0, 1_085.0, "host_limited"),  # ceiling within 10% above: load noise
    (1_000.0, 690.0, 1_040.0, "host_limited"),
    (1_000.0, 450.0, 1_085.0, "off"),        # under half a ceiling near the rate
    (40_000.0, 13_046.0, 25_841.0, "host_limited"),  # measured in CI: CPU-bound noise
    (1_000.0, 700.0, 1_200.0, "host_limited"),  # little headroom: at the host's mercy
    (10_000.0, 8_815.0, 16_878.0, "host_limited"),  # measured, the 10gbps scenario
    (1_000.0, 700.0, 2_500.0, "off"),        # the host carries the rate with margin
    (100.0, 89.8, 9_000.0, "off"),
    (10_000.0, 4_000.0, 9_500.0, "off"),     # far below the host's ceiling: shaping bug
    (10_000.0, 1_000.0, 5_000.0, "off"),     # far below even the host's ceiling
    (20.0, 10.0, 9_000.0, "off"),
])
def test_rate_verdict(configured, achieved, ceiling, verdict):
    assert rate_verdict(configured, achieved, ceiling, tolerance=0.10) == verdict


def test_check_links_passes_host_limited_and_stops_a_shaping_bug():
    check_links([link_record(4_200.0, 5_000.0, True)])  # no error
    with pytest.raises(LinkProbeError, match=r"4200.0 Mbit/s achieved, 10000 Mbit/s "
                                             r"configured \(the host carries 9500.0"):
        check_links([link_record(4_200.0, 9_500.0)])
    with pytest.raises(LinkProbeError) as err:  # short and no ceiling measured: stops
        check_links([link_record(4_200.0)])
    assert str(err.value).splitlines()[1].strip() == \
        "host 0 -> 1: 4200.0 Mbit/s achieved, 10000 Mbit/s configured"


def test_check_links_names_the_bad_link():
    good = ProbeRecord(src=0, dst=1, rate_mbit_configured=100.0, rate_mbit_achieved=97.0,
                       rate_mbit_first_to_last=96.0, rate_mbit_ceiling=None, host_limited=False,
                       rtt_ms=20.5, rtt_ms_min=20.2, rtt_ms_configured=20.0,
                       probe_bytes=12_500_000)
    check_links([good])
    slow = dataclasses.replace(good, src=1, dst=2, rate_mbit_achieved=80.0)
    with pytest.raises(LinkProbeError, match=r"host 1 -> 2: 80.0 Mbit/s achieved, 100"):
        check_links([good, slow])
    with pytest.raises(LinkProbeError, match="RTT"):
        check_links([dataclasses.replace(good, rtt_ms=30.0)])
