"""The host shaping plan (bench.net.shaping): egress classes per destination, a path's classes
changed, the one plan every launcher renders, and its removal."""

import pytest

from bench.launch.docker.spec import DockerRunSpec
from bench.launch.export.multihost import plan_hosts
from bench.launch.netns.names import TopologyNames
from bench.launch.netns.shaping import plan_shaping
from bench.net.scenario import LinkSpec, load_scenario, parse_scenario
from bench.net.shaping import EgressLink, Interface, egress_argvs, egress_path_argvs, shaping_plan
from bench.net.tc import (
    UNLIMITED_BIT,
    burst_bytes,
    fifo_argv,
    htb_class_argv,
    htb_root_argv,
    netem_argv,
    tbf_argv,
    u32_dst_filter_argv,
)


def test_egress_tree_per_destination():
    links = [EgressLink("198.18.0.2", LinkSpec(rate_mbit=10)),
             EgressLink("198.18.0.3", LinkSpec(rate_mbit=None, delay_ms=5, queue_packets=None,
                                               queue_bytes=30000))]
    argvs = egress_argvs("v0", links, uplink_mbit=50, factor=1.0, netem=True)
    assert argvs[0] == htb_root_argv("v0")
    assert argvs[1] == htb_class_argv("v0", "1:", "1:1", 50_000_000, 50_000_000, 16384)
    assert argvs[2] == htb_class_argv("v0", "1:1", "1:10", 10_000_000, 10_000_000, 16384)
    assert argvs[3] == fifo_argv("v0", "1:10", "10:", queue_packets=1000)
    assert argvs[4] == u32_dst_filter_argv("v0", "1:", "198.18.0.2", "1:10")
    # unshaped rate under a 50 Mbit/s uplink: the class gets the uplink; delay by netem
    assert argvs[5] == htb_class_argv("v0", "1:1", "1:11", 50_000_000, 50_000_000, 16384)
    assert argvs[6] == netem_argv("v0", "1:11", "11:", 5, limit_packets=30000 // 1514)
    assert len(argvs) == 8
    # without netem the delay is not in tc at all (the delay line carries it)
    assert not any("netem" in a for a in egress_argvs("v0", links, 50, 1.0, netem=False))
    assert egress_argvs("v0", [EgressLink("1.2.3.4", LinkSpec(rate_mbit=None))], None, 1.0,
                        netem=True) == []


def test_egress_path_argvs_change_what_egress_argvs_added():
    links = [EgressLink("198.18.0.1", LinkSpec(rate_mbit=10)),
             EgressLink("198.18.0.3", LinkSpec(rate_mbit=30, delay_ms=5))]
    added = egress_argvs("v0", links, 50, 1.0, netem=True, netns="h")
    restored = egress_path_argvs("v0", links, 50, 1.0, netem=True, k=1, netns="h")
    # the uplink class and destination 1's class, as `change` with the configured rates
    assert restored == [tuple("change" if v == "add" else v for v in added[i]) for i in (1, 5)]
    lifted = egress_path_argvs("v0", links, 50, 1.0, netem=True, k=1, rate_bit=UNLIMITED_BIT,
                               netns="h")
    assert lifted[1] == htb_class_argv("v0", "1:1", "1:11", UNLIMITED_BIT, UNLIMITED_BIT,
                                       burst_bytes(UNLIMITED_BIT), "h", verb="change")
    unshaped = [EgressLink("198.18.0.1", LinkSpec(rate_mbit=None))]
    assert egress_path_argvs("v0", unshaped, None, 1.0, netem=True, k=0) == []
    with pytest.raises(ValueError, match="verb.*'replace'"):
        tbf_argv("eth0", 8, 2000, 3000, verb="replace")


def _tc_numbers(argvs) -> list[tuple[str, str]]:
    """Every (keyword, value) of rates, buckets, queues and impairments, in order."""
    keys = {"rate", "ceil", "burst", "cburst", "limit", "delay", "loss"}
    return [(a[i], a[i + 1]) for a in argvs for i in range(len(a) - 1) if a[i] in keys]


def test_every_launcher_renders_the_one_host_plan():
    # netns (veths), Docker (eth0 in each container) and the multi-host commands (eth0 of
    # real hosts) differ only in device, namespace and addresses: the same htb classes,
    # netem leaves, queues and downlink tbf for every host of the same scenario
    sc = load_scenario("heterogeneous")
    n = sc.n_hosts
    netns = plan_shaping(sc, TopologyNames("aqtest0", n), tun=False, netem=True,
                         payload_correction=True)
    docker = DockerRunSpec(sc, n, "aqd1a2b3", 300, netem=True)
    multi, _ = plan_hosts(sc, [f"10.0.0.{i + 1}" for i in range(n)], "eth0", [])
    for i in range(n):
        on_netns = netns.plan.setup_argvs(i, netns.interfaces[i])
        assert (_tc_numbers(on_netns) == _tc_numbers(docker.shaping_argvs(i))
                == _tc_numbers(multi[i].setup))
    assert any(("delay", "10ms") in _tc_numbers(p.setup) for p in multi)


def test_a_host_plan_is_removed_where_it_was_put():
    raw = {"description": "caps", "layout": {"stages": 2}, "link": {"rate_mbit": 100},
           "hosts": [{"host": 1, "downlink_mbit": 20}]}
    plan = shaping_plan(parse_scenario(raw, "caps"), 2, factor=1.0, netem=False)
    port = Interface("v1", ("a", "b"), "h1", downlink_dev="s1", downlink_netns="sw")
    assert plan.removal_argvs(1, port) == [("tc", "-n", "h1", "qdisc", "del", "dev", "v1",
                                            "root"),
                                           ("tc", "-n", "sw", "qdisc", "del", "dev", "s1",
                                            "root")]
    assert plan.removal_argvs(1, Interface("eth0", ("a", "b"), ifb="ifb9"))[1:] == [
        ("tc", "qdisc", "del", "dev", "eth0", "ingress"), ("ip", "link", "del", "ifb9")]
    with pytest.raises(ValueError, match="a downlink cap needs an ifb or a downlink_dev"):
        plan.setup_argvs(1, Interface("eth0", ("a", "b")))
    with pytest.raises(ValueError, match="at most one of ifb and downlink_dev"):
        Interface("eth0", ("a", "b"), ifb="i", downlink_dev="s")
    assert plan.hosts[0].link_to(1).classid == "1:10"
    with pytest.raises(IndexError, match=r"dst: expected one of .*\[1\], got 0"):
        plan.hosts[0].link_to(0)
