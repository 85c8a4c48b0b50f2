"""The suite's own policy (tests/conftest.py), run on tiny test modules by a pytest in a
subprocess: under CI=true every skip fails the run, whether a test skips or a module
skips while it is collected; without CI they are skips. A test that uses a capability
fixture carries its mark, so `-m "not netns"` (make test-fast) leaves it out."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent

COLLECTION_SKIPS = {  # module -> its skip reason, raised while pytest imports it
    "test_module_skip.py": ("import pytest\n\n"
                            "pytest.skip('no widget here', allow_module_level=True)\n\n\n"
                            "def test_widget():\n    pass\n",
                            "no widget here"),
    "test_importorskip.py": ("import pytest\n\n"
                             "pytest.importorskip('aqsgd_no_such_module')\n\n\n"
                             "def test_needs_it():\n    pass\n",
                             "could not import 'aqsgd_no_such_module'"),
}
RUNTIME_SKIP = ("import pytest\n\n\n"
                "def test_skips():\n    pytest.skip('not today')\n\n\n"
                "def test_passes():\n    pass\n")
CI_FAILURE = "skipped in CI, where every capability must be present: "


def _pytest(tmp_path: Path, ci: str | None, *args: str) -> subprocess.CompletedProcess:
    """pytest on the modules in tmp_path, with this suite's conftest as a plugin and no
    ini file (so none of the project's addopts)."""
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(REPO)])  # conftest, then bench
    if ci is not None:
        env["CI"] = ci
    argv = [sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider",
            "-c", os.devnull, "--rootdir", str(tmp_path), "-q", "-rs", *args, str(tmp_path)]
    return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.timeout(240)
def test_a_skip_while_collecting_or_testing_fails_under_ci_and_skips_without(tmp_path):
    for name, (text, _) in COLLECTION_SKIPS.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "test_runtime_skip.py").write_text(RUNTIME_SKIP)
    local = _pytest(tmp_path, None)
    assert local.returncode == 0, local.stdout + local.stderr
    assert local.stdout.splitlines()[-1].startswith("1 passed, 3 skipped in "), local.stdout
    # without the flag CI stops at the first collection error; with it, every case shows
    ci = _pytest(tmp_path, "true", "--continue-on-collection-errors")
    assert ci.returncode == 1, ci.stdout + ci.stderr
    assert ci.stdout.splitlines()[-1].startswith("1 failed, 1 passed, 2 errors in "), ci.stdout
    for name, (_, reason) in COLLECTION_SKIPS.items():
        assert f"ERROR collecting {name}" in ci.stdout, (name, ci.stdout)
        assert f"{CI_FAILURE}Skipped: {reason}" in ci.stdout, (reason, ci.stdout)
    assert f"{CI_FAILURE}Skipped: not today" in ci.stdout, ci.stdout


@pytest.mark.timeout(240)
def test_a_test_using_a_capability_fixture_carries_its_mark(tmp_path):
    (tmp_path / "test_capable.py").write_text(
        "import pytest\n\n\n"
        "def test_uses_netns(netns_usable):\n    pass\n\n\n"
        "def test_uses_docker(docker_usable):\n    pass\n\n\n"
        "@pytest.mark.netns\ndef test_marked_netns():\n    pass\n\n\n"
        "def test_plain():\n    pass\n")
    selected = {}
    for mark in ("netns", "docker_daemon"):
        done = _pytest(tmp_path, None, "--collect-only", "-m", mark)
        assert done.returncode == 0, done.stdout + done.stderr
        selected[mark] = sorted(line.split("::")[1] for line in done.stdout.splitlines()
                                if "::" in line)
    assert selected == {"netns": ["test_marked_netns", "test_uses_netns"],
                        "docker_daemon": ["test_uses_docker"]}
