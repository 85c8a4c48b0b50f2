"""The probe body every launcher shares (bench.launch.probing): a plan for every link, the
links probed by default, a short link measured once more."""

from __future__ import annotations

import dataclasses

import pytest

from bench.launch.probing import default_probe_links, probe_each
from bench.net.placement import PlacementError
from bench.net.probe import plan_probe
from bench.net.scenario import parse_scenario


def scenario(stages, replicas=1, rate_mbit=100, delay_ms=0.0):
    raw = {"description": "hand-made", "layout": {"stages": stages, "replicas": replicas},
           "link": {"rate_mbit": rate_mbit, "delay_ms": delay_ms}}
    return parse_scenario(raw, "hand")


def test_probe_each_plans_every_link_from_its_rate_and_round_trip():
    s = scenario(2, rate_mbit=100, delay_ms=100.0)
    plans = []

    def measure(src, dst, plan):
        plans.append(plan)
        return {"rate_mbit": 50.0, "rate_mbit_first_to_last": 40.0, "rtt_ms": 200.0,
                "rtt_ms_min": 200.0, "bytes": plan.bulk_bytes}

    lifted = []
    (r,) = probe_each(s, [(0, 1)], measure=measure,
                      lift_limits=lambda a, b, up: lifted.append(up), payload_ratio=1.0,
                      delay_dropped=False, tolerance=0.10, duration_s=1.0)
    # short of 100 Mbit/s twice: measured again with its limits lifted, the same plan unpaced
    plan = plan_probe(100.0, 200.0, 1.0)
    assert plans == [plan, plan, dataclasses.replace(plan, max_pacing_mbit=None)]
    assert lifted == [True, False]
    assert r.probe_bytes == plans[0].bulk_bytes and r.rtt_ms_configured == 200.0
    # a dropped delay: nothing to wait for
    plans.clear()
    probe_each(s, [(0, 1)], measure=measure, lift_limits=lambda a, b, up: None,
               payload_ratio=1.0, delay_dropped=True, tolerance=0.10, duration_s=1.0)
    assert plans[0] == plan_probe(100.0, 0.0, 1.0)


def test_default_probe_links_are_the_placement_of_the_scenarios_layout():
    # 2 stages x 2 replicas: the pipelines 0-1 and 2-3 and the data-parallel pairs, not the
    # idle middle link 1 <-> 2
    links = default_probe_links(scenario(2, 2), 4)
    assert links == [(0, 1), (1, 0), (2, 3), (3, 2), (0, 2), (2, 0), (1, 3), (3, 1)]
    assert default_probe_links(scenario(3), 3) == [(0, 1), (1, 0), (1, 2), (2, 1)]
    # fewer hosts up than the layout has: a pipeline over those; more: refused, both said
    assert default_probe_links(scenario(2, 2), 2) == [(0, 1), (1, 0)]
    with pytest.raises(PlacementError, match=r"needs 5 hosts; scenario 'hand' has 4"):
        default_probe_links(scenario(2, 2), 5)


@pytest.mark.parametrize("readings, achieved, ceiling", [
    ([8772.0, 9650.0], 9650.0, None),  # one slow reading: the second one stands
    ([4000.0, 4010.0, 18651.0], 4010.0, 18651.0),  # short twice: the ceiling says "off"
])
def test_a_short_link_is_measured_once_more_before_its_ceiling(readings, achieved,
                                                                 ceiling):
    s = scenario(2, rate_mbit=10_000)
    plans, left = [], list(readings)

    def measure(src, dst, plan):
        plans.append(plan)
        return {"rate_mbit": left.pop(0), "rate_mbit_first_to_last": 1.0, "rtt_ms": 0.1,
                "rtt_ms_min": 0.1, "bytes": plan.bulk_bytes}

    (r,) = probe_each(s, [(0, 1)], measure=measure, lift_limits=lambda a, b, up: None,
                      payload_ratio=1.0, delay_dropped=False, tolerance=0.10,
                      duration_s=1.0)
    plan = plan_probe(10_000.0, 0.0, 1.0)
    # shaped, shaped again with the same plan, then (still short) unpaced, limits lifted
    want = [plan, plan] + ([dataclasses.replace(plan, max_pacing_mbit=None)] if ceiling else [])
    assert plans == want
    assert (r.rate_mbit_achieved, r.rate_mbit_ceiling, r.host_limited) == (
        achieved, ceiling, False)
