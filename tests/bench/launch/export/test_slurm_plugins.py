"""A Slurm export of plug-in cells (docs/plugins.md): its script runs, before anything
is shaped, a step on every node that loads each plug-in the cells run and stops the job
naming the node and the plug-in when a node lacks it or has another copy. The step's
command runs here as each node would run it."""

from __future__ import annotations

import json
import platform
import shlex
import subprocess
import sys

import pytest

from aqsgd.compress import registry
from bench import REPO_ROOT
from bench.__main__ import main

EXAMPLE = REPO_ROOT / "examples" / "plugins" / "randproj.py"
SWEEP = f"""name: slurmplug
scenarios: [100mbps]
modes: [randproj:4/8]
plugins: [{EXAMPLE}]
workload: {{steps: 2, train_samples: 64, stages: 2, timeout_s: 240, dist_timeout_s: 60,
           init_from: null}}
"""


def _node_check(expect: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aqsgd.compress.plugins", "--expect", expect],
                          capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"})


@pytest.mark.slow
def test_every_node_must_load_the_same_copy_before_anything_is_shaped(tmp_path, capsys):
    sweep, out = tmp_path / "sweep.yaml", tmp_path / "results"
    sweep.write_text(SWEEP)
    try:
        code = main(["slurm", "--sweep", str(sweep), "--out", str(out), "--scenario",
                     "100mbps", "--iface", "eth0"])
        (plugin,) = registry.plugins_of("randproj")
    finally:
        registry.unload_plugins([p for p in registry.PLUGINS.values() if p.module == "randproj"])
    assert code == 0, capsys.readouterr()
    script = (out / "slurm-100mbps.sbatch").read_text()
    subprocess.run(["bash", "-n", str(out / "slurm-100mbps.sbatch")], check=True)
    (line,) = [x for x in script.splitlines() if "-m aqsgd.compress.plugins --expect" in x]
    assert script.index(line) < script.index("slurm_job shape")  # before the shaping
    words = shlex.split(line.split("||")[0])
    expect = words[words.index("--expect") + 1]
    assert json.loads(expect) == [plugin.to_dict()]
    assert words[:2] == ["srun", "--overlap"] and "--ntasks-per-node=1" in words
    assert _node_check(expect).returncode == 0  # this node has the same copy
    other = json.dumps([{**plugin.to_dict(), "sha256": "0" * 16}])
    done = _node_check(other)
    assert done.returncode == 1
    assert done.stderr.startswith(f"{platform.node()}: plug-in randproj: another copy of "
                                  f"{EXAMPLE} (sha256 {plugin.sha256}, here {'0' * 16})")
