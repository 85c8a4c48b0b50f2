"""End to end with the real worker (`python -m aqsgd.train.worker`): one smoke cell on
the local launcher, one through network namespaces, and a real worker failure."""

from __future__ import annotations

import json

import pytest
from harness_helpers import check_smoke_cell, smoke_sweep, two_launchers_in_one_dir

from bench.__main__ import finish_sweep
from bench.harness.sweep import Workload

pytestmark = pytest.mark.workers

@pytest.mark.slow
@pytest.mark.timeout(200)
def test_real_worker_smoke_cell_local(tmp_path):
    out, outcomes = smoke_sweep(tmp_path, "local")
    assert [o.status for o in outcomes] == ["ok"]
    meta = check_smoke_cell(out, "local")
    assert meta["cell"]["shaped"] is False
    assert finish_sweep(out) == 0
    assert (out / "figures" / "loss_100mbps.png").is_file()
    assert "aqsgd:2/4" in (out / "report.md").read_text()
    rows = json.loads((out / "summary.json").read_text())  # beside report.md, for scripts
    assert [(r["mode_spec"], r["launcher"], r["status"]) for r in rows] == [
        ("aqsgd:2/4", "local", "ok")]
    assert (out / "summary.csv").read_text().startswith(
        "sweep,cell,spec_name,scenario,mode,mode_spec,")


@pytest.mark.slow
@pytest.mark.netns
@pytest.mark.timeout(200)
def test_real_worker_smoke_cell_netns(tmp_path):
    out, outcomes = smoke_sweep(tmp_path, "netns")
    assert [o.status for o in outcomes] == ["ok"]
    meta = check_smoke_cell(out, "netns")
    assert meta["cell"]["shaped"] is True and meta["cell"]["rate_mbit"] == 100
    assert meta["launcher"]["shaping"]["rate"].startswith("htb")
    achieved = [link["rate_mbit_achieved"] for link in meta["probe"]]
    assert all(85 < r < 110 for r in achieved)


@pytest.mark.slow
@pytest.mark.netns
@pytest.mark.timeout(400)
def test_a_local_run_after_a_netns_run_measures_its_own_cell_and_keeps_the_netns_one(
        tmp_path):
    summary = two_launchers_in_one_dir(tmp_path, "netns", "local")
    labels = set(summary["launcher_label"])
    assert labels == {"netns (htb)", "local (none)"}, labels
    assert set(summary["cell"]) == {"100mbps__aqsgd-fw2-bw4", "100mbps__aqsgd-fw2-bw4__local"}


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_real_worker_failure_marks_the_cell_failed_with_the_log_tail(tmp_path):
    failing = Workload(steps=2, train_samples=64, timeout_s=150, dist_timeout_s=20,
                       init_from=None,
                       overrides={"train.fail_at_step": 1, "train.fail_rank": 1})
    out, outcomes = smoke_sweep(tmp_path, "local", failing)
    assert [o.status for o in outcomes] == ["failed"]
    meta = json.loads((out / "100mbps__aqsgd-fw2-bw4__local" / "meta.json").read_text())
    failure = meta["failure"]
    assert failure["rank"] in (0, 1) and failure["returncode"] != 0
    tails = {failure["rank"]: failure["log_tail"],
             **{int(r): v["log_tail"] for r, v in failure["other_ranks"].items()}}
    assert "InjectedFailure" in tails[1]  # the root cause, in rank 1's own log
