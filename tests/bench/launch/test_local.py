"""The local launcher (bench.launch.local): unshaped loopback, the environment, the record;
kill-safe: workers die with the harness, and its state file lets cleanup kill exactly
what a killed run left."""

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kill_helpers import kill_watchdogs
from launch_helpers import exited

from bench import REPO_ROOT
from bench.launch.local import LocalLauncher, guarded
from bench.launch.process import ProcessIdentity
from bench.net.probe import ProbeRecord
from bench.net.scenario import load_scenario


@pytest.mark.timeout(60)
def test_local_launcher(tmp_path):
    out = tmp_path / "env.json"
    code = ("import json, os, sys; json.dump({k: os.environ.get(k) for k in "
            "('GLOO_SOCKET_IFNAME', 'EXTRA')}, open(sys.argv[1], 'w'))")
    with LocalLauncher(load_scenario("100mbps"), 2, warn=None) as hosts:
        assert hosts.addr(1) == "127.0.0.1"
        p = hosts.spawn(1, [sys.executable, "-c", code, str(out)], {"EXTRA": "x"},
                        tmp_path / "w1.log")
        assert p.wait(timeout=30) == 0
        sleeper = hosts.spawn(0, ["sleep", "60"])
        probe = hosts.probe()
        rec = hosts.record()
    assert sleeper.poll() is not None  # killed on exit
    assert json.loads(out.read_text()) == {"GLOO_SOCKET_IFNAME": "lo", "EXTRA": "x"}
    assert rec["shaped"] is False and "UNSHAPED" in rec["warning"]
    assert probe[0].rate_mbit_achieved > 100
    # the same record as every launcher's, in the run record too
    assert probe[0].rate_mbit_configured is None and probe[0].host_limited is False
    assert rec["probe"] == [probe[0].to_dict()]
    assert list(rec["probe"][0]) == [f.name for f in dataclasses.fields(ProbeRecord)]


def _listed_workers(state_dir, count: int, timeout_s: float) -> list[ProcessIdentity]:
    """The worker identities the local launcher's state file in state_dir lists, once it
    lists `count` running ones."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for path in state_dir.glob("aq*.json"):
            try:
                state = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError):
                continue
            procs = [ProcessIdentity.from_dict(p) for p in state["processes"]]
            if state["launcher"] == "local" and len(procs) >= count and all(
                    p.is_running() for p in procs):
                return procs
        time.sleep(0.2)
    raise AssertionError(f"no local state file in {state_dir} listed {count} running workers")


def _gone(procs: list[ProcessIdentity], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while any(p.is_running() for p in procs):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(300)
def test_a_harness_killed_mid_cell_leaves_no_local_worker_and_kills_nothing_else(
        tmp_path, sleeper):
    out = tmp_path / "results"
    harness = subprocess.Popen(
        [sys.executable, "-m", "bench", "run", "--scenario", "loopback", "--modes", "fp32",
         "--steps", "100000", "--train-samples", "64", "--init-from", "none",
         "--reference", "none", "--launcher", "local", "--out", str(out), "--quiet"],
        cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)
    try:
        workers = _listed_workers(out / ".launcher", 2, timeout_s=200)
        kill_watchdogs(out / ".launcher")  # a crash: only the kernel (PDEATHSIG) ends them
        harness.kill()  # SIGKILL: no finally, no __exit__ runs
        harness.wait()
        # the kernel ends them with the harness (PR_SET_PDEATHSIG), whatever cleanup does
        assert _gone(workers, timeout_s=10), [p.pid for p in workers if p.is_running()]
    finally:
        harness.kill()
        harness.wait()
    assert sleeper.poll() is None  # a process of nobody's run lives on
    # what the killed run recorded is found and removed by `make net-cleanup`'s command
    states = list((out / ".launcher").glob("aq*.json"))
    assert len(states) == 1
    done = subprocess.run([sys.executable, "-m", "bench.launch", "cleanup", "--all-recorded",
                           "--state-dir", str(out / ".launcher")], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert not states[0].exists() and sleeper.poll() is None


@pytest.mark.timeout(60)
def test_cleanup_kills_exactly_the_workers_a_killed_local_run_recorded(tmp_path, sleeper):
    # a worker that outlived its harness (started without the guard): cleanup, by the
    # state file, kills it and only it
    stray = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        dead = subprocess.Popen(["true"])
        dead_ident = ProcessIdentity.of(dead.pid) or ProcessIdentity(dead.pid, 1, "old boot")
        dead.wait()
        state = {"launcher": "local", "run_id": "t", "prefix": "aqloc01",
                 "launcher_pid": dead_ident.pid, "launcher_process": dead_ident.to_dict(),
                 "processes": [ProcessIdentity.of(stray.pid).to_dict(),
                               # a recycled pid: the sleeper's pid under another start time
                               {**ProcessIdentity.of(sleeper.pid).to_dict(),
                                "start_ticks": 1}]}
        path = tmp_path / "aqloc01.json"
        path.write_text(json.dumps(state))
        done = subprocess.run([sys.executable, "-m", "bench.launch", "cleanup", "--state",
                               str(path)], cwd=REPO_ROOT, capture_output=True, text=True,
                              timeout=30)
        assert done.returncode == 0, done.stderr
        assert exited(stray, 5.0) and f"process {stray.pid}" in done.stdout
        assert sleeper.poll() is None and not path.exists()
    finally:
        stray.kill()
        stray.wait()


@pytest.mark.timeout(60)
def test_local_workers_start_through_the_guard_and_are_recorded(tmp_path):
    with LocalLauncher(n_hosts=1, state_dir=tmp_path, warn=None) as hosts:
        p = hosts.spawn(0, ["sleep", "60"])
        state = json.loads(hosts.state_path.read_text())
        assert state["launcher"] == "local" and state["launcher_pid"] == os.getpid()
        assert state["processes"] == [ProcessIdentity.of(p.pid).to_dict()]
        # after the guard's exec the worker is the command itself, same pid
        deadline = time.monotonic() + 10
        while Path(f"/proc/{p.pid}/cmdline").read_bytes().split(b"\0")[0] != b"sleep":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert hosts.record()["prefix"] == hosts.state_path.stem
    assert p.poll() is not None and not hosts.state_path.exists()
    assert guarded(["x"])[-2:] == [str(os.getpid()), "x"]
