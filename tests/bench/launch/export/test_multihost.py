"""The multi-host plan (bench.launch.export.multihost): per host its tc commands, launch
command and environment."""

import pytest

from bench.launch.export.multihost import hostfile_hosts, main, plan_hosts
from bench.net.scenario import load_scenario
from bench.net.tc import ShapingError


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


def test_each_host_is_shaped_on_its_own_interface_from_the_hostfile(tmp_path, capsys):
    hostfile = tmp_path / "hosts.txt"
    hostfile.write_text("10.0.0.1 interface=ens5\n10.0.0.2 interface=eth1\n")
    assert hostfile_hosts(hostfile) == (["10.0.0.1", "10.0.0.2"], ["ens5", "eth1"])
    assert hostfile_hosts(hostfile, "ib0") == (["10.0.0.1", "10.0.0.2"], ["ib0", "ib0"])
    plans, _ = plan_hosts(load_scenario("100mbps"), ["10.0.0.1", "10.0.0.2"], ["ens5", "eth1"],
                          [])
    for plan, dev in zip(plans, ["ens5", "eth1"], strict=True):
        assert all(dev in a for a in plan.setup) and f"tc qdisc del dev {dev} root" in \
            plan.render()
        # its workers: its interface, and no caller's folder on their path
        assert dict(plan.env) == {"GLOO_SOCKET_IFNAME": dev, "NCCL_SOCKET_IFNAME": dev,
                                  "PYTHONSAFEPATH": "1"}
    main(["--scenario", "100mbps", "--hostfile", str(hostfile)])
    text = capsys.readouterr().out
    assert "tc qdisc add dev ens5 root" in text and "tc qdisc add dev eth1 root" in text
    main(["--scenario", "100mbps", "--hostfile", str(hostfile), "--iface", "ib0"])
    text = capsys.readouterr().out
    assert "dev ib0" in text and "ens5" not in text and "eth1" not in text
    with pytest.raises(ValueError, match=r"iface: expected one interface per host \(2\)"):
        plan_hosts(load_scenario("100mbps"), ["10.0.0.1", "10.0.0.2"], ["ens5"], [])


def test_the_hosts_need_an_interface_and_a_hostfile_host_one_slot(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--scenario", "100mbps", "--hosts", "10.0.0.1,10.0.0.2"])
    assert "--hosts needs --iface" in capsys.readouterr().err
    hostfile = tmp_path / "hosts.txt"
    hostfile.write_text("10.0.0.1 slots=2\n")
    with pytest.raises(ValueError, match=r"one rank per host; these hosts have more slots: "
                                         r"10\.0\.0\.1 \(slots=2\)"):
        hostfile_hosts(hostfile)
