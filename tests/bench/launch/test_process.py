"""Worker processes (bench.launch.process): waiting on ranks, process groups stopped whole,
process identities and killing only the process identified."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from launch_helpers import alive, exited

from bench.launch.process import (
    ProcessIdentity,
    kill_identified,
    spawn_group,
    stop_all,
    stop_group,
    wait_for_workers,
)


# --------------------------------------------------------------- waiting
def _py(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code])


@pytest.mark.timeout(60)
def test_wait_reports_first_failing_rank_and_stops_the_rest():
    procs = [_py("import time; time.sleep(60)"), _py("import sys; sys.exit(3)")]
    started = time.monotonic()
    failure = wait_for_workers(procs, timeout_s=30, grace_s=1)
    assert failure["rank"] == 1 and failure["returncode"] == 3
    assert time.monotonic() - started < 10
    assert all(p.poll() is not None for p in procs)


@pytest.mark.timeout(60)
def test_wait_times_out_and_names_the_ranks_still_running():
    procs = [_py("pass"), _py("import time; time.sleep(60)")]
    failure = wait_for_workers(procs, timeout_s=2)
    assert failure["rank"] == 1 and "timeout" in failure["reason"]
    assert procs[1].poll() is not None


@pytest.mark.timeout(60)
def test_wait_all_ok_is_none():
    assert wait_for_workers([_py("pass"), _py("pass")], timeout_s=30) is None


def test_process_groups_are_stopped_whole(tmp_path):
    # a leader that ignores SIGTERM, with a child: both go (SIGKILL after the grace)
    code = ("import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, "
            "signal.SIG_IGN); c = subprocess.Popen(['sleep', '60']); print(c.pid, flush=True);"
            " time.sleep(60)")
    leader = spawn_group([sys.executable, "-c", code], pipe_stdout=True)
    child = int(leader.stdout.readline())
    assert os.getpgid(leader.pid) == leader.pid == os.getpgid(child)
    t0 = time.monotonic()
    stop_group(leader, grace_s=0.5)
    assert leader.returncode == -9 and 0.5 <= time.monotonic() - t0 < 5
    deadline = time.monotonic() + 5
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child)
    # output appended to a log; a process that leads no group is signalled alone
    log = tmp_path / "out.log"
    log.write_text("before\n")
    spawn_group([sys.executable, "-c", "print('after')"], log_path=log).wait(timeout=30)
    assert log.read_text() == "before\nafter\n"
    plain = subprocess.Popen(["sleep", "60"])
    stop_all([plain, None])
    assert plain.returncode == -15


def test_identity_names_one_process(sleeper):
    me = ProcessIdentity.of(os.getpid())
    assert me.is_running() and ProcessIdentity.from_dict(me.to_dict()) == me
    other = ProcessIdentity.of(sleeper.pid)
    assert other.is_running() and other.start_ticks >= me.start_ticks
    # the same pid started at another time (a reused pid) is another process
    assert not ProcessIdentity(sleeper.pid, other.start_ticks + 1, other.boot_id).is_running()
    assert not ProcessIdentity(sleeper.pid, other.start_ticks, "another-boot").is_running()
    with pytest.raises(ValueError, match="ProcessIdentity.pid: expected an integer >= 0"):
        ProcessIdentity(-1, 0, "b")


def test_kill_identified_never_signals_a_reused_pid(sleeper):
    ident = ProcessIdentity.of(sleeper.pid)
    stranger = ProcessIdentity(sleeper.pid, ident.start_ticks + 1, ident.boot_id)
    assert kill_identified([stranger]) == []
    assert not exited(sleeper, 0.3)
    assert kill_identified([ident]) == [f"process {sleeper.pid}"]
    assert exited(sleeper)
