"""The performance model against measured cells (bench.perfmodel.validate): the step-time
statistic against the reports', and a smoke validation on real cells measured through
network namespaces."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from bench.__main__ import main
from bench.harness.run import run_sweep
from bench.harness.sweep import SweepSpec, Workload, parse_mode
from bench.perfmodel.profile import load_profile
from bench.perfmodel.validate import (
    in_situ,
    load_cells,
    measured_step_s,
    step_workload_of,
    validate_cells,
)
from bench.report.summary import summarize_cell


def _frame() -> pd.DataFrame:
    """Two ranks, a warm-up step and three measured steps of uneven times."""
    rows = []
    times = {0: (9.0, 9.0), 1: (0.30, 0.20), 2: (0.25, 0.40), 3: (0.10, 0.35)}
    for step, pair in times.items():
        for rank, t in enumerate(pair):
            rows.append({"kind": "train", "warmup": step == 0, "step": step, "rank": rank,
                         "stage": rank, "step_time_s": t, "samples": 64, "tokens": 4096,
                         "compute_s": 0.1, "comm_wait_s": 0.0, "loss": 1.0,
                         "bytes_sent_total": 10, "bytes_sent_activation": 10,
                         "bytes_sent_gradient": 0, "bytes_sent_dp": 0, "peak_rss_bytes": 0})
    return pd.DataFrame(rows)


def test_the_measured_step_time_is_the_reports_statistic():
    frame = _frame()
    assert measured_step_s(frame) == pytest.approx(summarize_cell(frame)["step_time_s"])
    assert measured_step_s(frame) == pytest.approx(0.35)  # median of the slowest ranks


SMOKE = Workload(steps=3, train_samples=64, timeout_s=150, dist_timeout_s=60, init_from=None)


@pytest.mark.slow
@pytest.mark.netns
@pytest.mark.workers
@pytest.mark.timeout(300)
def test_smoke_validation_on_real_cells(tmp_path, capsys):
    """Two real cells at 100 Mbit/s: the model's bytes are the measured bytes exactly, and
    its step time is near the measured one (loosely: three measured steps on a shared
    machine; the full validation is `make paper`'s table)."""
    spec = SweepSpec("smoke", ("100mbps",), (parse_mode("fp32"), parse_mode("aqsgd:2/4")),
                     SMOKE)
    out = tmp_path / "results"
    outcomes = run_sweep(spec, out, launcher="netns", quiet=True, echo=lambda s: None)
    assert [o.status for o in outcomes] == ["ok", "ok"]
    profile = load_profile("cpu-2core")
    cells = load_cells([out])
    table = validate_cells(cells, profile).set_index("label")
    assert (table["bytes_predicted"] == table["bytes_measured"]).all(), table
    assert (table["error"].abs() < 0.30).all(), table[["measured_s", "predicted_s"]]
    # the command line's --json: the same rows, nothing else on stdout
    assert main(["validate", "--profile", "cpu-2core", str(out), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert sorted(r["label"] for r in rows) == sorted(table.index)
    # in situ, each stage's compute per step is the cell's own
    for cell in cells:
        work = in_situ(step_workload_of(cell, profile), cell)
        for s, st in enumerate(work.stage):
            assert work.micro_batches * (st.forward_s + st.backward_s) + st.optimizer_s == (
                pytest.approx(cell.compute_s[s] + cell.other_s[s]))
