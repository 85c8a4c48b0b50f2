"""Timelines of cells on scheduled links, on hand-made records whose answers are worked
out by hand: each applied phase's span, each step's place on the schedule's clock, the
per-phase throughput, the time to a number of steps under a schedule, and the figure."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from report_fixtures import fixture_record, launcher_block, outage_block, scheduled_link

from bench.report.summary import MEDIAN_STEP, OVER_TIME, summarize_cell
from bench.report.tables import compute_bound_note
from bench.report.timeline import (
    event_spans,
    has_events,
    has_schedule,
    links_change,
    phase_spans,
    phase_step_times,
    phase_table,
    phases_visited,
    plot_timeline,
    scheduled_rates,
    step_times,
    time_under_schedule,
)

T0 = 1_700_000_000.0


def _change(phase, applied_s, *, lap=0, rate=None, down=False, src=0, dst=1):
    return {"src": src, "dst": dst, "phase": phase, "lap": lap, "t_s": applied_s,
            "applied_s": applied_s, "done_s": applied_s + 0.01, "rate_mbit": rate,
            "delay_ms": None, "jitter_ms": None, "loss_pct": None, "down": down,
            "commands": []}


def _record(blocks: dict):
    """A cell dyn__fp32 whose meta.json has `blocks` (the fixture's others)."""
    return fixture_record(Path("results/dyn/dyn__fp32"), cell={"name": "dyn__fp32"}, **blocks)


def _blocks(changes, stopped_s=9.0):
    return {"scenario": {"link": {"rate_mbit": 100.0}}, "schedule": outage_block(),
            "launcher": launcher_block(
                [scheduled_link(0, 1), scheduled_link(1, 0)],
                {"started_unix": T0, "stopped_unix": T0 + stopped_s, "error": None,
                 "changes": changes})}


def _meta(changes, stopped_s=9.0):
    return _record(_blocks(changes, stopped_s))


# both directions: 100 Mbit/s for 3 s, 25 for 3 s, down for 1 s, then 100 again (lap 1)
CHANGES = [c for src, dst in ((0, 1), (1, 0)) for c in (
    _change(0, 0.0, src=src, dst=dst), _change(1, 3.0, rate=25.0, src=src, dst=dst),
    _change(2, 6.0, down=True, src=src, dst=dst),
    _change(0, 7.0, lap=1, src=src, dst=dst), _change(-1, 9.0, src=src, dst=dst))]
# a competing flow's and a straggler's entries on the same clock are not link phases
CHANGES += [{"t_s": 1.0, "kind": "flow_start", "flow": 0, "applied_s": 1.0},
            {"t_s": 2.0, "kind": "cpu", "host": 1, "factor": 4.0, "applied_s": 2.0}]


def _frame(steps):
    """Tidy metrics of two ranks: (end_s, wall_s, warmup) per step; rank 1 ends 0.05 s
    later and its step takes 0.05 s longer (the slowest rank decides)."""
    rows = []
    for k, (end_s, wall_s, warmup) in enumerate(steps):
        for rank in (0, 1):
            rows.append({"kind": "train", "step": k, "rank": rank, "stage": rank,
                         "warmup": warmup, "samples": 64,
                         "end_unix": T0 + end_s + 0.05 * rank,
                         "step_time_s": wall_s + 0.05 * rank})
    rows.append({"kind": "eval", "step": len(steps), "rank": 1, "stage": 1, "warmup": False,
                 "samples": 128, "end_unix": T0 + 9.0, "step_time_s": None})
    return pd.DataFrame(rows)


STEPS = [(0.5, 0.45, True), (1.0, 0.45, False), (1.5, 0.45, False), (2.0, 0.45, False),
         (3.95, 1.95, False), (5.95, 1.95, False),    # midpoints 3.0 and 5.0: phase 1
         (7.5, 1.45, False),                           # midpoint 6.8: down
         (8.0, 0.45, False)]                           # lap 1, phase 0


def test_phase_spans_follow_each_links_applied_changes():
    spans = phase_spans(_meta(CHANGES))
    link = spans[(spans["src"] == 0) & (spans["dst"] == 1)]
    assert list(link["phase"]) == [0, 1, 2, 0]
    assert list(link["start_s"]) == [0.0, 3.0, 6.0, 7.0]
    assert list(link["end_s"]) == [3.0, 6.0, 7.0, 9.0]  # the restoring change ends the last
    assert list(link["rate_mbit"]) == [100.0, 25.0, 100.0, 100.0]  # unset: the link's own
    assert list(link["down"]) == [False, False, True, False]
    assert len(spans) == 8


def test_steps_take_the_slowest_rank_on_the_schedules_clock():
    steps = step_times(_frame(STEPS), _meta(CHANGES))
    assert list(steps["step"]) == list(range(8))
    assert steps.loc[4, "end_s"] == pytest.approx(4.0)
    assert steps.loc[4, "wall_s"] == pytest.approx(2.0)
    assert steps.loc[4, "start_s"] == pytest.approx(2.0)
    assert steps.loc[0, "warmup"] and not steps.loc[1, "warmup"]
    assert steps["samples"].tolist() == [64] * 8  # stage 0's only


def test_per_phase_throughput_and_time():
    steps = step_times(_frame(STEPS), _meta(CHANGES))
    table = phase_table(steps, phase_spans(_meta(CHANGES))).set_index("phase")
    assert table["steps"].tolist() == [4, 2, 1]  # the warm-up step is left out
    assert table.loc[0, "time_s"] == pytest.approx(3.0 + 2.0)  # both laps
    assert table.loc[0, "step_time_s"] == pytest.approx(0.5)
    assert table.loc[0, "samples_s"] == pytest.approx(64 / 0.5)
    assert table.loc[1, "rate_mbit"] == 25.0
    assert table.loc[1, "samples_s"] == pytest.approx(64 / 2.0)
    assert table.loc[2, "down"] and table.loc[2, "step_time_s"] == pytest.approx(1.5)


def test_a_cell_without_a_schedule_or_without_stamps():
    assert not has_schedule(_record({}))
    assert has_schedule(_meta(CHANGES))
    frame = _frame(STEPS)
    frame["end_unix"] = None
    with pytest.raises(ValueError, match="dyn__fp32: its metrics have no end_unix"):
        step_times(frame, _meta(CHANGES))


@pytest.mark.parametrize(("steps", "phases", "loop", "expected"), [
    (10, [(5.0, 1.0)], False, 10.0),                      # one phase, then it lasts on
    (6, [(3.0, 1.0), (3.0, 3.0)], False, 3.0 + 3.0 * 3),  # 3 fast, then 3 at 3 s each
    (5, [(3.0, 1.0), (1.0, math.inf)], True, 3 + 1 + 2),  # down 1 s every lap
    (7, [(3.0, 1.0), (1.0, math.inf)], True, 2 * 4 + 1),  # two whole laps, then 1 step
    (6, [(3.0, 1.0), (1.0, math.inf)], True, 4 + 3),      # ends exactly on a lap's fast end
    (3, [(2.0, 1.0), (1.0, math.inf)], False, math.inf),  # stays down
    (0, [(1.0, 1.0)], True, 0.0),
])
def test_time_under_schedule(steps, phases, loop, expected):
    assert time_under_schedule(steps, phases, loop) == pytest.approx(expected)


def test_the_timeline_figure_is_written(tmp_path):
    meta = _meta(CHANGES)
    path = plot_timeline(step_times(_frame(STEPS), meta), phase_spans(meta),
                         tmp_path / "timeline.png", title="dyn fp32")
    assert path.is_file() and path.stat().st_size > 10_000


@pytest.mark.parametrize(("steps", "phases", "loop", "start", "expected"), [
    (2, [(3.0, 1.0), (3.0, 3.0)], False, 2.0, 3.0 + 3.0),   # 1 fast step left, 1 slow one
    (1, [(3.0, 1.0), (3.0, 3.0)], False, 7.0, 10.0),        # past the end: the last lasts
    (2, [(3.0, 1.0), (1.0, math.inf)], True, 7.5, 10.0),    # mid-lap while down, then fast
    (2, [(3.0, 1.0), (1.0, math.inf)], True, 6.5, 9.5),     # 0.5 fast, down 1 s, 1.5 fast
    (7, [(3.0, 1.0), (1.0, math.inf)], True, 4.0, 4 + 2 * 4 + 1),  # laps from a lap's start
    (0, [(1.0, 1.0)], True, 2.5, 2.5),
])
def test_time_under_schedule_from_a_later_start(steps, phases, loop, start, expected):
    assert time_under_schedule(steps, phases, loop, start_s=start) == pytest.approx(expected)


def test_phase_step_times_take_the_schedules_durations():
    blocks = _blocks(CHANGES)
    phases = [(3.0, False), (3.0, False), (1.0, True), (5.0, False)]
    blocks["launcher"]["schedule"]["links"] = [
        scheduled_link(1, 0, phases[:1]),
        scheduled_link(0, 1, phases, loop=True)]  # the first link: 0 -> 1
    meta = _record(blocks)
    table = phase_table(step_times(_frame(STEPS), meta), phase_spans(meta))
    loop, timed = phase_step_times(meta, table)
    assert loop is True
    assert [d for d, _ in timed] == [3.0, 3.0, 1.0, 5.0]
    assert timed[0][1] == pytest.approx(0.5) and timed[1][1] == pytest.approx(2.0)
    assert timed[2][1] == math.inf  # down: no step ends there
    assert math.isnan(timed[3][1])  # never reached


@pytest.mark.parametrize(("t0", "t1", "loop", "expected"), [
    (0.0, 2.0, True, {0}),
    (2.0, 7.5, True, {0, 1, 2}),
    (6.5, 11.0, True, {2, 0, 1}),         # into the next lap
    (0.0, 30.0, True, {0, 1, 2}),         # a whole lap
    (5.0, 20.0, False, {1, 2}),           # after the end the last phase lasts
])
def test_phases_visited(t0, t1, loop, expected):
    assert phases_visited([(3.0, 1.0), (3.0, 2.0), (1.0, 0.0)], loop, t0, t1) == expected


def _event_blocks():
    """Two flows on 0 -> 1 from 2 s to 6 s, host 1 capped 2x from 4 s to 8 s; the run
    stops at 9 s, when the launcher's own stop and lift come too."""
    ev = [{"t_s": 2.0, "kind": "flow_start", "flow": 0, "applied_s": 2.01},
          {"t_s": 2.0, "kind": "flow_start", "flow": 1, "applied_s": 2.03},
          {"t_s": 4.0, "kind": "cpu", "host": 1, "factor": 2.0, "applied_s": 4.02},
          {"t_s": 4.0, "kind": "counter", "src": 0, "dst": 1, "applied_s": 4.02},
          {"t_s": 6.0, "kind": "flow_stop", "flow": 0, "applied_s": 6.0},
          {"t_s": 6.0, "kind": "flow_stop", "flow": 1, "applied_s": 6.01},
          {"t_s": 8.0, "kind": "cpu", "host": 1, "factor": None, "applied_s": 8.0},
          {"t_s": 8.99, "kind": "cpu", "host": 1, "factor": None, "applied_s": 8.99}]
    flow = {"src": 0, "dst": 1, "start_s": 2.0, "duration_s": 4.0, "max_rate_mbit": None}
    return {"scenario": {"link": {"rate_mbit": 20.0}, "competing": [flow, flow],
                         "stragglers": [{"host": 1, "factor": 2.0, "start_s": 4.0,
                                         "duration_s": 4.0}]},
            "launcher": launcher_block([], {"started_unix": T0, "stopped_unix": T0 + 9.0,
                                            "error": None, "changes": ev})}


def _event_meta():
    return _record(_event_blocks())


def test_competing_flows_and_a_straggler_give_stretches():
    meta = _event_meta()
    assert has_events(meta) and not has_schedule(meta)
    spans = event_spans(meta)
    assert spans["from_s"].tolist() == [0.0, 2.0, 4.0, 6.0, 8.0]
    assert spans["start_s"].tolist() == pytest.approx([0.0, 2.03, 4.02, 6.01, 8.0])
    assert spans["end_s"].tolist() == pytest.approx([2.03, 4.02, 6.01, 8.0, 9.0])
    assert spans["what"].tolist() == [
        "training alone", "2 competing flows on 0 -> 1",
        "2 competing flows on 0 -> 1; host 1 2x slower", "host 1 2x slower", "training alone"]
    table = phase_table(step_times(_frame(STEPS), meta), spans)
    assert table["steps"].sum() == len([s for s in STEPS if not s[2]])
    assert table["rate_mbit"].tolist() == [20.0] * 5
    static = _record({**_event_blocks(), "scenario": {"link": {"rate_mbit": 20.0}}})
    assert not has_events(static)


def test_a_cells_outages_are_said_with_the_time_they_cost():
    from bench.report.timeline import _outage_lines

    blocks = _blocks(CHANGES)
    assert _outage_lines(_record(blocks)) == []
    blocks["schedule"] = {"outages": [{"src": 0, "dst": 1, "down_s": 6.0, "up_s": 7.0},
                                      {"src": 1, "dst": 0, "down_s": 6.0, "up_s": 7.0}],
                          "longest_outage_s": 1.0, "time_lost_s": 2.35,
                          "dist_timeout_s": 60.0, "survivable_outage_s": 15.0,
                          "changes_applied": 8}
    line = _outage_lines(_record(blocks))[0]
    assert line.startswith("Outages: 2 (2.0 s down in all, links 0 -> 1, 1 -> 0)")
    assert "2.4 s beyond the median step" in line and "up to 15 s" in line


def test_a_scheduled_links_rate_is_its_time_weighted_mean_and_slowest_phase():
    # 0 -> 1: 100 Mbit/s for 3 s, 25 for 3 s, down 1 s (0), 100 for 2 s
    rates = scheduled_rates(_meta(CHANGES))
    assert set(rates) == {(0, 1), (1, 0)}
    mean, slowest = rates[(0, 1)]
    assert mean == pytest.approx((100 * 3 + 25 * 3 + 0 * 1 + 100 * 2) / 9)
    assert slowest == 25.0
    assert scheduled_rates(_record({})) == {}
    assert links_change(_meta(CHANGES)) and not links_change(_record({}))


def test_a_cell_on_changing_links_headlines_samples_over_time():
    # measured steps 1..7 take 0.5, 0.5, 0.5, 2.0, 2.0, 1.5, 0.5 s (the slowest rank):
    # 7 x 64 samples in 7.5 s; the median step (0.5 s) would say 128 samples/s
    frame = _frame(STEPS).assign(
        tokens=64 * 128, loss=3.0, eval_loss=3.1, compute_s=0.1, comm_wait_s=0.1, compress_s=0.0,
        peak_rss_bytes=3e8,
        **{f"bytes_sent_{k}": 0 for k in ("total", "activation", "gradient", "dp")})
    over_time = summarize_cell(frame, links_changed=True)
    assert over_time["throughput_samples_s"] == pytest.approx(7 * 64 / 7.5, rel=0.01)
    assert over_time["throughput_tokens_s"] == pytest.approx(7 * 64 * 128 / 7.5, rel=0.01)
    assert over_time["throughput_statistic"] == OVER_TIME
    still = summarize_cell(frame)
    assert still["throughput_samples_s"] == pytest.approx(128.0)
    assert still["throughput_statistic"] == MEDIAN_STEP
    assert over_time["step_time_s"] == still["step_time_s"] == pytest.approx(0.5)


def test_the_table_says_which_rows_are_samples_over_time():
    summary = pd.DataFrame({"repeat": [0, 0], "compute_bound": [False, False],
                            "throughput_statistic": [MEDIAN_STEP, OVER_TIME]})
    notes = compute_bound_note(summary)
    assert len(notes) == 1 and notes[0].startswith("‡ links changed during the cell")
    assert "measured samples over measured time" in notes[0]
    assert compute_bound_note(summary.iloc[:1]) == []
