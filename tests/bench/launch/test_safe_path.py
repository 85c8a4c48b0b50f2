"""Workers that do not read the caller's folder (bench.launch.process, Note [safe path]):
a real local run started from a folder that holds a `json.py` and a `torch.py` which
raise on import succeeds; it crashed every worker, the watchdog and the probes while
`python -m` put the current folder first on their sys.path."""

from __future__ import annotations

import json

import pytest

from bench.harness.run import run_sweep
from bench.harness.sweep import SweepSpec, Workload, parse_mode
from bench.launch.process import SAFE_PATH, isolated, python_argv

pytestmark = [pytest.mark.workers, pytest.mark.slow, pytest.mark.timeout(600)]
# as tests/harness_helpers.py SMOKE: 2 stages of the tiny preset, 2 measured steps
SMOKE = Workload(steps=2, train_samples=64, timeout_s=240, dist_timeout_s=60, init_from=None)


def test_python_argvs_get_the_flag_once_and_other_programs_none():
    assert python_argv("/v/bin/python3", "-m", "x") == ["/v/bin/python3", SAFE_PATH, "-m", "x"]
    assert isolated(["/v/bin/python3.11", "-m", "x"]) == ["/v/bin/python3.11", "-P", "-m", "x"]
    assert isolated(["python", "-P", "-c", "1"]) == ["python", "-P", "-c", "1"]
    assert isolated(["sleep", "1"]) == ["sleep", "1"]


def test_a_local_run_from_a_folder_that_shadows_json_and_torch_succeeds(tmp_path, monkeypatch):
    caller = tmp_path / "caller"
    caller.mkdir()
    for name in ("json", "torch"):
        (caller / f"{name}.py").write_text(
            f"raise ImportError('{name}.py of the caller folder was imported')\n")
    monkeypatch.chdir(caller)
    out = caller / "out"
    spec = SweepSpec("smoke", ("100mbps",), (parse_mode("fp32"),), SMOKE)
    outcomes = run_sweep(spec, out, launcher="local", quiet=True, echo=lambda s: None)
    failures = {o.name: json.loads((out / o.name / "meta.json").read_text()).get("failure")
                for o in outcomes if o.status != "ok"}
    assert [o.status for o in outcomes] == ["ok"] * len(outcomes) and outcomes, failures
    logs = "".join(p.read_text() for p in out.glob("*/logs/*.log"))
    assert "of the caller folder was imported" not in logs
