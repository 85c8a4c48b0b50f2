"""The multi-host plan (bench.launch.export.multihost): per host its tc commands, launch
command and environment."""

import pytest

from bench.launch.export.multihost import plan_hosts
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
