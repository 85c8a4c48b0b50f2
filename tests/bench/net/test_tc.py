"""tc/ip commands as data and the choice of mechanisms (bench.net.tc). No root needed."""

import pytest

from bench.net.scenario import LinkSpec, load_scenario
from bench.net.shaping import EgressLink, egress_argvs
from bench.net.tc import (
    Capabilities,
    ShapingError,
    choose_mechanisms,
    fifo_argv,
    htb_class_argv,
    htb_root_argv,
    ifb_redirect_argvs,
    netem_argv,
    payload_factor,
    tbf_argv,
    u32_dst_filter_argv,
)


def test_htb_argv():
    assert htb_root_argv("v0", netns="ns1") == (
        "tc", "-n", "ns1", "qdisc", "add", "dev", "v0", "root", "handle", "1:", "htb")
    assert htb_class_argv("v0", "1:1", "1:10", 100_000_000, 100_000_000, 25_000) == (
        "tc", "class", "add", "dev", "v0", "parent", "1:1", "classid", "1:10", "htb",
        "rate", "100000000bit", "ceil", "100000000bit", "burst", "25000", "cburst", "25000")


def test_tbf_argv():
    assert tbf_argv("eth0", 10_000_000, 16384, 1_514_000) == (
        "tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "10000000bit",
        "burst", "16384", "limit", "1514000")
    assert tbf_argv("eth0", 8, 2000, 3000, parent="1:10", handle="10:", netns="n")[:12] == (
        "tc", "-n", "n", "qdisc", "add", "dev", "eth0", "parent", "1:10", "handle", "10:", "tbf")


def test_netem_argv():
    assert netem_argv("v0", "1:10", "10:", 25, 2, 0.1, 500) == (
        "tc", "qdisc", "add", "dev", "v0", "parent", "1:10", "handle", "10:", "netem",
        "limit", "500", "delay", "25ms", "2ms", "loss", "0.1%")
    assert netem_argv("v0", "1:10", "10:", 7.5)[-2:] == ("delay", "7.5ms")


def test_fifo_and_filter_argv():
    assert fifo_argv("v0", "1:10", "10:", queue_packets=1000)[-3:] == ("pfifo", "limit", "1000")
    assert fifo_argv("v0", "1:10", "10:", queue_bytes=30000)[-3:] == ("bfifo", "limit", "30000")
    with pytest.raises(ValueError, match="queue_packets"):
        fifo_argv("v0", "1:10", "10:")
    assert u32_dst_filter_argv("v0", "1:", "198.18.0.2", "1:11") == (
        "tc", "filter", "add", "dev", "v0", "parent", "1:", "protocol", "ip", "prio", "1",
        "u32", "match", "ip", "dst", "198.18.0.2/32", "flowid", "1:11")


def test_ifb_redirect_argvs():
    assert ifb_redirect_argvs("eth0", "ifb9", netns="h1") == [
        ("ip", "-n", "h1", "link", "add", "name", "ifb9", "type", "ifb"),
        ("ip", "-n", "h1", "link", "set", "dev", "ifb9", "up"),
        ("tc", "-n", "h1", "qdisc", "add", "dev", "eth0", "handle", "ffff:", "ingress"),
        ("tc", "-n", "h1", "filter", "add", "dev", "eth0", "parent", "ffff:", "protocol", "all",
         "u32", "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev",
         "ifb9"),
    ]


def test_payload_factor_matches_frame_overhead():
    assert payload_factor(1500, 14) == pytest.approx(1514 / 1448)
    assert payload_factor(1500, 0) == pytest.approx(1500 / 1448)


def test_rate_correction_raises_tc_rate():
    argvs = egress_argvs("v0", [EgressLink("a", LinkSpec(rate_mbit=100))], None,
                         payload_factor(), netem=False)
    assert "104558012bit" in argvs[2]  # ceil(100e6 * 1514 / 1448)


def test_choose_mechanisms():
    wan = load_scenario("wan")
    specs = wan.specs(2)
    assert choose_mechanisms(specs, Capabilities(True, True), False) == {
        "rate": "htb", "delay": "netem", "jitter": "netem", "loss": "netem"}
    assert choose_mechanisms(specs, Capabilities(False, True), False)["loss"] == "delayline"
    with pytest.raises(ShapingError, match="delay.*allow_drop"):
        choose_mechanisms(specs, Capabilities(False, False), False)
    dropped = choose_mechanisms(specs, Capabilities(False, False), True)
    assert dropped["rate"] == "htb" and dropped["loss"].startswith("dropped")
    plain = choose_mechanisms(load_scenario("100mbps").specs(2), Capabilities(False, False),
                              False)
    assert plain == {"rate": "htb", "delay": "none", "jitter": "none", "loss": "none"}
