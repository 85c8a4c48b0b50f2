"""The probe record (bench.net.probe.record): a round trip, a bad field named."""

from __future__ import annotations

import pytest
from probe_helpers import link_record

from bench.net.probe import ProbeRecord


def test_probe_record_round_trips_and_names_a_bad_field():
    r = link_record(4_200.0, 5_000.0, True)
    assert ProbeRecord.from_dict(r.to_dict()) == r
    with pytest.raises(ValueError, match=r"ProbeRecord.rate_mbit_achieved: .* got -1.0"):
        link_record(-1.0)
    with pytest.raises(ValueError, match=r"ProbeRecord.host_limited: .*rate_mbit_ceiling=None"):
        link_record(4_200.0, None, True)
    with pytest.raises(ValueError, match=r"ProbeRecord.rate_mbit_configured: .* got 0.0"):
        link_record(4_200.0, configured=0.0)
    with pytest.raises(ValueError, match=r"ProbeRecord.rate_mbit_achieved: .* got None"):
        link_record(None)
