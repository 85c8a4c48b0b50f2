"""How probed links are reported (bench.net.probe.table): host-limited links in the table
and the warning, the table's columns."""

from __future__ import annotations

from probe_helpers import link_record

from bench.net.probe import format_table, host_limited_warning


def test_host_limited_links_are_flagged_in_table_and_warning():
    links = [link_record(4_200.0, 5_000.0, True), link_record(9_900.0)]
    table = format_table(links)
    assert table.splitlines()[1].endswith("HOST-LIMITED")
    assert "HOST-LIMITED" not in table.splitlines()[2]
    assert "5000.0" in table.splitlines()[1]
    warning = host_limited_warning(links)
    assert warning.startswith("WARNING: HOST-LIMITED")
    assert "10000 Mbit/s configured, 4200.0 achieved, host ceiling 5000.0" in warning
    assert host_limited_warning([link_record(9_900.0)]) is None


def test_probe_table_columns():
    table = format_table([link_record(4_200.0, 5_000.0, True),
                          link_record(9_900.0, configured=None)])
    assert table.splitlines()[0].split() == ["link", "configured", "achieved", "ratio",
                                             "ceiling", "RTT", "cfg", "RTT"]
    assert table.splitlines()[1].split()[:6] == ["0", "->", "1", "10000.0", "4200.0", "0.420"]
    assert table.splitlines()[2].split()[3:7] == ["unshaped", "9900.0", "-", "-"]
    assert "Mbit/s" in table.splitlines()[-1]
