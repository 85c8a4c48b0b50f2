"""Running a sweep (bench.harness.run) with a stand-in worker: a cell that does not fit
its scenario, resume after a kill, a failing cell (the real worker runs in
tests/bench/harness/test_e2e.py)."""

from __future__ import annotations

import json

import pytest
from harness_helpers import fake_worker_cmd

from aqsgd.train.config import load_config
from bench.harness.modes import parse_mode
from bench.harness.run import run_sweep
from bench.harness.sweep import SweepSpec, Workload
from bench.net.placement import PlacementError

pytestmark = pytest.mark.timeout(60)


def test_a_cell_that_does_not_fit_its_scenario_is_refused_before_anything_runs(tmp_path):
    # 8 stages need 8 hosts; 100mbps has 4: refused by the placement, naming the cell,
    # what it asks and what the scenario has, before any host or file is made.
    spec = SweepSpec(name="deep", scenarios=("100mbps",), modes=(parse_mode("fp32"),),
                     workload=Workload(preset="tiny-8", stages=8))
    with pytest.raises(PlacementError, match=r"cell 100mbps__fp32: cell of 8 stages.*"
                                             r"needs 8 hosts; scenario '100mbps' has 4"):
        run_sweep(spec, tmp_path / "deep", launcher="local", quiet=True)
    assert not (tmp_path / "deep").exists()


# -------------------------------------------------- sweeps: resume, failures
def _spec(modes=("fp32", "aqsgd:2/4", "directq:4/8"), **workload) -> SweepSpec:
    return SweepSpec("t", ("100mbps",), tuple(parse_mode(m) for m in modes),
                     Workload(steps=3, train_samples=64, timeout_s=60, init_from=None,
                              **workload))


@pytest.mark.slow
@pytest.mark.workers
def test_sweep_resumes_after_a_kill_and_marks_failed_cells(tmp_path):
    worker = fake_worker_cmd(tmp_path)
    out = tmp_path / "results"
    spec = _spec()
    first = run_sweep(spec, out, launcher="local", quiet=True, worker_cmd=worker,
                      echo=lambda s: None)
    assert [o.status for o in first] == ["ok", "ok", "ok"]
    kept = out / "100mbps__fp32__local" / "meta.json"  # the local launcher's tag
    kept_mtime = kept.stat().st_mtime_ns
    # meta.json keeps the resolved RunConfig, the one every rank loaded
    run_config_record = json.loads(kept.read_text())["run_config"]
    assert run_config_record == load_config(kept.parent / "config.yaml").to_dict()
    assert run_config_record["model"]["n_layer"] == 2  # the tiny preset, resolved
    # simulate a kill during the aqsgd cell: no meta.json, a half-written temporary
    victim = out / "100mbps__aqsgd-fw2-bw4__local"
    (victim / "meta.json").unlink()
    (victim / ".metrics.csv.abc123.tmp").write_text("cell,rank,ste")

    second = run_sweep(spec, out, launcher="local", quiet=True, worker_cmd=worker,
                       echo=lambda s: None)
    by_name = {o.name: o.status for o in second}
    assert by_name == {"100mbps__fp32__local": "skipped",
                       "100mbps__directq-fw4-bw8__local": "skipped",
                       "100mbps__aqsgd-fw2-bw4__local": "ok"}
    assert kept.stat().st_mtime_ns == kept_mtime
    assert not list(victim.glob("*.tmp"))
    assert json.loads((victim / "meta.json").read_text())["status"] == "ok"


@pytest.mark.slow
@pytest.mark.workers
def test_failing_cell_is_recorded_and_the_sweep_goes_on(tmp_path, monkeypatch):
    from bench.__main__ import finish_sweep

    monkeypatch.setenv("FAKE_FAIL_MODE", "directq")  # the stand-in fails on rank 0, step 1
    out = tmp_path / "results"
    spec = _spec(modes=("fp32", "directq:4/8", "aqsgd:2/4"))
    outcomes = run_sweep(spec, out, launcher="local", quiet=True,
                         worker_cmd=fake_worker_cmd(tmp_path), echo=lambda s: None)
    assert [o.status for o in outcomes] == ["ok", "failed", "ok"]
    meta = json.loads((out / "100mbps__directq-fw4-bw8__local" / "meta.json").read_text())
    assert meta["failure"]["rank"] == 0 and meta["failure"]["returncode"] == 3
    assert "injected failure" in meta["failure"]["log_tail"]
    assert finish_sweep(out) == 1
    report = (out / "report.md").read_text()
    assert "## Failed cells" in report and "injected failure" in report


@pytest.mark.slow
@pytest.mark.workers
def test_a_metrics_csv_cut_between_runs_is_measured_again_not_counted_done(tmp_path):
    worker = fake_worker_cmd(tmp_path)
    out = tmp_path / "results"
    spec = _spec(modes=("fp32", "aqsgd:2/4"))
    run_sweep(spec, out, launcher="local", quiet=True, worker_cmd=worker, echo=lambda s: None)
    cut = out / "100mbps__fp32__local" / "metrics.csv"
    recorded = json.loads((cut.parent / "meta.json").read_text())["files"]["metrics.csv"]
    assert recorded["bytes"] == cut.stat().st_size
    cut.write_bytes(cut.read_bytes()[:recorded["bytes"] // 2])  # header intact: still parses
    lines = []
    second = run_sweep(spec, out, launcher="local", quiet=True, worker_cmd=worker,
                       echo=lines.append)
    assert {o.name: o.status for o in second} == {"100mbps__fp32__local": "ok",
                                                  "100mbps__aqsgd-fw2-bw4__local": "skipped"}
    assert any(line.startswith(f"measure 100mbps__fp32__local again: unreadable: {cut}: ")
               and "truncated" in line for line in lines), lines
    assert cut.stat().st_size == recorded["bytes"]


@pytest.mark.slow
@pytest.mark.workers
def test_a_full_results_folder_stops_the_sweep_and_keeps_the_finished_cells(
        tmp_path, monkeypatch):
    import errno

    from bench.harness import run as harness_run
    from bench.harness.lock import ResultsFolderFull

    worker = fake_worker_cmd(tmp_path)
    out = tmp_path / "results"
    spec = _spec()
    real_write = harness_run.write_json

    def full_at_the_second_meta(path, obj):  # the file system fills during cell 2
        if path.name == "meta.json" and path.parent.name.startswith("100mbps__aqsgd"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(path, obj)

    monkeypatch.setattr(harness_run, "write_json", full_at_the_second_meta)
    with pytest.raises(ResultsFolderFull, match=rf"^{out}: no space left"):
        run_sweep(spec, out, launcher="local", quiet=True, worker_cmd=worker,
                  echo=lambda s: None)
    finished = out / "100mbps__fp32__local" / "meta.json"
    assert json.loads(finished.read_text())["status"] == "ok"
    kept = finished.read_bytes()
    # neither the cell it was running nor the next is recorded failed: nothing is
    assert not (out / "100mbps__aqsgd-fw2-bw4__local" / "meta.json").exists()
    assert not (out / "100mbps__directq-fw4-bw8__local").exists()
    monkeypatch.setattr(harness_run, "write_json", real_write)  # space again: resume
    second = run_sweep(spec, out, launcher="local", quiet=True, worker_cmd=worker,
                       echo=lambda s: None)
    assert [o.status for o in second] == ["skipped", "ok", "ok"]
    assert finished.read_bytes() == kept
