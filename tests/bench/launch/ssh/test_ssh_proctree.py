"""`hostside tied` and `teardown` stop the whole tree of what they started, with real
processes: a stand-in for torchrun that ignores SIGTERM and starts its "worker" in a
session of its own (as torchrun does), which also ignores SIGTERM. A signal to
torchrun's process group reaches neither worker nor (for SIGKILL) anything but the
stand-in; stopping the tree reaches both. And a pid is only signalled while it is
still the process that was identified."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.launch.process import ProcessIdentity
from bench.launch.ssh.proctree import descendants, send, stop_tree

REPO = Path(__file__).resolve().parents[4]
# the stand-in for torchrun: its worker in a new session, both deaf to SIGTERM
AGENT = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
worker = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"],
    start_new_session=True)
open(sys.argv[1], "w").write(f"{worker.pid}\\n")
time.sleep(300)
"""


def _tied(tmp_path: Path) -> tuple[subprocess.Popen, ProcessIdentity, ProcessIdentity]:
    """`hostside tied` over AGENT, stdin on a pipe: (tied, agent, worker), once the
    worker runs."""
    pid_file = tmp_path / "worker.pid"
    tied = subprocess.Popen(
        [sys.executable, "-m", "bench.launch.ssh.hostside", "tied", "--dir",
         str(tmp_path / "record"), "--", sys.executable, "-c", AGENT, str(pid_file)],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdin=subprocess.PIPE,
        start_new_session=True)
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text().endswith("\n")):
        assert time.monotonic() < deadline and tied.poll() is None, "the worker never started"
        time.sleep(0.05)
    worker = ProcessIdentity.of(int(pid_file.read_text()))
    agents = [i for i in descendants(tied.pid) if i != worker]
    assert worker is not None and len(agents) == 1
    return tied, agents[0], worker


@pytest.fixture
def cleanup():
    """Whatever a failing test left, killed by identity."""
    left: list[ProcessIdentity] = []
    yield left
    for ident in left:
        send(ident, signal.SIGKILL)


def test_tied_stops_a_worker_in_its_own_session_when_its_input_closes(tmp_path, cleanup):
    tied, agent, worker = _tied(tmp_path)
    cleanup += [worker, agent]
    assert os.getsid(worker.pid) == worker.pid != os.getsid(agent.pid)  # as torchrun does
    tied.stdin.close()  # the SSH channel closed
    assert tied.wait(timeout=30) == 128 + signal.SIGKILL  # the agent would not stop on TERM
    assert not worker.is_running() and not agent.is_running()
    assert list((tmp_path / "record" / "procs").glob("*.json")) == []


def test_the_worker_of_an_agent_that_died_first_stays_below_tied_and_is_stopped(
        tmp_path, cleanup):
    tied, agent, worker = _tied(tmp_path)
    cleanup += [worker, agent]
    os.kill(agent.pid, signal.SIGKILL)  # torchrun gone before it stopped its worker
    assert tied.wait(timeout=30) == 128 + signal.SIGKILL
    assert not worker.is_running()


def test_teardown_stops_the_recorded_tied_and_everything_below_it(tmp_path, cleanup):
    tied, agent, worker = _tied(tmp_path)
    cleanup += [worker, agent]
    record = tmp_path / "record"
    assert [json.loads(p.read_text())["pid"] for p in (record / "procs").glob("*.json")] \
        == [tied.pid]
    done = subprocess.run([sys.executable, "-m", "bench.launch.ssh.hostside", "teardown",
                           "--dir", str(record)], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60, check=True)
    removed = json.loads(done.stdout)
    assert {f"process {p}" for p in (tied.pid, agent.pid, worker.pid)} <= set(removed)
    tied.wait(timeout=10)
    assert not worker.is_running() and not agent.is_running()
    assert not record.exists()


def test_a_pid_is_signalled_only_while_it_is_the_identified_process(sleeper):
    ident = ProcessIdentity.of(sleeper.pid)
    stranger = ProcessIdentity(ident.pid, ident.start_ticks + 1, ident.boot_id)  # a reused pid
    assert send(stranger, signal.SIGKILL) is False
    assert stop_tree(stranger, grace_s=0.0, include_root=True) == []
    assert sleeper.poll() is None
    assert send(ident, signal.SIGKILL) is True
    assert sleeper.wait(timeout=10) == -signal.SIGKILL
