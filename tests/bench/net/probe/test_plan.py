"""The probe's plan (bench.net.probe.plan): bytes, steady window and timeouts from a link's
rate and round trip, and the bound on rates it can verify (pure logic;
tests/bench/launch/netns/test_probe.py measures real links with these plans)."""

from __future__ import annotations

import math

import pytest

from bench.net.probe import MAX_TRANSFER_S, ProbePlan, ProbePlanError, plan_probe, slow_start_rtts
from bench.net.scenario import LinkSpec, ScenarioError, parse_scenario
from bench.net.scenario_file import MAX_DELAY_MS, MIN_RATE_MBIT
from bench.net.tc import burst_bytes, payload_factor

SEGMENT = 1448


def test_short_link_is_about_duration_s_at_its_rate():
    p = plan_probe(100.0, 0.0, 1.0)
    assert p.bulk_bytes == 12_500_000  # 100 Mbit/s for 1 s
    assert p.slow_start_rtts == 0  # the initial window holds the (zero) delay's product
    # two buckets of the tc rate (payload rate x frames / payload): 2 ms each
    assert p.steady_from_bytes == 2 * burst_bytes(100e6 * payload_factor())
    assert p.planned_s == pytest.approx(1.0)
    assert p.max_pacing_mbit == 200.0


def test_long_rtt_probes_longer_and_starts_the_steady_window_after_slow_start():
    short, long = plan_probe(100.0, 0.0), plan_probe(100.0, 200.0)
    # 100 Mbit/s x 200 ms = 2.5 MB = 1726.5 segments = 172.7 initial windows: 8 doublings
    # (2**8 = 256 >= 172.7), then 3 more round trips
    assert long.slow_start_rtts == 8 + 3
    # the doubling rounds carry 10 segments x (1 + 2 + ... + 128) (none reaches 2.5 MB),
    # the 3 more a bandwidth-delay product each
    ramp = 10 * SEGMENT * 255 + 3 * 2_500_000
    assert long.steady_from_bytes == ramp + short.steady_from_bytes
    assert long.bulk_bytes >= 3 * long.steady_from_bytes - 3  # steady window >= 2/3
    assert long.planned_s > 5 * short.planned_s
    assert long.planned_s == pytest.approx(11 * 0.2 + 11 * 0.2
                                           + (long.bulk_bytes - ramp) / 12.5e6)
    # a longer round trip only ever plans more
    assert plan_probe(100.0, 476.0).steady_from_bytes > long.steady_from_bytes
    assert plan_probe(100.0, 476.0).planned_s > long.planned_s


def test_slow_start_rounds_are_log2_of_the_window_over_the_initial_one():
    assert slow_start_rtts(100.0, 1.0) == 0  # 8.6 segments: inside the initial window
    assert slow_start_rtts(100.0, 2.0) == 1 + 3  # 17.3 segments: one doubling
    assert slow_start_rtts(1000.0, 476.0) == math.ceil(math.log2(59.5e6 / SEGMENT / 10)) + 3


def test_low_rate_waits_for_the_bucket_and_the_timeout_covers_it():
    p = plan_probe(0.2, 0.0, 1.0)
    bucket = burst_bytes(0.2e6 * payload_factor())
    assert bucket == 16 * 1024  # the floor: 2 ms at 0.2 Mbit/s is 52 bytes
    assert p.steady_from_bytes == 2 * bucket
    # 1 s at 0.2 Mbit/s (25 kB) is too short: 100 segments after the buckets
    assert p.bulk_bytes == 2 * bucket + 100 * SEGMENT
    assert p.planned_s == pytest.approx(p.bulk_bytes / 25_000)
    assert p.timeout_s >= 2 * p.planned_s
    assert p.process_timeout_s > p.timeout_s


def test_unshaped_link_sends_the_byte_cap_uncapped():
    p = plan_probe(None, 0.0)
    assert p.bulk_bytes == 256 << 20
    assert p.max_pacing_mbit is None
    assert "--max-pacing-mbit" not in p.client_args()
    assert p.timeout_s >= MAX_TRANSFER_S


def test_the_transfer_is_capped_and_a_plan_that_cannot_fit_is_refused():
    p = plan_probe(0.01, 0.0)
    # 60 s at 10 kbit/s = 75 kB: less than the 100 segments asked for, more than 10
    assert p.bulk_bytes == 75_000
    assert p.planned_s == pytest.approx(MAX_TRANSFER_S)
    # two 16 KiB buckets and 10 segments need 6.3 kbit/s over 60 s
    floor_mbit = (2 * 16384 + 10 * SEGMENT) * 8 / MAX_TRANSFER_S / 1e6
    plan_probe(floor_mbit * 1.001, 0.0)
    with pytest.raises(ProbePlanError, match=r"0\.006 Mbit/s link with a 0 ms round trip.*"
                                             r"do not fit the 60 s"):
        plan_probe(0.006, 0.0)
    # a slow link with a long round trip: its slow start alone outlasts the cap
    with pytest.raises(ProbePlanError, match=r"0\.05 Mbit/s link with a 20000 ms round trip"):
        plan_probe(0.05, 2 * MAX_DELAY_MS)


def test_the_validation_bound_is_a_rate_the_probe_plans():
    # up to the longest round trip its initial window covers, and above both tc's bound
    # (0.5 kbit/s) and the plan's floor (6.3 kbit/s); the wording: tests/bench/net/test_scenario.py
    plan_probe(MIN_RATE_MBIT, 0.0)
    plan_probe(MIN_RATE_MBIT, 10 * SEGMENT * 8 / (MIN_RATE_MBIT * 1e6) * 1e3)
    assert LinkSpec(rate_mbit=MIN_RATE_MBIT).rate_mbit == MIN_RATE_MBIT
    with pytest.raises(ScenarioError, match=r"x\.yaml: field 'link\.rate_mbit': .*50 kbit/s"
                                            r".*got 0\.01"):
        parse_scenario({"description": "d", "layout": {"stages": 2},
                        "link": {"rate_mbit": 0.01}}, "x", source="x.yaml")


def test_plan_checks_its_fields_and_its_arguments():
    with pytest.raises(ValueError, match=r"ProbePlan.bulk_bytes: .*10 segments .* got 1000"):
        ProbePlan(1000, 0, 0, 1.0, 30.0, None)
    with pytest.raises(ValueError, match=r"ProbePlan.timeout_s: expected > 0, got 0"):
        ProbePlan(100_000, 0, 0, 1.0, 0, None)
    with pytest.raises(ValueError, match=r"plan_probe: .*rtt_ms=-1"):
        plan_probe(10.0, -1)
