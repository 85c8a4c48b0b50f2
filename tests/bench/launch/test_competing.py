"""The competing flows' and stragglers' events on the schedule's clock, pure: their
order, the record's arithmetic from counter reads and receiver bins, a launcher that caps
a host's CPU, and one that refuses what it does not run."""

import time

import pytest

from bench.launch.competing import (
    CounterRead,
    CpuChange,
    FlowEvent,
    competing_record,
    run_events,
)
from bench.launch.schedules import ScheduledLinks, merged_events
from bench.net.scenario import parse_scenario
from bench.net.tc import ShapingError


def _scenario(**extra):
    return parse_scenario({"description": "x", "layout": {"stages": 3},
                           "link": {"rate_mbit": 10}, **extra}, "x")


def test_events_come_in_time_order_stops_before_reads_before_starts():
    s = _scenario(competing=[{"src": 0, "dst": 1, "start_s": 0, "duration_s": 2},
                             {"src": 0, "dst": 1, "start_s": 2, "duration_s": 1},
                             {"src": 1, "dst": 2, "start_s": 1, "duration_s": 1}],
                  stragglers=[{"host": 2, "factor": 2, "start_s": 2, "duration_s": 1}])
    got = [(type(e).__name__, e.t_s) + ((e.flow, e.start) if isinstance(e, FlowEvent) else
                                        (e.src, e.dst) if isinstance(e, CounterRead) else
                                        (e.host, e.factor)) for e in run_events(s, 3)]
    assert got == [("CounterRead", 0, 0, 1), ("FlowEvent", 0, 0, True),
                   ("CounterRead", 1, 1, 2), ("FlowEvent", 1, 2, True),
                   ("FlowEvent", 2, 0, False), ("FlowEvent", 2, 2, False),
                   ("CpuChange", 2, 2, 2.0), ("CounterRead", 2, 0, 1),
                   ("CounterRead", 2, 1, 2), ("FlowEvent", 2, 1, True),
                   ("FlowEvent", 3, 1, False), ("CpuChange", 3, 2, None),
                   ("CounterRead", 3, 0, 1)]
    # on two hosts only the flows and stragglers between them
    assert {e.flow for e in run_events(s, 2) if isinstance(e, FlowEvent)} == {0, 1}
    assert not [e for e in run_events(s, 2) if isinstance(e, CpuChange)]


def test_the_record_gives_each_interval_its_bytes_and_the_trainings_share():
    s = _scenario(competing=[{"src": 0, "dst": 1, "start_s": 1, "duration_s": 2},
                             {"src": 0, "dst": 1, "start_s": 1, "duration_s": 2}])
    readings = [{"src": 0, "dst": 1, "t_s": 1.0, "applied_s": 1.0, "bytes": 5_000,
                 "final": False},
                {"src": 0, "dst": 1, "t_s": 3.0, "applied_s": 3.0, "bytes": 2_105_000,
                 "final": False}]
    # each flow's receiver: 10 bins of 0.2 s from t = 1 s, 50 000 payload bytes each
    reply = {"t0_unix": 101.0, "bin_s": 0.2, "bytes": [50_000] * 10, "kernel_clock": True}
    block = competing_record(s, 2, readings, {0: reply, 1: reply}, started_unix=100.0,
                             framing=1.05)
    assert [f["bytes_received"] for f in block["flows"]] == [500_000, 500_000]
    assert block["flows"][0]["first_byte_s"] == 1.0 and block["flows"][0]["last_byte_s"] == 3.0
    assert block["flows"][0]["rate_mbit"] == pytest.approx(2.0)
    [row] = block["intervals"]
    assert (row["class_bytes"], row["competing_bytes"]) == (2_100_000, 1_000_000)
    assert row["training_bytes"] == 2_100_000 - 1_050_000
    assert row["training_share"] == pytest.approx(0.5) and row["cut_at_s"] is None
    # the run stopped at 2 s, inside the interval: the final read ends it
    cut = [readings[0], {**readings[1], "t_s": 2.0, "applied_s": 2.0, "final": True}]
    [row] = competing_record(s, 2, cut, {0: reply, 1: reply}, 100.0, 1.05)["intervals"]
    assert row["cut_at_s"] == 2.0 and row["competing_bytes"] == 500_000
    # an interval whose reads failed is kept, with nothing measured
    empty = competing_record(s, 2, [], {}, started_unix=100.0, framing=1.05)
    assert empty["intervals"][0]["training_share"] is None
    assert empty["flows"][0]["ran"] is False


class CpuLauncher(ScheduledLinks):
    """A launcher that caps CPUs (recorded) and runs no flows."""

    name = "cpu-only"
    during_run = frozenset({"stragglers"})

    def __init__(self, scenario):
        self.scenario, self.n_hosts, self.mechanisms = scenario, 3, {"rate": "htb"}
        self.caps: list[tuple[int, float | None]] = []

    def _set_cpu(self, host, factor):
        self.caps.append((host, factor))
        return f"host {host} factor {factor}"

    def _cpu_mechanism(self):
        return "a list"


def test_a_cap_still_on_when_the_run_stops_is_lifted_and_recorded():
    s = _scenario(stragglers=[{"host": 1, "factor": 3, "start_s": 0.1, "duration_s": 60}])
    hosts = CpuLauncher(s)
    hosts.check_schedule()
    hosts.start_schedule()
    time.sleep(0.3)
    hosts.stop_schedule()
    assert hosts.caps == [(1, 3.0), (1, None)]
    block = hosts.schedule_record()["stragglers"]
    assert [(c["factor"], c["t_s"] < 1) for c in block["applied"]] == [(3.0, True), (None, True)]
    assert block["applied"][0]["applied_s"] >= 0.1 and block["mechanism"] == "a list"


def test_a_launcher_refuses_flows_it_does_not_run():
    s = _scenario(competing=[{"src": 0, "dst": 1, "start_s": 0, "duration_s": 1}])
    with pytest.raises(ShapingError, match="cpu-only launcher does not run competing"):
        CpuLauncher(s).check_schedule()


def test_link_changes_and_the_other_events_share_one_stream():
    s = _scenario(link={"rate_mbit": 10, "schedule": {"phases": [
        {"duration_s": 1, "rate_mbit": 5}, {"duration_s": 1}]}},
        stragglers=[{"host": 0, "factor": 2, "start_s": 1, "duration_s": 1}])
    kinds = [(e.t_s, type(e).__name__) for e in merged_events(s, 2)]
    assert kinds == [(0, "LinkChange"), (0, "LinkChange"), (1, "LinkChange"),
                     (1, "LinkChange"), (1, "CpuChange"), (2, "CpuChange")]
