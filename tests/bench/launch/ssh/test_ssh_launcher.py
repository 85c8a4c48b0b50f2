"""The SSH launcher against real sshd servers in namespaces (conftest.py): the checks
before anything is changed, the shaping on each host's interface and its removal, the
probe between the hosts, and the real links with --no-shaping."""

from __future__ import annotations

import json

import pytest

from bench.launch.ssh.checks import HostCheckError
from bench.launch.ssh.hostside import HOST_RECORD_ROOT
from bench.launch.ssh.launcher import SshLauncher
from bench.net.scenario import load_scenario, with_link
from bench.net.tc import ShapingError

pytestmark = pytest.mark.netns


def _launcher(sshd_hosts, hostfile=None, **kw) -> SshLauncher:
    return SshLauncher(load_scenario("100mbps"), sshd_hosts.n, run_id="test",
                       state_dir=sshd_hosts.results / ".launcher",
                       hostfile=hostfile or sshd_hosts.hostfile, **kw)


def _nothing_left(sshd_hosts) -> None:
    for i in range(sshd_hosts.n):
        assert sshd_hosts.qdiscs(i) == []
        assert sshd_hosts.run(i, ["ls", str(HOST_RECORD_ROOT)], check=False).stdout == ""
    launcher_dir = sshd_hosts.results / ".launcher"
    assert not launcher_dir.exists() or list(launcher_dir.glob("aq*.json")) == []


def test_hosts_that_fail_the_checks_are_named_before_anything_changes(sshd_hosts, tmp_path):
    lines = sshd_hosts.hostfile.read_text().splitlines()
    # host 1 names an interface it does not have; a third host does not answer at all
    lines[2] = lines[2].replace(f"interface={sshd_hosts.dev(1)}", "interface=nodev0")
    absent = f"198.18.{sshd_hosts.subnet}.99"
    lines.append(lines[1].replace(sshd_hosts.addr(0), absent))
    bad = tmp_path / "bad-hosts"
    bad.write_text("\n".join(lines) + "\n")
    hosts = SshLauncher(load_scenario("100mbps"), 3, run_id="test", hostfile=bad,
                        state_dir=sshd_hosts.results / ".launcher")
    with pytest.raises(HostCheckError) as err:
        hosts.__enter__()
    text = str(err.value)
    assert f"root@{sshd_hosts.addr(1)}: has no interface nodev0" in text
    assert f"root@{absent}: does not answer over SSH" in text
    assert f"root@{sshd_hosts.addr(0)}" not in text  # host 0 is fine
    _nothing_left(sshd_hosts)


def test_delay_without_netem_is_refused_naming_the_hosts(sshd_hosts):
    delayed = with_link(load_scenario("100mbps"), delay_ms=5.0)
    hosts = SshLauncher(delayed, sshd_hosts.n, run_id="test", hostfile=sshd_hosts.hostfile,
                        state_dir=sshd_hosts.results / ".launcher")
    has_netem = sshd_hosts.run(0, ["unshare", "--net", "sh", "-c", "ip link set lo up && "
                                   "tc qdisc add dev lo root netem delay 1ms"],
                               check=False).returncode == 0
    if has_netem:  # a kernel with netem delivers the delay instead
        with hosts:
            assert hosts.mechanisms["delay"] == "netem"
        return
    with pytest.raises(ShapingError, match=f"no netem qdisc: root@{sshd_hosts.addr(0)}, "
                                           f"root@{sshd_hosts.addr(1)}.*delay line"):
        hosts.__enter__()
    _nothing_left(sshd_hosts)


def test_each_interface_is_shaped_recorded_probed_and_restored(sshd_hosts):
    with _launcher(sshd_hosts) as hosts:
        state = json.loads(hosts.state_path.read_text())
        assert state["launcher"] == "ssh" and len(state["hosts"]) == 2
        for i in range(2):
            # recorded on this machine and on the host before it was made
            removal = state["hosts"][i]["removal"]
            assert removal == [["tc", "qdisc", "del", "dev", sshd_hosts.dev(i), "root"]]
            on_host = json.loads(sshd_hosts.run(i, ["cat", f"{hosts.record_dir(i)}/state.json"])
                                 .stdout)
            assert on_host["removal"] == removal
            assert any(" htb 1: root" in q for q in sshd_hosts.qdiscs(i))
        records = hosts.probe()
        assert hosts.addr(1) == sshd_hosts.addr(1)
        assert hosts.worker_env(1)["GLOO_SOCKET_IFNAME"] == sshd_hosts.dev(1)
        record = hosts.record()
    assert {(r.src, r.dst) for r in records} == {(0, 1), (1, 0)}
    for r in records:
        assert r.rate_mbit_configured == 100.0
        assert abs(r.rate_mbit_achieved - 100.0) <= 5.0, r
    assert record["shaped"] is True and record["shaping"]["rate"].startswith("htb")
    assert [h["addr"] for h in record["hosts"]] == [sshd_hosts.addr(0), sshd_hosts.addr(1)]
    assert record["probe"] == [r.to_dict() for r in records]
    _nothing_left(sshd_hosts)


def test_no_shaping_changes_nothing_and_records_the_real_links(sshd_hosts):
    with _launcher(sshd_hosts, shaping=False) as hosts:
        assert [sshd_hosts.qdiscs(i) for i in range(2)] == [[], []]
        records = hosts.probe()
        record = hosts.record()
    assert record["shaped"] is False
    assert all(m.startswith("none (--no-shaping") for m in record["shaping"].values())
    for r in records:
        assert r.rate_mbit_configured is None and r.rate_mbit_achieved > 100.0
    _nothing_left(sshd_hosts)
