"""Harness logic: specs and bad input, waiting on workers, sweep resume and
failure handling (with a stand-in worker; the real one runs in
tests/test_harness_e2e.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest
from harness_helpers import fake_worker_cmd

from aqsgd.train.config import load_config
from bench.__main__ import main
from bench.harness.cells import run_config, write_run_config
from bench.harness.modes import DEFAULT_GRID, parse_mode
from bench.harness.run import run_sweep
from bench.harness.sweep import CellSpec, SweepSpec, Workload, load_sweep
from bench.launch.choice import choose_launcher
from bench.launch.process import wait_for_workers
from bench.net.placement import PlacementError
from bench.net.scenario import ScenarioError, load_scenario

pytestmark = pytest.mark.timeout(60)


# ----------------------------------------------------------------- bad input
@pytest.mark.parametrize("text, match", [
    ("aqsgd:9/4", r"fw_bits must be in 1\.\.8, got 9"),
    ("directq:4/0", r"bw_bits must be in 1\.\.8, got 0"),
    ("zstd", r"mode must be one of fp32, directq, aqsgd, aqsgd-lowbits, aqsgd\+gc"),
    ("fp32:2/4", "fp32 takes no bit widths"),
    ("aqsgd:two/4", "NAME:FW/BW with integers"),
])
def test_bad_mode_names_the_field(text, match):
    with pytest.raises(ValueError, match=match):
        parse_mode(text)


def test_modes_parse_with_defaults_and_labels():
    assert [str(parse_mode(m)) for m in DEFAULT_GRID] == list(DEFAULT_GRID)
    assert parse_mode("aqsgd").label == "aqsgd-fw2-bw4"
    assert parse_mode("aqsgd+gc:3/6").label == "aqsgd+gc-qadam-fw3-bw6"


def test_unknown_scenario_lists_the_available_ones(capsys):
    with pytest.raises(ScenarioError, match=r"available: .*100mbps"):
        load_scenario("100mbit")
    assert main(["run", "--scenario", "100mbit", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "no scenario '100mbit'" in err and "1gbps" in err and "loopback" in err


def test_a_cell_that_does_not_fit_its_scenario_is_refused_before_anything_runs(tmp_path):
    # 8 stages need 8 hosts; 100mbps has 4: refused by the placement, naming the cell,
    # what it asks and what the scenario has, before any host or file is made.
    spec = SweepSpec(name="deep", scenarios=("100mbps",), modes=(parse_mode("fp32"),),
                     workload=Workload(preset="tiny-8", stages=8))
    with pytest.raises(PlacementError, match=r"cell 100mbps__fp32: cell of 8 stages.*"
                                             r"needs 8 hosts; scenario '100mbps' has 4"):
        run_sweep(spec, tmp_path / "deep", launcher="local", quiet=True)
    assert not (tmp_path / "deep").exists()


def test_cli_bad_bit_width_exits_2_naming_the_field(capsys):
    assert main(["run", "--scenario", "100mbps", "--modes", "aqsgd:2/12"]) == 2
    assert "bw_bits must be in 1..8, got 12" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["run", "--scenario", "100mbps"], ["paper"]])
def test_cli_offers_only_launchers_that_exist(capsys, command):
    with pytest.raises(SystemExit):
        main([*command, "--launcher", "kubernetes"])
    # argparse quotes the choices from Python 3.12.8 on
    assert re.search(r"invalid choice: 'kubernetes' \(choose from '?auto'?, '?netns'?, "
                     r"'?docker'?, '?local'?, '?ssh'?\)", capsys.readouterr().err)


def test_choose_launcher_refuses_unknown_names():
    # not under capsys: bench.launch.local binds sys.stderr when first imported
    with pytest.raises(ValueError, match="launcher must be one of auto, netns, docker, local"):
        choose_launcher("kubernetes")
    assert choose_launcher("local").name == "local"


def test_workload_and_cell_validation_name_the_field():
    with pytest.raises(ValueError, match=r"Workload.stages must be in >= 1, got 0"):
        Workload(stages=0)
    with pytest.raises(ValueError, match=r"Workload.lr must be in \(0, 1\)"):
        Workload(lr=3.0)
    with pytest.raises(ValueError, match="needs Workload.replicas >= 2"):
        CellSpec("100mbps", parse_mode("aqsgd+gc"), Workload(replicas=1))


@pytest.mark.parametrize("body, match", [
    ("name: x\nscenarios: [100mbps]\nmodes: [fp32]\nsteps: 3\n", "unknown key.*steps"),
    ("name: x\nscenarios: [100mbps]\n", "missing field 'modes'"),
    ("name: x\nscenarios: [100mbps]\nmodes: [fp32]\nworkload: {stepz: 3}\n",
     "unknown workload field.*stepz"),
    ("name: x\nscenarios: [100mbps]\nmodes: [aqsgd]\nbits: [[2, 4, 8]]\n",
     r"bits must be a list of \[forward, backward\] pairs"),
    ("name: x\nscenarios: [100mbps]\nmodes: [\"aqsgd:2/9\"]\n", "bw_bits must be in 1..8"),
    ("name: x\nscenarios: [100mbps]\nmodes: [fp32]\nworkload: {steps: 0}\n",
     "Workload.steps must be in >= 1, got 0"),
])
def test_bad_sweep_file_names_file_and_field(tmp_path, body, match):
    path = tmp_path / "bad.yaml"
    path.write_text(body)
    with pytest.raises((ValueError, TypeError), match=match) as err:
        load_sweep(path)
    assert "bad.yaml" in str(err.value)


def test_sweep_crosses_bits_bumps_gc_replicas_and_adds_reference(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nscenarios: [1gbps, 100mbps]\nmodes: [fp32, aqsgd, aqsgd+gc]\n"
                    "bits: [[2, 4], [4, 8]]\nreference: loopback\n")
    cells = load_sweep(path).cells()
    names = [c.name for c in cells]
    assert names[:6] == ["1gbps__fp32", "1gbps__aqsgd-fw2-bw4", "1gbps__aqsgd-fw4-bw8",
                         "1gbps__fp32-dp2", "1gbps__aqsgd+gc-qadam-fw2-bw4-dp2",
                         "1gbps__aqsgd+gc-qadam-fw4-bw8-dp2"]
    assert names[-1] == "loopback__fp32" and len(cells) == 13
    assert cells[4].world_size == 4
    path.write_text(path.read_text() + "gc_reference: false\n")
    assert len(load_sweep(path).cells()) == 11


def test_shipped_sweep_files_load():
    for name in ("paper", "regress", "convergence", "convergence-smoke"):
        spec = load_sweep(f"scenarios/sweeps/{name}.yaml")
        assert spec.name == name and spec.cells()


def test_run_config_is_accepted_by_the_worker_config_loader(tmp_path):
    for mode in ("fp32", "directq:4/8", "aqsgd:2/4"):
        cell = CellSpec("100mbps", parse_mode(mode), Workload(steps=2))
        config = run_config(cell, tmp_path)
        assert config.train.steps == cell.workload.warmup_steps + 2
        path = write_run_config(config, tmp_path / "config.yaml")
        assert load_config(path) == config  # what every rank loads is what meta.json keeps
    cell = CellSpec("100mbps", parse_mode("aqsgd"),
                    Workload(overrides={"train.lrr": 1.0}))
    with pytest.raises(ValueError, match="train.lrr"):
        run_config(cell, tmp_path)


# --------------------------------------------------------------- waiting
def _py(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code])


def test_wait_reports_first_failing_rank_and_stops_the_rest():
    procs = [_py("import time; time.sleep(60)"), _py("import sys; sys.exit(3)")]
    started = time.monotonic()
    failure = wait_for_workers(procs, timeout_s=30, grace_s=1)
    assert failure["rank"] == 1 and failure["returncode"] == 3
    assert time.monotonic() - started < 10
    assert all(p.poll() is not None for p in procs)


def test_wait_times_out_and_names_the_ranks_still_running():
    procs = [_py("pass"), _py("import time; time.sleep(60)")]
    failure = wait_for_workers(procs, timeout_s=2)
    assert failure["rank"] == 1 and "timeout" in failure["reason"]
    assert procs[1].poll() is not None


def test_wait_all_ok_is_none():
    assert wait_for_workers([_py("pass"), _py("pass")], timeout_s=30) is None


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
    kept = out / "100mbps__fp32" / "meta.json"
    kept_mtime = kept.stat().st_mtime_ns
    # meta.json keeps the resolved RunConfig, the one every rank loaded
    run_config_record = json.loads(kept.read_text())["run_config"]
    assert run_config_record == load_config(kept.parent / "config.yaml").to_dict()
    assert run_config_record["model"]["n_layer"] == 2  # the tiny preset, resolved
    # simulate a kill during the aqsgd cell: no meta.json, a half-written temporary
    victim = out / "100mbps__aqsgd-fw2-bw4"
    (victim / "meta.json").unlink()
    (victim / ".metrics.csv.abc123.tmp").write_text("cell,rank,ste")

    second = run_sweep(spec, out, launcher="local", quiet=True, worker_cmd=worker,
                       echo=lambda s: None)
    by_name = {o.name: o.status for o in second}
    assert by_name == {"100mbps__fp32": "skipped", "100mbps__directq-fw4-bw8": "skipped",
                       "100mbps__aqsgd-fw2-bw4": "ok"}
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
    meta = json.loads((out / "100mbps__directq-fw4-bw8" / "meta.json").read_text())
    assert meta["failure"]["rank"] == 0 and meta["failure"]["returncode"] == 3
    assert "injected failure" in meta["failure"]["log_tail"]
    assert finish_sweep(out) == 1
    report = (out / "report.md").read_text()
    assert "## Failed cells" in report and "injected failure" in report


def test_scenario_given_as_a_file_path_names_cells_by_its_stem():
    cell = CellSpec("scenarios/100mbps.yaml", parse_mode("fp32"))
    assert cell.name == "100mbps__fp32" and cell.scenario_name == "100mbps"
    assert load_scenario("scenarios/100mbps.yaml").name == "100mbps"
