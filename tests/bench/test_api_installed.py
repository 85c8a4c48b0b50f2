"""The suite from a wheel installed outside the checkout (docs/api.md, "From an installed
package"): built from a copy of the sources, installed into an empty folder, imported
from there in another directory, where a scenario name resolves, a profile loads by name
and bench.api runs a smoke cell on the local launcher. The wheel puts nothing in
site-packages but its three packages: the scenarios and profiles are the bench
package's data, the CPU kernels' sources aqsgd.quant's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from bench import REPO_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.workers, pytest.mark.timeout(600)]

# what `pip wheel` reads: pyproject.toml names README.md and the packages' folders
# (bench/scenarios and bench/profiles link to scenarios/ and profiles/)
SOURCES = ("pyproject.toml", "README.md", "aqsgd", "bench", "specfile", "scenarios",
           "profiles")

SCRIPT = textwrap.dedent("""
    import bench
    from bench import api
    print("from", bench.__file__)
    print("scenarios", len(api.scenarios()))
    from bench.perfmodel.profile import load_profile
    print("profile", load_profile("cpu-2core").name, bench.PROFILE_DIR)
    print("sweeps", bench.SCENARIO_DIR / "sweeps" / "paper.yaml")
    row = api.run_cell("100mbps", "aqsgd:2/4", "results/one", launcher="local", steps=2,
                       train_samples=64, init_from=None, echo=lambda line: None)
    print("cell", row["cell"], row["status"])
""")


def test_an_installed_wheel_runs_a_cell_outside_the_checkout(tmp_path):
    src, site, work = tmp_path / "src", tmp_path / "site", tmp_path / "work"
    src.mkdir()
    for name in SOURCES:
        if (REPO_ROOT / name).is_dir():
            shutil.copytree(REPO_ROOT / name, src / name, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO_ROOT / name, src / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w",
                    str(tmp_path / "wheel"), str(src)], check=True, timeout=300)
    wheel, = (tmp_path / "wheel").glob("*.whl")
    subprocess.run([*pip, "install", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, timeout=300)
    assert (site / "bench" / "scenarios" / "100mbps.yaml").is_file()
    assert (site / "bench" / "scenarios" / "sweeps" / "paper.yaml").is_file()
    assert (site / "bench" / "profiles" / "cpu-2core.yaml").is_file()
    assert (site / "aqsgd" / "quant" / "fused_kernels.cpp").is_file()
    top = sorted(p.name for p in site.iterdir() if not p.name.endswith(".dist-info"))
    assert top == ["aqsgd", "bench", "bin", "specfile"], top  # no generic names
    work.mkdir()
    # the installed copy first on the path, ahead of the checkout's editable install
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=work, env=env,
                          capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert f"from {site / 'bench' / '__init__.py'}" in lines
    assert f"profile cpu-2core {site / 'bench' / 'profiles'}" in lines
    assert f"sweeps {site / 'bench' / 'scenarios' / 'sweeps' / 'paper.yaml'}" in lines
    assert "cell 100mbps__aqsgd-fw2-bw4__local ok" in lines
    assert int(next(x for x in lines if x.startswith("scenarios")).split()[1]) > 10
