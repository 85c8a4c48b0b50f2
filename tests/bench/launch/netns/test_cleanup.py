"""Network namespaces torn down after crashes and signals, the cleanup command, and runs
that are left alone.

Needs root and `ip netns` (the `netns` mark). Where those are missing the tests skip,
except under CI=true, where they fail: CI runs as root (tests/conftest.py).
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kill_helpers import kill_watchdogs
from launch_helpers import alive, leftovers

from bench.launch.netns import NetnsLauncher
from bench.net.scenario import load_scenario, with_link

pytestmark = pytest.mark.netns
REPO = Path(__file__).resolve().parents[4]


@pytest.mark.timeout(60)
def test_teardown_after_killed_worker(tmp_path):
    scenario = with_link(load_scenario("10mbps"), delay_ms=1.0)  # also starts the delay line
    with pytest.raises(RuntimeError, match="worker 1 died"):
        with NetnsLauncher(scenario, 2, state_dir=tmp_path) as hosts:
            prefix = hosts.names.prefix
            survivor = hosts.spawn(0, ["sleep", "300"])
            victim = hosts.spawn(1, ["sleep", "300"])
            os.kill(victim.pid, signal.SIGKILL)
            if victim.wait(timeout=10) != 0:
                raise RuntimeError("worker 1 died")
    assert not alive(survivor.pid)
    assert leftovers(prefix) == []
    assert list(tmp_path.iterdir()) == []  # state file and delay-line config removed


LAUNCH_AND_WAIT = """
import signal, sys, time
# as when started from a terminal, even if this test runs where SIGINT is ignored
signal.signal(signal.SIGINT, signal.default_int_handler)
from bench.launch.netns import NetnsLauncher
from bench.net.scenario import load_scenario, parse_scenario, with_link
scenario = with_link(load_scenario("10mbps"), delay_ms=1.0)
with NetnsLauncher(scenario, 2, state_dir=sys.argv[1]) as hosts:
    worker = hosts.spawn(1, ["sleep", "300"])
    print(hosts.names.prefix, hosts.state_path, worker.pid, flush=True)
    time.sleep(300)
"""


def _launch_in_subprocess(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", LAUNCH_AND_WAIT, str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
    line = proc.stdout.readline().split()
    assert len(line) == 3, proc.stderr.read()
    prefix, state_path, worker_pid = line[0], Path(line[1]), int(line[2])
    assert leftovers(prefix) and alive(worker_pid)
    return proc, prefix, state_path, worker_pid


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_signal_tears_down(tmp_path, sig):
    proc, prefix, state_path, worker_pid = _launch_in_subprocess(tmp_path)
    proc.send_signal(sig)
    proc.wait(timeout=30)
    assert leftovers(prefix) == []
    assert not alive(worker_pid)
    assert not state_path.exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("which", ["--state", "--all-recorded"])
def test_cleanup_command_after_sigkill(tmp_path, which):
    proc, prefix, state_path, worker_pid = _launch_in_subprocess(tmp_path)
    kill_watchdogs(tmp_path)  # a crash: nothing tears down, the namespaces and worker stay
    proc.kill()
    proc.wait(timeout=10)
    assert leftovers(prefix) and state_path.exists()
    select = [which, str(state_path)] if which == "--state" else [which, "--state-dir",
                                                                    str(tmp_path)]
    out = subprocess.run([sys.executable, "-m", "bench.launch", "cleanup", *select],
                         capture_output=True, text=True, cwd=REPO, timeout=30)
    assert out.returncode == 0, out.stderr
    assert f"namespace {prefix}-h1" in out.stdout
    assert leftovers(prefix) == []
    deadline = time.monotonic() + 5
    while alive(worker_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(worker_pid)
    assert not state_path.exists()


@pytest.mark.timeout(60)
def test_cleanup_leaves_a_live_run_alone(tmp_path):
    proc, prefix, state_path, worker_pid = _launch_in_subprocess(tmp_path)
    try:
        out = subprocess.run([sys.executable, "-m", "bench.launch", "cleanup", "--all-recorded"],
                             capture_output=True, text=True, cwd=REPO, timeout=30)
        assert out.returncode == 0, out.stderr
        assert f"left alone {state_path}: its launcher (pid {proc.pid}) is running" in out.stdout
        assert leftovers(prefix) and alive(worker_pid) and state_path.exists()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert leftovers(prefix) == []


@pytest.mark.timeout(60)
def test_name_clash_never_adopts_another_runs_namespace(tmp_path, monkeypatch):
    import bench.launch.netns.launcher as netns_module

    prefixes = iter(["aqclsh0", "aqclsh1"])
    monkeypatch.setattr(netns_module, "new_prefix", lambda run_id: next(prefixes))
    subprocess.run(["ip", "netns", "add", "aqclsh0-sw"], check=True)  # "another run"
    try:
        with NetnsLauncher(load_scenario("loopback"), 2, state_dir=tmp_path) as hosts:
            assert hosts.names.prefix == "aqclsh1"
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert "aqclsh0-sw" in listed and "aqclsh1" not in listed
    finally:
        subprocess.run(["ip", "netns", "del", "aqclsh0-sw"], check=True)
