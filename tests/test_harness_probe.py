"""The link probe's verdict on a link's rate, and how host-limited links are
reported (pure logic; the netns tests measure real links)."""

from __future__ import annotations

import pytest

from bench.net.probe import (
    LinkProbeError,
    ProbeRecord,
    check_links,
    format_table,
    host_limited_warning,
    rate_verdict,
)


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
    (1_000.0, 500.0, 1_085.0, "off"),        # far below a ceiling near the rate
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


def _link(achieved, ceiling=None, host_limited=False, configured=10_000.0):
    return ProbeRecord(src=0, dst=1, rate_mbit_configured=configured,
                       rate_mbit_achieved=achieved, rate_mbit_first_to_last=achieved,
                       rate_mbit_ceiling=ceiling, host_limited=host_limited, rtt_ms=0.05,
                       rtt_ms_min=0.04, rtt_ms_configured=0.0, probe_bytes=1 << 20)


def test_check_links_passes_host_limited_and_stops_a_shaping_bug():
    check_links([_link(4_200.0, 5_000.0, True)])  # no error
    with pytest.raises(LinkProbeError, match=r"4200.0 Mbit/s achieved, 10000 Mbit/s "
                                             r"configured \(the host carries 9500.0"):
        check_links([_link(4_200.0, 9_500.0)])
    with pytest.raises(LinkProbeError) as err:  # short and no ceiling measured: stops
        check_links([_link(4_200.0)])
    assert str(err.value).splitlines()[1].strip() == \
        "host 0 -> 1: 4200.0 Mbit/s achieved, 10000 Mbit/s configured"


def test_host_limited_links_are_flagged_in_table_and_warning():
    links = [_link(4_200.0, 5_000.0, True), _link(9_900.0)]
    table = format_table(links)
    assert table.splitlines()[1].endswith("HOST-LIMITED")
    assert "HOST-LIMITED" not in table.splitlines()[2]
    assert "5000.0" in table.splitlines()[1]
    warning = host_limited_warning(links)
    assert warning.startswith("WARNING: HOST-LIMITED")
    assert "10000 Mbit/s configured, 4200.0 achieved, host ceiling 5000.0" in warning
    assert host_limited_warning([_link(9_900.0)]) is None


def test_probe_record_round_trips_and_names_a_bad_field():
    r = _link(4_200.0, 5_000.0, True)
    assert ProbeRecord.from_dict(r.to_dict()) == r
    with pytest.raises(ValueError, match=r"ProbeRecord.rate_mbit_achieved: .* got -1.0"):
        _link(-1.0)
    with pytest.raises(ValueError, match=r"ProbeRecord.host_limited: .*rate_mbit_ceiling=None"):
        _link(4_200.0, None, True)
    with pytest.raises(ValueError, match=r"ProbeRecord.rate_mbit_configured: .* got 0.0"):
        _link(4_200.0, configured=0.0)
    with pytest.raises(ValueError, match=r"ProbeRecord.rate_mbit_achieved: .* got None"):
        _link(None)


def test_probe_table_columns():
    table = format_table([_link(4_200.0, 5_000.0, True), _link(9_900.0, configured=None)])
    assert table.splitlines()[0].split() == ["link", "configured", "achieved", "ratio",
                                             "ceiling", "RTT", "cfg", "RTT"]
    assert table.splitlines()[1].split()[:6] == ["0", "->", "1", "10000.0", "4200.0", "0.420"]
    assert table.splitlines()[2].split()[3:7] == ["unshaped", "9900.0", "-", "-"]
    assert "Mbit/s" in table.splitlines()[-1]
