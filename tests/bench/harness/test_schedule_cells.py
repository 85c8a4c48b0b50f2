"""1F1B and GPipe cells of one mode train the same model: the same held-out loss (to 5
digits) and the same bytes per step; only the order of a stage's work differs."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from bench.harness.modes import parse_mode
from bench.harness.run import run_sweep
from bench.harness.sweep import SweepSpec, Workload

pytestmark = pytest.mark.workers

BASE = Workload(stages=2, steps=2, train_samples=64, eval_samples=32, init_from=None,
                timeout_s=200, dist_timeout_s=60)


def test_a_1f1b_cell_is_named_by_its_schedule_and_a_gpipe_cell_as_before():
    spec = SweepSpec("s", ("100mbps",), (parse_mode("aqsgd:2/4"),), BASE)
    one = dataclasses.replace(spec, workload=dataclasses.replace(BASE, schedule="1f1b"))
    assert spec.cells()[0].name == "100mbps__aqsgd-fw2-bw4"
    assert one.cells()[0].name == "100mbps__aqsgd-fw2-bw4__1f1b"
    assert spec.cells()[0].key != one.cells()[0].key
    assert "schedule" not in BASE.identity()  # recorded gpipe cells keep their identity


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_1f1b_and_gpipe_give_the_same_held_out_loss_and_bytes(tmp_path):
    rows = {}
    for schedule in ("gpipe", "1f1b"):
        workload = dataclasses.replace(BASE, schedule=schedule)
        spec = SweepSpec(schedule, ("100mbps",), (parse_mode("aqsgd:2/4"),), workload)
        out = tmp_path / schedule
        outcomes = run_sweep(spec, out, launcher="local", quiet=True, echo=lambda s: None)
        assert [o.status for o in outcomes] == ["ok"], outcomes
        metrics = pd.read_csv(out / outcomes[0].name / "metrics.csv")
        rows[schedule] = metrics
    losses = {s: m[m.kind == "eval"].eval_loss.iloc[-1] for s, m in rows.items()}
    assert round(losses["gpipe"], 5) == round(losses["1f1b"], 5), losses
    sent = {s: m[m.kind == "train"].groupby("step").bytes_sent_total.sum().tolist()
            for s, m in rows.items()}
    assert sent["gpipe"] == sent["1f1b"] and sum(sent["gpipe"]) > 0, sent
