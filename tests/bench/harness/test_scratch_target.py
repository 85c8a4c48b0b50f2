"""Training from scratch to a target: the workload's evaluation cadence, the sweep's
target and its cadence rule, and the smoke size end to end through real workers."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from bench.__main__ import main
from bench.harness.convergence import plan
from bench.harness.modes import parse_mode
from bench.harness.sweep import SweepSpec, Workload, load_sweep
from bench.report.target import write_target_report
from specfile import SpecError


def test_eval_every_is_a_cadence_that_divides_the_run():
    w = Workload(epochs=4, warmup_epochs=1, train_samples=1600, eval_every=25)
    assert w.total_steps == 100 and w.evaluations == 4
    with pytest.raises(ValueError, match=r"eval_every must divide the run's 100 steps .* got 30"):
        Workload(epochs=4, warmup_epochs=1, train_samples=1600, eval_every=30)
    with pytest.raises(ValueError, match="eval_every .25 steps. and eval_each_epoch"):
        Workload(epochs=4, train_samples=1600, eval_every=25, eval_each_epoch=True)


def test_eval_every_enters_the_identity_only_when_set():
    assert "eval_every" not in Workload().identity()
    assert Workload(eval_every=6).identity()["eval_every"] == 6


def test_a_target_needs_evaluations_at_least_25_steps_apart():
    w = Workload(epochs=3, train_samples=640, eval_every=10)
    with pytest.raises(ValueError, match="eval_every must be at least 25 steps, got 10"):
        SweepSpec("t", ("loopback",), (parse_mode("fp32"),), w, target_loss=3.0)
    with pytest.raises(ValueError, match="eval_every must be at least 25 steps, got 0"):
        SweepSpec("t", ("loopback",), (parse_mode("fp32"),), Workload(), target_loss=3.0)


def test_a_bad_target_in_a_sweep_file_names_the_file_and_the_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: bad\nscenarios: [loopback]\nmodes: [fp32]\ntarget_loss: -1\n")
    with pytest.raises(SpecError, match=r"bad\.yaml.*target_loss"):
        load_sweep(path)


def test_the_shipped_scratch_sweeps_load():
    for size in ("scratch", "scratch-smoke"):
        spec = plan(size, with_throughput=False).convergence
        assert spec.target_loss is not None and spec.workload.init_from is None
        assert spec.workload.eval_every >= 25


@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(400)
def test_scratch_smoke_end_to_end(tmp_path, capsys):
    conv = tmp_path / "conv"
    assert main(["convergence", "--size", "scratch-smoke", "--results", str(conv),
                 "--quiet"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"sweep convergence-scratch-smoke: 4 of 4 cells to run", out)
    spec = plan("scratch-smoke", with_throughput=False).convergence
    w = spec.workload
    for cell in spec.cells():
        cell_dir = conv / f"{cell.name}__local"
        meta = json.loads((cell_dir / "meta.json").read_text())
        assert meta["status"] == "ok"
        assert meta["run_config"]["train"]["init_from"] is None
        frame = pd.read_csv(cell_dir / "metrics.csv")
        evals = frame[(frame["kind"] == "eval") & frame["eval_loss"].notna()]
        assert sorted(evals["step"].unique()) == list(range(w.eval_every, w.total_steps + 1,
                                                            w.eval_every))
    report = (conv / "report" / "target.md").read_text()
    assert f"# Steps to a held-out loss of {spec.target_loss}" in report
    rows = [line for line in report.splitlines() if line.startswith("| fp32 ")
            or line.startswith("| aqsgd:2/4 ")]
    assert len(rows) == 2 and all("2/2" in row for row in rows), report
    assert "steps to target: " in out
    # one sweep in two folders reads as one: seed 2's cells moved aside, read with `also`
    other = tmp_path / "other"
    other.mkdir()
    for cell_dir in conv.glob("*__s2__local"):
        cell_dir.rename(other / cell_dir.name)
    joined = write_target_report(conv, spec.target_loss, tmp_path / "joined", quiet=True,
                                 also=(other,)).read_text()
    assert [line for line in joined.splitlines() if line.startswith("| fp32 ")
            or line.startswith("| aqsgd:2/4 ")] == rows
