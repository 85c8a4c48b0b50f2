"""`--dry-run` of `bench run` and `bench sweep` (bench.harness.run.dry_run): the cells,
each layout's placement and the time estimate, with nothing brought up, built or
written."""

from __future__ import annotations

import pytest
from harness_helpers import write_cell

from bench.__main__ import main
from bench.harness.sweep import CellSpec, ModeSpec, Workload

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def nothing_runs(monkeypatch):
    """Fail the test if the dry run brings up hosts, builds checkpoints or runs a sweep."""
    def refuse(*args, **kwargs):
        pytest.fail("a dry run must not run anything")

    for target in ("bench.harness.run._run_group", "bench.harness.run.prepare_builds",
                   "bench.harness.run.run_sweep"):
        monkeypatch.setattr(target, refuse)


def _tree(path):
    return {p.relative_to(path): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(path.rglob("*"))}


def test_run_dry_run_prints_cells_placement_and_estimate_and_creates_nothing(
        tmp_path, capsys, nothing_runs):
    out = tmp_path / "results"
    assert main(["run", "--scenario", "100mbps", "--launcher", "local", "--dry-run",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert not out.exists()
    assert "nothing is brought up, nothing is written" in text
    for cell in ("100mbps__fp32", "100mbps__aqsgd-fw2-bw4", "100mbps__fp32-dp2",
                 "100mbps__aqsgd+gc-qadam-fw2-bw4-dp2", "loopback__fp32"):
        assert cell in text
    # the placement of each layout: which rank on which host, what each link carries
    assert "placement: 4 stages x 1 replica on '100mbps'" in text
    assert "placement: 2 stages x 2 replicas on '100mbps'" in text
    assert "activations stage 0->1" in text and "dp stage 0" in text
    cells = [line for line in text.splitlines() if line.startswith(("100mbps__", "loopback__"))]
    assert all(line.endswith(" run") for line in cells)
    assert f"sweep 100mbps: {len(cells)} of {len(cells)} cells to run" in text


def test_sweep_dry_run_leaves_an_existing_results_dir_as_it_was(tmp_path, capsys,
                                                                  monkeypatch, nothing_runs):
    sweep = tmp_path / "s.yaml"
    sweep.write_text("name: s\nscenarios: [100mbps]\nmodes: [fp32, \"aqsgd:2/4\"]\n"
                     "workload: {steps: 3}\ntiming: {start_s: 6, step_s_per_rank: 0.5}\n")
    out = tmp_path / "results"
    write_cell(out, CellSpec("100mbps", ModeSpec("fp32"), Workload(steps=3)), rate_mbit=100,
               act_bytes=1000, step_time_s=0.1, launcher="local")  # by commit "abc"
    # the same cell measured on netns is another cell: it neither counts nor is touched
    write_cell(out, CellSpec("100mbps", ModeSpec("aqsgd", 2, 4), Workload(steps=3)),
               rate_mbit=100, act_bytes=1000, step_time_s=0.1)
    monkeypatch.setattr("bench.harness.run.provenance",
                        lambda root: {"git": {"commit": "abc"}})
    before = _tree(out)
    assert main(["sweep", str(sweep), "--launcher", "local", "--dry-run",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert _tree(out) == before
    rows = {line.split()[0]: line for line in text.splitlines() if line.startswith("100mbps__")}
    assert rows["100mbps__fp32__local"].endswith(
        "skip: finished earlier by this commit on this launcher and machine")
    assert rows["100mbps__aqsgd-fw2-bw4__local"].endswith("run")
    assert "sweep s: 1 of 2 cells to run, about" in text
