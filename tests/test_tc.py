"""tc/ip commands as data, mechanism choice, the host shaping plan as every launcher renders
it, the netns shaping plan, executor, multi-host plan, process groups, local launcher.

No root needed (except the executor test, which only runs `ip link show`)."""

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.launch.docker.spec import DockerRunSpec
from bench.launch.export.multihost import plan_hosts
from bench.launch.local import LocalLauncher
from bench.launch.netns.names import TopologyNames
from bench.launch.netns.shaping import plan_shaping
from bench.launch.process import spawn_group, stop_all, stop_group
from bench.net.executor import CommandError, Executor, RecordingExecutor
from bench.net.probe import LinkProbeError, ProbeRecord, check_links
from bench.net.scenario import LinkSpec, load_scenario, parse_scenario
from bench.net.shaping import (
    EgressLink,
    Interface,
    egress_argvs,
    egress_path_argvs,
    shaping_plan,
)
from bench.net.tc import (
    UNLIMITED_BIT,
    Capabilities,
    ShapingError,
    burst_bytes,
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


@pytest.mark.parametrize("tun", [False, True], ids=["veth", "tun"])
def test_shaping_plan_lifts_and_restores_one_path(tun):
    raw = {"description": "caps", "layout": {"stages": 3}, "link": {"rate_mbit": 100},
           "links": [{"src": 2, "dst": 1, "rate_mbit": 30}],
           "hosts": [{"host": 1, "downlink_mbit": 20}, {"host": 2, "uplink_mbit": 50}]}
    names = TopologyNames("aqtest0", 3)
    plan = plan_shaping(parse_scenario(raw, "caps"), names, tun=tun, netem=False,
                        payload_correction=True)
    setup = plan.setup_argvs()
    as_change = {a: tuple("change" if v == "add" else v for v in a) for a in setup}
    (down,) = [a for a in setup if "tbf" in a]
    assert (names.ifb(1) if tun else names.switch_veth(1)) in down
    assert any("ifb" in a for a in setup) == tun
    h2 = names.host_ns(2)
    h2_classes = {a[a.index("classid") + 1]: a for a in setup if "class" in a and h2 in a}
    # path 2 -> 1: host 2's uplink class, its class towards host 1 (its 2nd link), and
    # host 1's downlink tbf; restored = the commands that added them, as `change`
    restored = plan.rate_limit_argvs(2, 1, lifted=False)
    assert restored == [as_change[h2_classes["1:1"]], as_change[h2_classes["1:11"]],
                        as_change[down]]
    lifted = plan.rate_limit_argvs(2, 1, lifted=True)
    unlimited, burst = f"{UNLIMITED_BIT}bit", str(burst_bytes(UNLIMITED_BIT))
    for cmd, before in zip(lifted, restored, strict=True):
        assert cmd[cmd.index("rate") + 1] == unlimited
        assert cmd[cmd.index("burst") + 1] == burst
        assert cmd[:cmd.index("rate")] == before[:before.index("rate")]
    assert lifted[1][lifted[1].index("ceil") + 1] == unlimited
    assert lifted[2][-2:] == down[-2:]  # the tbf keeps its queue limit
    assert len(plan.rate_limit_argvs(1, 2, lifted=True)) == 2  # host 2 has no downlink cap
    with pytest.raises(ValueError, match="src and dst"):
        plan.rate_limit_argvs(1, 1, lifted=True)


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


def _alive(pid: int) -> bool:
    """Running (not gone, not a zombie that nobody has reaped yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_process_groups_are_stopped_whole(tmp_path):
    # a leader that ignores SIGTERM, with a child: both go (SIGKILL after the grace)
    code = ("import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, "
            "signal.SIG_IGN); c = subprocess.Popen(['sleep', '60']); print(c.pid, flush=True);"
            " time.sleep(60)")
    leader = spawn_group([sys.executable, "-c", code], pipe_stdout=True)
    child = int(leader.stdout.readline())
    assert os.getpgid(leader.pid) == leader.pid == os.getpgid(child)
    t0 = time.monotonic()
    stop_group(leader, grace_s=0.5)
    assert leader.returncode == -9 and 0.5 <= time.monotonic() - t0 < 5
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)
    # output appended to a log; a process that leads no group is signalled alone
    log = tmp_path / "out.log"
    log.write_text("before\n")
    spawn_group([sys.executable, "-c", "print('after')"], log_path=log).wait(timeout=30)
    assert log.read_text() == "before\nafter\n"
    plain = subprocess.Popen(["sleep", "60"])
    stop_all([plain, None])
    assert plain.returncode == -15


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


def test_executor_fails_loudly_with_command_and_stderr():
    ex = Executor()
    with pytest.raises(CommandError) as info:
        ex.run(("ip", "link", "show", "dev", "aq-no-such-dev"))
    msg = str(info.value)
    assert "ip link show dev aq-no-such-dev" in msg and "stderr:" in msg
    assert info.value.returncode != 0 and info.value.stderr
    with pytest.raises(TypeError, match="argv"):
        ex.run("ip link show")
    with pytest.raises(CommandError, match="executable not found"):
        ex.run(("aq-no-such-binary",))
    rec = RecordingExecutor()
    rec.run_all([("tc", "qdisc", "show")])
    assert rec.history == [("tc", "qdisc", "show")]


def test_multihost_plan():
    plans, mech = plan_hosts(load_scenario("heterogeneous"),
                             ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"], "eth0",
                             ["--config", "run.yaml"])
    assert mech["delay"] == "netem"
    assert plans[1].launch[:8] == ("torchrun", "--nnodes", "4", "--nproc-per-node", "1",
                                   "--node-rank", "1", "--master-addr")
    assert plans[1].launch[-3:] == ("aqsgd.train.worker", "--config", "run.yaml")
    # host 1 -> host 2 (10.0.0.3) has the 10 ms delay; host 3 has an ifb for its downlink
    assert any(a[-3:] == ("netem", "limit", "1000") or "10ms" in a for a in plans[1].setup)
    assert any("ifb" in a for a in plans[3].setup)
    assert not any("ifb" in a for a in plans[0].setup)
    assert ("GLOO_SOCKET_IFNAME", "eth0") in plans[0].env
    assert "tc qdisc del dev eth0 root" in plans[0].render()
    with pytest.raises(ValueError, match=r"hosts\[1\].*gpu-b"):
        plan_hosts(load_scenario("100mbps"), ["10.0.0.1", "gpu-b"], "eth0", [])
    with pytest.raises(ShapingError):
        plan_hosts(load_scenario("wan"), ["10.0.0.1", "10.0.0.2"], "eth0", [], netem=False)


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


@pytest.mark.timeout(60)
def test_local_launcher(tmp_path):
    out = tmp_path / "env.json"
    code = ("import json, os, sys; json.dump({k: os.environ.get(k) for k in "
            "('GLOO_SOCKET_IFNAME', 'EXTRA')}, open(sys.argv[1], 'w'))")
    with LocalLauncher(load_scenario("100mbps"), 2, warn=None) as hosts:
        assert hosts.addr(1) == "127.0.0.1"
        p = hosts.spawn(1, [sys.executable, "-c", code, str(out)], {"EXTRA": "x"},
                        tmp_path / "w1.log")
        assert p.wait(timeout=30) == 0
        sleeper = hosts.spawn(0, ["sleep", "60"])
        probe = hosts.probe()
        rec = hosts.record()
    assert sleeper.poll() is not None  # killed on exit
    assert json.loads(out.read_text()) == {"GLOO_SOCKET_IFNAME": "lo", "EXTRA": "x"}
    assert rec["shaped"] is False and "UNSHAPED" in rec["warning"]
    assert probe[0].rate_mbit_achieved > 100
    # the same record as every launcher's, in the run record too
    assert probe[0].rate_mbit_configured is None and probe[0].host_limited is False
    assert rec["probe"] == [probe[0].to_dict()]
    assert list(rec["probe"][0]) == [f.name for f in dataclasses.fields(ProbeRecord)]
