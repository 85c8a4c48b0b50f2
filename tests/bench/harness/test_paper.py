"""`python -m bench paper` (bench.harness.paper): both sweeps' times stated up front, and
the paper figures plus the convergence report drawn from the two result directories."""

from __future__ import annotations

import pandas as pd
import pytest
from harness_helpers import write_cell

from bench.__main__ import main
from bench.harness.convergence import plan
from bench.harness.modes import parse_mode
from bench.harness.sweep import CellSpec
from bench.harness.workload import Workload


def _throughput_cells(tp) -> None:
    """Two finished cells of the paper sweep at 100 Mbit/s (fp32 and AQ-SGD 2/4)."""
    for mode, act_bytes, step_s in (("fp32", 4_000_000, 0.5), ("aqsgd:2/4", 250_000, 0.2)):
        write_cell(tp, CellSpec("100mbps", parse_mode(mode)), rate_mbit=100.0,
                   act_bytes=act_bytes, step_time_s=step_s, sweep="paper")


def test_paper_runs_the_throughput_and_the_convergence_sweep(tmp_path, monkeypatch, capsys):
    ran: list[tuple[str, str]] = []

    def fake_run_sweep(spec, out, *, launcher, fresh, quiet):
        ran.append((spec.name, launcher))
        return []

    monkeypatch.setattr("bench.harness.convergence.run_sweep", fake_run_sweep)
    tp, conv = tmp_path / "paper", tmp_path / "conv"
    _throughput_cells(tp)
    assert main(["paper", "--results", str(tp), "--conv-results", str(conv),
                 "--launcher", "netns", "--quiet"]) == 0
    # throughput cells on the chosen launcher first, the convergence cells unshaped
    assert ran == [("paper", "netns"), ("convergence", "local")]
    out = capsys.readouterr().out
    p = plan("default", conv, tp)
    assert f"sweep paper: {len(p.throughput.cells())} of " in out
    assert f"sweep convergence: {len(p.convergence.cells())} of " in out
    assert (tp / "paper" / "paper.md").is_file()
    assert (conv / "report" / "convergence.md").is_file()


def test_paper_no_run_draws_only(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        pytest.fail("--no-run must not run a sweep")

    monkeypatch.setattr("bench.harness.convergence.run_sweep", refuse)
    _throughput_cells(tmp_path / "p")
    assert main(["paper", "--no-run", "--results", str(tmp_path / "p"),
                 "--conv-results", str(tmp_path / "c")]) == 0
    assert (tmp_path / "p" / "paper" / "paper.md").is_file()


def test_a_cell_of_a_shape_the_profile_lacks_is_skipped_and_named(tmp_path, monkeypatch):
    """A convergence-depth cell (tiny-8 on 2 stages, which profiles/cpu-2core.yaml does not
    time) among the results: the paper report is still written, the model's validation
    leaves that cell out and model_whatif.txt names it."""
    monkeypatch.setattr("bench.harness.convergence.run_sweep",
                        lambda *a, **k: pytest.fail("--no-run must not run a sweep"))
    _throughput_cells(tmp_path / "p")
    deep = CellSpec("100mbps", parse_mode("directq:2/4"), Workload(preset="tiny-8", stages=2))
    write_cell(tmp_path / "p", deep, rate_mbit=100.0, act_bytes=1_000_000, step_time_s=0.4,
               sweep="paper")
    assert main(["paper", "--no-run", "--results", str(tmp_path / "p"),
                 "--conv-results", str(tmp_path / "c")]) == 0
    whatif = (tmp_path / "p" / "paper" / "model_whatif.txt").read_text()
    # (the checkout's own results/ are read too: only this folder's cell is asked about)
    [line] = [x for x in whatif.splitlines() if x.startswith("skipped: paper/100mbps")]
    assert line.startswith("skipped: paper/100mbps__directq-fw2-bw4")
    assert "no measured stages for tiny-8 in 2 stages" in line
    validated = pd.read_csv(tmp_path / "p" / "paper" / "model_validation.csv")
    ours = set(validated.loc[validated["sweep"] == "paper", "label"])
    assert ours == {"fp32", "aqsgd-fw2-bw4"}, ours
