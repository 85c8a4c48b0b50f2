"""A harness killed with SIGKILL in the middle of a cell, for real, together with its
watchdog (as a machine crash leaves a run; the watchdog alone is tests/bench/launch/
test_watchdog.py): `python -m bench run` on shaped network namespaces, killed once its
workers train; a rerun of the same sweep
removes what the killed run left before it builds its own hosts; after a second kill,
the cleanup that `make net-cleanup` runs leaves no namespace, device, qdisc or process
of the suite.

Needs root and `ip netns` (the `netns` mark); skips without them, except under CI=true,
where a skip fails (tests/conftest.py).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kill_helpers import kill_watchdogs

from bench.launch.process import ProcessIdentity
from bench.launch.state import all_recorded_state_files, run_is_live

pytestmark = [pytest.mark.netns, pytest.mark.slow, pytest.mark.workers]
REPO = Path(__file__).resolve().parents[4]
SUITE_NAME = re.compile(r"\baq[0-9a-f]{5}")  # bench.launch.hosts.new_prefix
WAIT_S = 150.0  # bring-up, probe and two workers importing torch on a loaded 2-core host


def _harness(out: Path, log: Path) -> subprocess.Popen:
    """One fp32 cell on 2 shaped hosts, long enough to be killed in the middle."""
    argv = [sys.executable, "-m", "bench", "run", "--scenario", "100mbps", "--modes", "fp32",
            "--stages", "2", "--steps", "400", "--train-samples", "64", "--reference", "none",
            "--init-from", "none", "--launcher", "netns", "--quiet", "--out", str(out)]
    with open(log, "ab") as f:
        return subprocess.Popen(argv, cwd=REPO, stdout=f, stderr=f, stdin=subprocess.DEVNULL,
                                env={**os.environ, "PYTHONPATH": str(REPO)},
                                start_new_session=True)  # so that no signal of ours hits it


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (FileNotFoundError, ProcessLookupError):
        return ""


def _wait_for_training(out: Path, harness: subprocess.Popen, log: Path,
                       not_prefix: str | None = None) -> dict:
    """The state file of the run whose two workers are running and have written a
    metrics record (a prefix other than `not_prefix`)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        assert harness.poll() is None, f"the harness exited early:\n{log.read_text()[-3000:]}"
        for path in (out / ".launcher").glob("aq*.json"):
            try:
                state = json.loads(path.read_text())
            except (FileNotFoundError, json.JSONDecodeError):
                continue
            if state.get("prefix") == not_prefix or "-delayline" in path.name:
                continue
            workers = [p for p in state["processes"]
                       if "aqsgd.train.worker" in _cmdline(p["pid"])]
            if len(workers) == 2 and any(
                    f.stat().st_size for f in out.glob("*/metrics/rank*.jsonl")):
                return state
        time.sleep(0.5)
    raise AssertionError(f"no training workers within {WAIT_S} s:\n{log.read_text()[-3000:]}")


def _sigkill(harness: subprocess.Popen) -> None:
    os.kill(harness.pid, signal.SIGKILL)  # the harness only: workers are in their own groups
    assert harness.wait(timeout=10) == -signal.SIGKILL


def _suite_names() -> list[str]:
    """Every namespace, root-namespace link and root qdisc line with a suite name."""
    lines = []
    for argv in (["ip", "netns", "list"], ["ip", "-o", "link", "show"],
                 ["tc", "qdisc", "show"]):
        text = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        lines += [f"{argv[0]} {argv[-1]}: {ln}" for ln in text.splitlines()
                  if SUITE_NAME.search(ln)]
    return lines


def _names_of(state: dict) -> list[str]:
    return [ln for ln in _suite_names() if state["prefix"] in ln]


def _running(state: dict) -> list[int]:
    return [p["pid"] for p in state["processes"]
            if ProcessIdentity.from_dict(p).is_running()]


def _processes_naming(out: Path) -> list[str]:
    """Processes whose command line names the sweep's directory (workers: their config;
    the delay line: its config in the state dir)."""
    return [f"{pid}: {_cmdline(int(pid))}" for pid in os.listdir("/proc")
            if pid.isdigit() and int(pid) != os.getpid() and str(out) in _cmdline(int(pid))]


def _live_runs_names() -> set[str]:
    """Suite names that live runs (of anyone on this host) have recorded."""
    names = set()
    for path in all_recorded_state_files():
        try:
            state = json.loads(path.read_text())
        except FileNotFoundError:
            continue
        if run_is_live(state):
            names.add(state["prefix"])
    return names


def _wait_until_gone(pids: list[int], out: Path, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (_processes_naming(out) or any(_cmdline(p) for p in pids)) \
            and time.monotonic() < deadline:
        time.sleep(0.1)


@pytest.mark.timeout(600)
def test_sigkill_mid_cell_then_rerun_and_net_cleanup_leave_nothing(results, tmp_path):
    out, log = results, tmp_path / "harness.log"
    before = set(_suite_names())

    first = _harness(out, log)
    try:
        killed = _wait_for_training(out, first, log)
    finally:
        kill_watchdogs(out / ".launcher")
        _sigkill(first)
    # what a kill leaves: the namespaces and the training workers
    assert _names_of(killed) and len(_running(killed)) >= 2

    rerun = _harness(out, log)
    try:
        second = _wait_for_training(out, rerun, log, not_prefix=killed["prefix"])
        # the rerun removed the killed run's names and processes before building its own
        assert _names_of(killed) == [] and _running(killed) == []
        assert not (out / ".launcher" / f"{killed['prefix']}.json").exists()
        assert _names_of(second) and len(_running(second)) >= 2
    finally:
        kill_watchdogs(out / ".launcher")
        _sigkill(rerun)

    done = subprocess.run([sys.executable, "-m", "bench.launch", "cleanup", "--all-recorded"],
                          cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert f"namespace {second['prefix']}-h1" in done.stdout
    _wait_until_gone([p["pid"] for p in second["processes"]], out)
    assert _names_of(killed) == [] and _names_of(second) == []
    assert _running(second) == [] and _processes_naming(out) == []
    assert list((out / ".launcher").iterdir()) == []
    # nothing new with a suite name but what live runs of others record
    live = _live_runs_names()
    assert [ln for ln in set(_suite_names()) - before
            if not any(prefix in ln for prefix in live)] == []
