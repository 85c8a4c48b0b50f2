"""Time to fp32's quality within one run, on hand-made cells: the elapsed time of each
evaluation from the cell's own step times, the target from fp32 of the same run sweep,
and the table beside the joined estimate in the convergence report."""

from __future__ import annotations

import pytest
from report_fixtures import write_fixture_cell

from bench.report.convergence import write_convergence_report
from bench.report.inrun import inrun_curves, inrun_time_to_quality
from bench.results.files import load_results

pytestmark = pytest.mark.timeout(120)

# held-out loss at steps 0, 2, 4, 6 (2 steps an epoch, the first epoch warm-up)
CURVES = {("fp32", None, None): [4.0, 3.5, 3.2, 3.0],
          ("aqsgd", 2, 4): [4.0, 3.4, 3.02, 3.01]}  # within 1% of 3.0 at step 4


def _inrun(root):
    # 100mbps: fp32 1.0 s a step; AQ-SGD 1.0 s in warm-up (fp32's rows), then 0.3 s
    for (mode, fw, bw), losses in CURVES.items():
        steady = 1.0 if mode == "fp32" else 0.3
        write_fixture_cell(root, mode=mode, fw=fw, bw=bw, seed=1, eval_losses=losses,
                           warmup_step_time_s=1.0, step_time_s=steady)
    return root


def _joined(root):
    conv, paper = root / "convergence", root / "paper"
    for (mode, fw, bw), losses in CURVES.items():
        for seed in (1, 2):
            write_fixture_cell(conv, mode=mode, fw=fw, bw=bw, seed=seed, scenario="local",
                               rate_mbit=None, launcher="local", eval_losses=losses)
        write_fixture_cell(paper, mode=mode, fw=fw, bw=bw, epochs=5, warmup_step_time_s=1.0,
                           step_time_s=1.0 if mode == "fp32" else 0.25)
    return conv, paper


def test_elapsed_time_of_each_evaluation_is_the_cells_own(tmp_path):
    curves = inrun_curves(load_results([_inrun(tmp_path)]))
    aq = curves[curves["series"] == "aqsgd:2/4"].set_index("step")
    # 2 warm-up steps at 1.0 s, then 0.3 s a step; the last evaluation after all 6
    assert aq["elapsed_s"].tolist() == pytest.approx([0.0, 2.0, 2.6, 3.2])
    assert set(curves["scenario"]) == {"100mbps"}


def test_time_to_quality_within_one_run(tmp_path):
    ttq = inrun_time_to_quality(inrun_curves(load_results([_inrun(tmp_path)])))
    at = ttq.set_index("series")
    assert at.loc["aqsgd:2/4", "target"] == pytest.approx(3.03)
    assert at.loc["aqsgd:2/4", "reached_step"] == 4
    assert at.loc["aqsgd:2/4", "time_s"] == pytest.approx(2.6)
    assert at.loc["fp32", "time_s"] == pytest.approx(6.0)
    assert at.loc["fp32", "status"] == "reached"


def test_a_series_without_fp32_in_the_run_says_so(tmp_path):
    write_fixture_cell(tmp_path, mode="aqsgd", fw=2, bw=4, eval_losses=[4.0, 3.0])
    ttq = inrun_time_to_quality(inrun_curves(load_results([tmp_path])))
    assert ttq["status"].tolist() == ["no fp32 reference"]


def test_report_puts_the_in_run_time_beside_the_joined_estimate(tmp_path):
    conv, paper = _joined(tmp_path)
    inrun = _inrun(tmp_path / "inrun")
    text = write_convergence_report(conv, paper, tmp_path / "out", quiet=True,
                                    inrun_dir=inrun).read_text()
    assert "measured within one run" in text
    # joined: reached at step 4 from the throughput cell's 1.0 + 1.0 + 2 x 0.25 s
    assert "| aqsgd:2/4 | 100mbps | 1 | 3.0300 | 2.60 s (step 4) | 2.50 s (step 4) | 1.04 |" \
        in text
    assert "| fp32 | 100mbps | 1 | 3.0300 | 6.00 s (step 6) | 6.00 s (step 6) | 1.00 |" in text
