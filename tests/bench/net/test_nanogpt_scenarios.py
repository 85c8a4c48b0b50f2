"""ProtocolNanoGPT's setting under both accountings (issue 38, item 3): per link, and one
inbound wire per host that both directions share (a downlink cap on every host)."""

from __future__ import annotations

from bench.net.scenario import load_scenario


def test_per_link_accounting_shapes_every_boundary_each_way():
    s = load_scenario("nanogpt-200mbps")
    assert s.layout.stages == 8 and not s.host_caps
    assert s.link_spec(3, 4).rate_mbit == 200 and s.link_spec(4, 3).delay_ms == 50


def test_inbound_accounting_caps_what_each_host_receives_and_leaves_links_unshaped():
    s = load_scenario("nanogpt-200mbps-inbound")
    assert s.layout.stages == 8 and s.link.rate_mbit is None and s.link.delay_ms == 50
    assert [(c.host, c.uplink_mbit, c.downlink_mbit) for c in s.host_caps] == \
        [(h, None, 200) for h in range(8)]
    # either way into a middle host is capped by that host's one inbound wire
    assert s.link_spec(2, 3).rate_mbit is None
    assert s.payload_rate_mbit(2, 3) == s.payload_rate_mbit(4, 3) == 200
