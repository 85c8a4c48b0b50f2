"""The link bounds of a cell (bench.report.linkbound) on a cell whose answer is known."""

from __future__ import annotations

import pandas as pd
import pytest
from report_fixtures import fixture_record, launcher_block, outage_block, scheduled_link

from bench.report.linkbound import cell_bound


def _blocks(tmp_path, schedule: str, delay_ms: float = 0.0) -> dict:
    # 3 stages on hosts 0, 1, 2; 0 <-> 1 at 100 Mbit/s, 1 <-> 2 at 50 Mbit/s; 2 micro-batches
    links = [{"src": a, "dst": b, "rate_mbit": rate, "delay_ms": d, "traffic": ["x"]}
             for a, b, rate, d in ((0, 1, 100.0, 0.0), (1, 0, 100.0, 0.0),
                                   (1, 2, 50.0, delay_ms), (2, 1, 50.0, delay_ms))]
    ranks = [{"rank": r, "host": r, "stage": r, "replica": 0} for r in range(3)]
    peers, metrics = [], []
    for step in range(3):  # step 0 is a warm-up step: its bytes must not count
        per_link = 5e6 if step == 0 else 1e6
        for rank, peer in ((0, 1), (1, 0), (1, 2), (2, 1)):
            peers.append({"cell": "c", "rank": rank, "step": step, "kind": "train",
                          "peer": peer, "bytes_sent": per_link, "bytes_recv": 0})
        for rank in range(3):
            metrics.append({"rank": rank, "step": step, "kind": "train", "warmup": step == 0})
    pd.DataFrame(peers).to_csv(tmp_path / "peers.csv", index=False)
    pd.DataFrame(metrics).to_csv(tmp_path / "metrics.csv", index=False)
    return {"placement": {"scenario": "s", "stages": 3, "replicas": 1, "n_hosts": 3,
                          "ranks": ranks, "links": links},
            "run_config": {"pipeline": {"num_micro_batches": 2, "schedule": schedule}}}


def _cell(tmp_path, schedule: str, delay_ms: float = 0.0):
    return fixture_record(tmp_path, cell={"name": "c"}, **_blocks(tmp_path, schedule, delay_ms))


def test_gpipe_bound_is_both_phases_fill_and_drain(tmp_path):
    b = cell_bound(_cell(tmp_path, "gpipe"), samples_per_step=32, measured_samples_s=50.0)
    # 1 MB at 50 Mbit/s = 0.16 s on the slowest link; per micro-batch 0.04 s and 0.08 s
    assert b.busiest in ((1, 2), (2, 1)) and b.busiest_rate_mbit == 50
    assert b.busiest_s == pytest.approx(0.16)
    # each phase: 0.04 + 0.08 + (2 - 1) * 0.08 = 0.2 s; GPipe: forward then backward
    assert b.schedule_s == pytest.approx(0.4)
    assert b.schedule_samples_s == pytest.approx(80.0)
    assert "at most 80.0 samples/s" in b.text() and "62%" in b.text()


def test_1f1b_overlaps_the_phases_and_delay_adds(tmp_path):
    assert cell_bound(_cell(tmp_path, "1f1b"), 32, 50.0).schedule_s == pytest.approx(0.2)
    delayed = cell_bound(_cell(tmp_path, "gpipe", delay_ms=10.0), 32, 50.0)
    assert delayed.schedule_s == pytest.approx(0.42)  # one crossing each way


def test_a_scheduled_link_counts_at_its_time_weighted_mean_rate(tmp_path):
    # 1 <-> 2 follow a schedule: 50 Mbit/s for 10 s, 12.5 for 10 s, down 5 s, 50 for 15 s
    # -> (500 + 125 + 0 + 750) / 40 = 34.375 Mbit/s on average, never its first 50
    meta = _blocks(tmp_path, "gpipe")
    changes = [{"src": src, "dst": dst, "phase": phase, "lap": 0, "t_s": t, "applied_s": t,
                "rate_mbit": rate, "down": down}
               for src, dst in ((1, 2), (2, 1))
               for phase, t, rate, down in ((0, 0.0, 50.0, False), (1, 10.0, 12.5, False),
                                            (2, 20.0, None, True), (0, 25.0, 50.0, False),
                                            (-1, 40.0, None, False))]
    meta["schedule"] = outage_block()
    meta["scenario"] = {"link": {"rate_mbit": 50.0}}
    meta["launcher"] = launcher_block(
        [scheduled_link(1, 2), scheduled_link(2, 1)],
        {"started_unix": 0.0, "stopped_unix": 40.0, "changes": changes})
    b = cell_bound(fixture_record(tmp_path, cell={"name": "c"}, **meta),
                   samples_per_step=32, measured_samples_s=20.0)
    assert b.busiest in ((1, 2), (2, 1))
    assert b.busiest_rate_mbit == pytest.approx(34.375)
    assert b.busiest_slowest_phase_mbit == 12.5
    assert b.busiest_s == pytest.approx(1e6 * 8 / 34.375e6)
    assert "mean 34.4 Mbit/s over its schedule, slowest phase 12.5" in b.text()
    assert "(50 Mbit/s)" not in b.text()


def test_an_unshaped_cell_has_no_link_bound(tmp_path):
    # a local run records the scenario's rates in its placement, but nothing shaped them
    record = fixture_record(tmp_path, cell={"name": "c", "shaped": False, "shaping": "none"},
                            **_blocks(tmp_path, "gpipe"))
    assert cell_bound(record, samples_per_step=32, measured_samples_s=50.0) is None
