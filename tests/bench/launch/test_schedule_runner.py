"""The launcher core's schedule runner, pure: the changes of every link on one clock, in
time order; a launcher that gives only its plan and executor; the record; a failing
change; a delay-line schedule a launcher cannot apply; the time-resolved probe's
per-phase reading."""

import time

import pytest
from launch_helpers import FakeLauncher

from bench.launch.schedules import (
    ScheduleFailed,
    link_changes,
    schedule_windows,
)
from bench.net.probe import PhaseRateError, check_phases, phase_rates, resume_s
from bench.net.scenario import parse_scenario
from bench.net.tc import ShapingError


def _scenario(phases, **link):
    return parse_scenario({"description": "x", "layout": {"stages": 2},
                           "link": {"rate_mbit": 50, **link}, "links": [
                               {"src": 0, "dst": 1, "schedule": {"phases": phases}}]}, "x")


def test_changes_of_every_link_come_in_time_order_knowing_outages():
    s = parse_scenario({"description": "x", "layout": {"stages": 2}, "link": {"rate_mbit": 50},
                        "links": [{"src": 0, "dst": 1, "schedule": {"phases": [
                            {"duration_s": 1}, {"duration_s": 2, "down": True},
                            {"duration_s": 1}]}},
                            {"src": 1, "dst": 0, "schedule": {"loop": True, "phases": [
                                {"duration_s": 1.5, "rate_mbit": 5}]}}]}, "x")
    changes = [(c.t_s, c.src, c.dst, c.index, c.down, c.was_down)
               for c in link_changes(s, 2, until_s=4)]
    assert changes == [(0, 0, 1, 0, False, False), (0, 1, 0, 0, False, False),
                       (1, 0, 1, 1, True, False), (1.5, 1, 0, 0, False, False),
                       (3, 0, 1, 2, False, True), (3, 1, 0, 0, False, False)]


def test_a_launcher_gives_its_executor_and_the_runner_records_each_change():
    s = _scenario([{"duration_s": 0.2, "rate_mbit": 20}, {"duration_s": 0.2, "down": True},
                   {"duration_s": 5, "rate_mbit": 30}])
    hosts = FakeLauncher(s)
    assert hosts.schedule_record()["run"] is None
    hosts.start_schedule()
    time.sleep(0.7)
    run = hosts.stop_schedule()
    assert [(c["phase"], c["down"]) for c in run["changes"]] == \
        [(0, False), (1, True), (2, False), (-1, False)]
    for c, planned in zip(run["changes"][:3], (0.0, 0.2, 0.4), strict=True):
        assert c["t_s"] == pytest.approx(planned) and 0 <= c["applied_s"] - planned < 0.15
    assert all(i == 0 for i, _ in hosts.ran)  # host 0's egress carries link 0 -> 1
    assert "blackhole" in run["changes"][1]["commands"][1]
    assert "30000000bit" in run["changes"][2]["commands"][0]
    # back to the link's own 50 Mbit/s when stopped
    assert "50000000bit" in run["changes"][3]["commands"][0]
    record = hosts.schedule_record()
    assert record["run"] == run and record["links"][0]["src"] == 0
    assert record["links"][0]["phases"][1]["down"] is True


def test_a_failing_change_stops_the_runner_and_is_raised_naming_the_link():
    hosts = FakeLauncher(_scenario([{"duration_s": 0.1}, {"duration_s": 0.1, "down": True},
                                    {"duration_s": 1}]), fail_on="blackhole")
    hosts.start_schedule()
    time.sleep(0.4)
    with pytest.raises(ScheduleFailed, match=r"link 0 -> 1, phase 1 at 0.1 s: CommandError"):
        hosts.stop_schedule()
    assert "error" in hosts.schedule_record()["run"]["changes"][1]


def test_a_delay_schedule_on_a_delay_line_without_a_control_channel_is_refused():
    hosts = FakeLauncher(_scenario([{"duration_s": 1, "delay_ms": 30}], delay_ms=10))
    hosts.mechanisms = {**hosts.mechanisms, "delay": "delayline"}
    with pytest.raises(ShapingError, match="fake launcher's delay line cannot change"):
        hosts.check_schedule()
    hosts.mechanisms = {**hosts.mechanisms, "delay": "netem"}
    hosts.check_schedule()  # netem changes with the tc commands


def test_phase_rates_read_a_stream_phase_by_phase():
    s = _scenario([{"duration_s": 2, "rate_mbit": 40}, {"duration_s": 1, "down": True},
                   {"duration_s": 2, "rate_mbit": 10}])
    windows = schedule_windows(s.link_spec(0, 1), 5.0)
    assert [(w.start_s, w.end_s, w.rate_mbit) for w in windows] == \
        [(0, 2, 40), (2, 3, None), (3, 5, 10)]
    capped = schedule_windows(s.link_spec(0, 1), 5.0, payload_ratio=0.5, cap_mbit=30)
    assert [w.rate_mbit for w in capped] == [15, None, 5]
    per_bin = {0: 40e6 / 8 * 0.1, 1: 0, 2: 10e6 / 8 * 0.1}
    bins = [int(per_bin[0 if k < 20 else 1 if k < 33 else 2]) for k in range(50)]
    reply = {"t0_unix": 1000.05, "bin_s": 0.1, "bytes": bins}
    rates = phase_rates(reply, 1000.0, windows, settle_s=0.5)
    assert [round(r.rate_mbit_achieved, 6) for r in rates] == [40, 0, 10]
    check_phases(rates, tolerance=0.05)
    assert resume_s(reply, 1000.0, up_at_s=3.0) == pytest.approx(0.35)
    slow = [*rates[:2], type(rates[2])(2, 3, 5, 12.0, 10.0, 1.0)]
    with pytest.raises(PhaseRateError, match=r"phase 2 \(3-5 s\) carried 10.00 Mbit/s, "
                                             r"expected 12"):
        check_phases(slow, tolerance=0.05)
