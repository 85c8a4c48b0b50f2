"""The netns shaping plan (bench.launch.netns.shaping): one path lifted and restored."""

import pytest

from bench.launch.netns.names import TopologyNames
from bench.launch.netns.shaping import plan_shaping
from bench.net.scenario import parse_scenario
from bench.net.tc import UNLIMITED_BIT, burst_bytes


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
