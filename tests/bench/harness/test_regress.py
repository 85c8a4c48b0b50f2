"""Regression check: comparison logic, the diff table and exit codes, on
result cells written by the harness's own writers."""

from __future__ import annotations

import argparse
import math

import pandas as pd
import pytest
from harness_helpers import write_cell

from bench.harness import regress
from bench.harness.regress import Check, baseline_rows, compare, format_checks
from bench.harness.sweep import CellSpec, ModeSpec, Workload, load_sweep
from bench.report.summary import summarize

pytestmark = pytest.mark.timeout(60)


def _results(tmp_path, aq_bytes=250_000, aq_loss=5.0, aq_step_s=0.2, launcher="netns"):
    w = Workload(steps=3)
    for scenario, rate in (("1gbps", 1000), ("100mbps", 100)):
        write_cell(tmp_path, CellSpec(scenario, ModeSpec("fp32"), w), rate_mbit=rate,
                   act_bytes=4_000_000, step_time_s=0.8, launcher=launcher)
        write_cell(tmp_path, CellSpec(scenario, ModeSpec("aqsgd", 2, 4), w), rate_mbit=rate,
                   act_bytes=aq_bytes, step_time_s=aq_step_s, loss0=aq_loss, launcher=launcher)
    return baseline_rows(summarize([tmp_path]))


def _failed(checks):
    return [(c.cell, c.metric) for c in checks if c.ok is False]


def test_identical_run_passes_every_check(tmp_path):
    rows = _results(tmp_path)
    checks = compare(rows, rows)
    assert _failed(checks) == []
    speedup = checks[-1]
    assert speedup.metric == "speedup_vs_fp32" and speedup.ok is True


def test_changed_bytes_loss_and_speedup_are_regressions(tmp_path):
    base = _results(tmp_path / "base")
    new = _results(tmp_path / "new", aq_bytes=250_001, aq_loss=5.2, aq_step_s=0.9)
    failed = _failed(compare(base, new))
    assert ("100mbps__aqsgd-fw2-bw4", "bytes_per_step") in failed
    assert ("100mbps__aqsgd-fw2-bw4", "bytes_per_step_activation") in failed
    assert ("1gbps__aqsgd-fw2-bw4", "final_loss") in failed
    assert ("100mbps__aqsgd-fw2-bw4", "speedup_vs_fp32") in failed  # 0.8/0.9 < floor
    assert not any(cell.endswith("fp32") for cell, _ in failed)


def test_loss_within_tolerance_passes(tmp_path):
    base = _results(tmp_path / "base")
    new = base.copy()
    new["final_loss"] = new["final_loss"] * (1 + 0.5 * regress.LOSS_REL_TOL)
    assert _failed(compare(base, new)) == []


def test_missing_new_and_failed_cells_are_reported(tmp_path):
    base = _results(tmp_path)
    new = base[base["cell"] != "1gbps__fp32"].copy()
    new.loc[new["cell"] == "1gbps__aqsgd-fw2-bw4", "status"] = "failed"
    extra = new.iloc[[0]].assign(cell="10gbps__fp32")
    failed = _failed(compare(base, pd.concat([new, extra])))
    assert ("1gbps__fp32", "present") in failed
    assert ("1gbps__aqsgd-fw2-bw4", "status") in failed
    assert ("10gbps__fp32", "present") in failed


def test_speedup_is_not_checked_on_unshaped_links(tmp_path):
    rows = _results(tmp_path, aq_step_s=0.8, launcher="local")
    check = compare(rows, rows)[-1]
    assert check.ok is None and "unshaped" in check.tolerance and check.verdict == "skip"


def test_diff_table_shows_what_moved_and_by_how_much():
    checks = [Check("100mbps__aqsgd-fw2-bw4", "bytes_per_step", 1000.0, 1100.0, "exact", False),
              Check("100mbps__fp32", "final_loss", 5.0, 5.0, "+-0.05", True)]
    table = format_checks(checks)
    assert "+100 (+10.00%)" in table and "REGRESSION" in table and "ok" in table
    only = format_checks(checks, only_failures=True)
    assert "100mbps__fp32" not in only and only.count("\n") == 2


def _args(tmp_path, results, update=False):
    return argparse.Namespace(update_baseline=update, sweep_file=regress.SWEEP_FILE,
                              baseline=tmp_path / "baseline", out=tmp_path / "unused",
                              compare_only=results, launcher="local", quiet=True)


def test_cli_exit_codes_update_then_pass_then_fail(tmp_path, capsys):
    good, bad = tmp_path / "good", tmp_path / "bad"
    _results(good)
    _results(bad, aq_bytes=300_000)
    assert regress.run_regress(_args(tmp_path, good)) == 2  # no baseline yet
    assert "--update-baseline" in capsys.readouterr().out
    assert regress.run_regress(_args(tmp_path, good, update=True)) == 0
    assert (tmp_path / "baseline" / "regress.csv").is_file()
    assert regress.run_regress(_args(tmp_path, good)) == 0
    assert "no regression" in capsys.readouterr().out
    assert regress.run_regress(_args(tmp_path, bad)) == 1
    out = capsys.readouterr().out
    assert "REGRESSION: " in out and "bytes_per_step" in out and "+20.00%" in out


def test_committed_baseline_is_complete():
    path = regress.BASELINE_DIR / "regress.csv"
    assert path.is_file(), "results/baseline/regress.csv is committed with the suite"
    base = pd.read_csv(path)
    assert set(regress.BASELINE_COLUMNS) <= set(base.columns)
    assert (base["status"] == "ok").all()
    assert not any(math.isnan(v) for v in base["bytes_per_step"])
    spec_cells = {c.name for c in load_sweep(regress.SWEEP_FILE).cells()}
    assert set(base["cell"]) == spec_cells
