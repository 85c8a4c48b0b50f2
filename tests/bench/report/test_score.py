"""The time-to-target score (bench.report.score): ProtocolNanoGPT's steady step, its
fallbacks said as such, and T = steps to target x steady step with its sources."""

from __future__ import annotations

import pandas as pd
import pytest
from report_fixtures import write_fixture_cell

from bench.__main__ import main
from bench.report.score import Steady, _given, score_rows, steady_step


def test_the_steady_step_is_the_median_of_three_agreeing_10_step_windows():
    # a slow start, then windows of means 1.00, 1.005, 1.008: within 1%
    times = [3.0] * 5 + [1.0] * 10 + [1.005] * 10 + [1.008] * 10
    steady = steady_step(times)
    assert steady == Steady(pytest.approx(1.005), "windows", 5)
    assert steady.text() == "3 x 10 steps from measured step 5"


def test_windows_that_do_not_agree_fall_back_to_the_median_and_say_so():
    times = [1.0] * 10 + [1.1] * 10 + [1.2] * 10   # 20% apart
    steady = steady_step(times)
    assert steady.how == "median" and steady.step_s == pytest.approx(1.1)
    assert "no 3 agreeing windows" in steady.text()
    assert steady_step([0.5] * 12).how == "median"   # fewer than 30 steps


def _cells() -> pd.DataFrame:
    return pd.DataFrame([
        {"series": "fp32", "mode": "fp32", "scenario": "100mbps", "stages": 2, "replicas": 1,
         "cell": "100mbps__fp32", "steady": Steady(0.8, "windows", 0)},
        {"series": "aqsgd:2/4", "mode": "aqsgd", "scenario": "100mbps", "stages": 2,
         "replicas": 1, "cell": "100mbps__aqsgd-fw2-bw4", "steady": Steady(0.2, "median")},
        {"series": "directq:2/4", "mode": "directq", "scenario": "100mbps", "stages": 2,
         "replicas": 1, "cell": "100mbps__directq-fw2-bw4", "steady": Steady(0.2, "run")},
    ])


def test_t_is_steps_times_the_steady_step_with_its_sources():
    targets = {"fp32": (150.0, "given (--steps)"), "aqsgd:2/4": (175.0, "mean of 3 seed(s)")}
    headers, rows = score_rows(_cells(), targets)
    by_mode = {r[0]: dict(zip(headers, r, strict=True)) for r in rows}
    assert set(by_mode) == {"fp32", "aqsgd:2/4"}   # directq has no steps to target
    assert by_mode["fp32"]["T"] == "120 s" and by_mode["fp32"]["T vs fp32"] == "1.00x"
    aq = by_mode["aqsgd:2/4"]
    assert aq["T"] == "35.0 s" and aq["T vs fp32"] == f"{120 / 35:.2f}x"
    assert aq["from"] == "mean of 3 seed(s)" and aq["how"].startswith("median of all steps")


def test_given_steps_are_mode_equals_count():
    assert _given(["aqsgd:2/4=175", "fp32=150"]) == {"aqsgd:2/4": 175, "fp32": 150}
    with pytest.raises(ValueError, match=r"--steps: expected MODE=STEPS .* got 'fp32'"):
        _given(["fp32"])
    with pytest.raises(ValueError, match="got 'fp32=0'"):
        _given(["fp32=0"])


def test_bench_score_reads_result_folders(tmp_path, capsys):
    tp, quality = tmp_path / "tp", tmp_path / "quality"
    # 32 measured steps of 0.5 s (fp32) and 0.25 s (aqsgd:2/4): three windows agree
    write_fixture_cell(tp, epochs=17, steps_per_epoch=2, step_time_s=0.5, mode="fp32")
    write_fixture_cell(tp, epochs=17, steps_per_epoch=2, step_time_s=0.25, mode="aqsgd",
                       fw=2, bw=4)
    # quality cells: evaluations every 25 steps (epochs of 25 steps), loss 3.0 at step 50
    for seed in (1, 2):
        write_fixture_cell(quality, epochs=3, steps_per_epoch=25, mode="fp32", seed=seed,
                           eval_losses=[5.0, 3.5, 2.9, 2.8])
    assert main(["score", str(tp), "--quality", str(quality), "--target", "3.0"]) == 0
    out = capsys.readouterr().out
    fp32 = next(line for line in out.splitlines() if line.startswith("│ fp32"))
    assert "50" in fp32 and "25.0 s" in fp32 and "1.00x" in fp32 and "3 x 10 steps" in fp32
    assert "aqsgd:2/4" not in out   # no steps to target for it: no row
    assert main(["score", str(tp), "--steps", "aqsgd:2/4=60", "--steps", "fp32=50"]) == 0
    out = capsys.readouterr().out
    aq = next(line for line in out.splitlines() if line.startswith("│ aqsgd:2/4"))
    assert "15.0 s" in aq and f"{25 / 15:.2f}x" in aq
