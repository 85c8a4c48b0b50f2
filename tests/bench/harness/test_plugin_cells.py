"""Real cells of the example plug-in (examples/plugins/randproj.py) with the real worker:
loaded from its file (`--plugin`) and installed as a package (its aqsgd.compressors entry
point), each on the local and the netns launcher; the workers load it from the run
config, send the bytes its rule says, and the cell reaches the tables, figures and
summary files.

The installed package goes into a temporary venv (its site-packages chained to the
suite's .venv by a .pth line) whose python runs `bench run`, so the workers
(sys.executable) find the entry point and nothing is installed into the shared .venv.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pandas as pd
import pytest
from harness_helpers import SMOKE

from aqsgd.compress.registry import load_plugins, unload_plugins
from bench.__main__ import finish_sweep
from bench.harness.modes import parse_mode
from bench.harness.run import run_sweep
from bench.harness.sweep import SweepSpec

pytestmark = [pytest.mark.workers, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "plugins"
CELL = "100mbps__randproj-fw4-bw8"


def _check_cell(out: Path, launcher: str, source: str) -> dict:
    """The randproj cell finished with the plug-in named in its spec and run config, and
    its coded steps sent exactly its byte rule's bytes."""
    cell = out / (CELL + ("" if launcher == "netns" else f"__{launcher}"))
    meta = json.loads((cell / "meta.json").read_text())
    assert meta["status"] == "ok", meta.get("failure")
    assert [p["module"] for p in meta["spec"]["plugins"]] == ["randproj"]
    (plugin,) = meta["run_config"]["plugins"]
    assert (plugin["source"], plugin["version"]) == (source, "0.1")
    config = meta["run_config"]
    b, length, width = (config["pipeline"]["micro_batch_size"], config["model"]["seq_len"],
                        config["model"]["n_embd"])
    # a steady message: the int64 header (3 + B,), then (B, L, k) fp16, k = D * 4 / 16
    coded = config["pipeline"]["num_micro_batches"] * ((3 + b) * 8 + b * length * width // 4 * 2)
    frame = pd.read_csv(cell / "metrics.csv")
    train = frame[(frame["kind"] == "train") & (frame["stage"] == 0)].set_index("step")
    assert train.loc[train.index.max(), "bytes_sent_activation"] == coded
    assert train.loc[0, "bytes_sent_activation"] > 7 * coded  # the fp32 warm-up
    return meta


def _check_report(out: Path) -> None:
    assert finish_sweep(out) == 0
    assert "randproj:4/8" in (out / "report.md").read_text()
    rows = json.loads((out / "summary.json").read_text())
    assert [r["mode_spec"] for r in rows] == ["randproj:4/8"]
    assert (out / "figures" / "bytes_per_step.png").is_file()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("launcher", ["local", pytest.param("netns", marks=pytest.mark.netns)])
def test_a_file_plugin_runs_a_real_cell(tmp_path, launcher):
    plugins = load_plugins([str(EXAMPLE / "randproj.py")])
    try:
        spec = SweepSpec("plug", ("100mbps",), (parse_mode("randproj"),), SMOKE)
        out = tmp_path / "results"
        outcomes = run_sweep(spec, out, launcher=launcher, quiet=True, echo=lambda s: None)
        assert [o.status for o in outcomes] == ["ok"]
        _check_cell(out, launcher, str(EXAMPLE / "randproj.py"))
        _check_report(out)
    finally:
        unload_plugins(plugins)


@pytest.fixture(scope="module")
def venv_with_package(tmp_path_factory) -> Path:
    """A venv with the example installed as a package; its python."""
    root = tmp_path_factory.mktemp("plugin-venv")
    shutil.copytree(EXAMPLE, root / "src", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", root / "venv"], check=True)
    python = root / "venv" / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True,
                          check=True).stdout.strip()
    suite = sysconfig.get_paths()["purelib"]
    Path(site, "aqsgd_suite.pth").write_text(f"import site; site.addsitedir({suite!r})\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--no-build-isolation", "--target", site, root / "src"], check=True,
                   cwd=root)
    return python


@pytest.mark.timeout(400)
@pytest.mark.parametrize("launcher", ["local", pytest.param("netns", marks=pytest.mark.netns)])
def test_an_installed_plugin_runs_a_real_cell(tmp_path, launcher, venv_with_package):
    out = tmp_path / "results"
    run = subprocess.run(
        [venv_with_package, "-m", "bench", "run", "--scenario", "100mbps", "--launcher",
         launcher, "--modes", "randproj", "--stages", "2", "--steps", "2",
         "--train-samples", "64", "--init-from", "none", "--reference", "none", "--quiet",
         "--out", out], cwd=REPO, capture_output=True, text=True, timeout=360)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    _check_cell(out, launcher, "randproj")  # the module the entry point names
    assert "randproj:4/8" in (out / "report.md").read_text()
