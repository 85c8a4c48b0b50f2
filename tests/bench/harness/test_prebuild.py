"""What cells need is built before the first cell (bench.harness.prebuild): read from the
record's timestamps (builds.json against meta.json's started_at), not from a timing."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from bench.harness.modes import parse_mode
from bench.harness.run import run_sweep
from bench.harness.sweep import SweepSpec, Workload

pytestmark = pytest.mark.workers


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_with_an_empty_cache_the_kernels_are_built_before_the_first_worker_starts(
        tmp_path, monkeypatch):
    cache = tmp_path / "cache"  # empty: the kernels and the tokenizer are built anew
    monkeypatch.setenv("AQSGD_CACHE_DIR", str(cache))
    workload = Workload(steps=1, micro_batch_size=4, num_micro_batches=2, train_samples=32,
                        eval_samples=16, init_from=None,
                        timeout_s=200, dist_timeout_s=60)
    spec = SweepSpec("prebuild", ("100mbps",), (parse_mode("directq:2/4"),), workload)
    lines: list[str] = []
    outcomes = run_sweep(spec, tmp_path / "results", launcher="local", quiet=True,
                         echo=lines.append)
    assert [o.status for o in outcomes] == ["ok"], outcomes
    builds = json.loads((tmp_path / "results" / "builds.json").read_text())
    kernels = next(b for b in builds if b["what"] == "fused CPU kernels")
    assert kernels["how"] == "built" and Path(kernels["path"]).is_relative_to(cache)
    assert Path(kernels["path"]).is_file()
    meta = json.loads((tmp_path / "results" / outcomes[0].name / "meta.json").read_text())
    worker_start = datetime.fromisoformat(meta["started_at"]).timestamp()
    assert kernels["started_unix"] < kernels["ended_unix"] <= worker_start
    assert any(line.startswith("fused CPU kernels: built in ") for line in lines), lines
