"""What the harness-kill tests share (tests/bench/launch/, every launcher): a real
`python -m bench run` cell started as a subprocess, the processes that name its results
folder, the watchdog of its launcher (bench.launch.watchdog), a SIGKILL, and a clock for
what is left afterwards."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WATCHDOG = "-m bench.launch.watchdog"
WORKERS_S, BUILT_S = 10.0, 30.0  # the bounds, from the kill


def start_harness(out: Path, log: Path, launcher: str, *options: str,
                  scenario: str = "10mbps") -> subprocess.Popen:
    """One fp32 cell on 2 hosts of `launcher`, long enough to be killed in the middle; in a
    session of its own, so that no signal of the test reaches it. 10 Mbit/s by default: a
    rate the probe finds within its 10% on a loaded 2-core machine."""
    argv = [sys.executable, "-m", "bench", "run", "--scenario", scenario, "--modes", "fp32",
            "--stages", "2", "--steps", "400", "--train-samples", "64", "--reference", "none",
            "--init-from", "none", "--launcher", launcher, *options, "--quiet", "--out",
            str(out)]
    with open(log, "ab") as f:
        return subprocess.Popen(argv, cwd=REPO, stdout=f, stderr=f, stdin=subprocess.DEVNULL,
                                env={**os.environ, "PYTHONPATH": str(REPO)},
                                start_new_session=True)


def cmdline(pid: int | str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (FileNotFoundError, ProcessLookupError):
        return ""


def naming(text: str) -> list[int]:
    """Every process (but this one) whose command line holds `text`."""
    return [int(pid) for pid in os.listdir("/proc")
            if pid.isdigit() and int(pid) != os.getpid() and text in cmdline(pid)]


def watchdogs(state_dir: Path) -> list[int]:
    """The watchdogs of the launchers whose state files go to state_dir (a sweep's:
    RESULTS/.launcher)."""
    return [p for p in naming(str(Path(state_dir).resolve())) if WATCHDOG in cmdline(p)]


def kill_watchdogs(state_dir: Path) -> list[int]:
    """SIGKILL the watchdogs of state_dir's runs (their pids): with the harness killed
    next, a run is left as a machine that crashed leaves it (what `make net-cleanup` is
    for)."""
    found = watchdogs(state_dir)
    for pid in found:
        os.kill(pid, signal.SIGKILL)
    return found


def state_files(out: Path) -> list[dict]:
    """The state files of the sweep's launcher runs, as they are now."""
    states = []
    for path in (out / ".launcher").glob("aq*.json"):
        try:
            states.append(json.loads(path.read_text()))
        except (FileNotFoundError, json.JSONDecodeError):
            continue  # being replaced, or not a run's (the delay line's config)
    return [s for s in states if "launcher" in s]


def training(out: Path) -> dict | None:
    """The run's state file once both its ranks have written a metrics record (None
    before): workers that train, on a launcher whose results folder is this machine's."""
    written = [f for f in out.glob("*/metrics/rank*.jsonl") if f.stat().st_size]
    states = state_files(out)
    return states[0] if states and len(written) == 2 else None


def wait_for(what: str, ready: Callable[[], object], harness: subprocess.Popen, log: Path,
             timeout_s: float):
    """ready()'s first true value within timeout_s, while the harness runs."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert harness.poll() is None, f"the harness exited early:\n{log.read_text()[-3000:]}"
        if found := ready():
            return found
        time.sleep(0.5)
    raise AssertionError(f"no {what} within {timeout_s} s:\n{log.read_text()[-3000:]}")


def sigkill(harness: subprocess.Popen) -> float:
    """SIGKILL the harness alone (if it still runs); the monotonic time it was gone."""
    if harness.poll() is None:
        os.kill(harness.pid, signal.SIGKILL)
        assert harness.wait(timeout=10) == -signal.SIGKILL
    return time.monotonic()


def seconds_until(gone: Callable[[], list], since: float, timeout_s: float) -> float:
    """Seconds from `since` until gone() returns [] (polled every 0.1 s); an assertion
    naming what is left after timeout_s."""
    left = gone()
    while left and time.monotonic() - since < timeout_s:
        time.sleep(0.1)
        left = gone()
    assert left == [], f"still there {timeout_s} s after the harness was killed: {left}"
    return time.monotonic() - since


def check_kill(launcher: str, harness: subprocess.Popen, killed_at: float, out: Path,
               processes: Callable[[], list], built: Callable[[], list]) -> None:
    """After the kill: processes() empty within WORKERS_S, built() within BUILT_S, each
    of the two rank logs saying that the harness is gone; prints the seconds."""
    workers_s = seconds_until(processes, killed_at, WORKERS_S)
    built_s = seconds_until(built, killed_at, BUILT_S)
    rank_logs = sorted(out.glob("*/logs/rank*.log"))
    assert len(rank_logs) == 2
    for rank_log in rank_logs:
        assert f"the harness (pid {harness.pid}) is gone" in rank_log.read_text(), rank_log
    print(f"\n{launcher}: the last process of the run ended {workers_s:.1f} s after the "
          f"harness was killed, what it built was gone after {built_s:.1f} s")
