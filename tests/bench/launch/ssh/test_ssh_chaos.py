"""The chaos sweep's SSH part (docs/robustness.md), against sshd servers in namespaces
(conftest.py): a resumable sweep of three cells whose first harness is killed with
SIGKILL mid-cell and whose second loses a host mid-cell; the third run of the same
command completes it. Every cell is complete or failed with its reason after each run,
no finished cell changes, and nothing is left running or shaped on any host, before any
cleanup command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kill_helpers import REPO, cmdline, seconds_until, sigkill, state_files, wait_for

from bench.launch.ssh.hostside import HOST_RECORD_ROOT

pytestmark = [pytest.mark.netns, pytest.mark.workers, pytest.mark.slow]
MODES = ("fp32", "aqsgd:2/4", "directq:2/4")
WORKERS_S, BUILT_S = 10.0, 30.0  # after a harness kill (issue 30), before any cleanup
START_S = 400.0  # bring-up, probe, torchrun agents and workers importing torch


def _harness(hosts, log: Path) -> subprocess.Popen:
    """`bench run` of MODES at 10 Mbit/s on the hosts (resumable, as a sweep), in a
    session of its own."""
    argv = [sys.executable, "-m", "bench", "run", "--scenario", "10mbps", "--modes", *MODES,
            "--stages", "2", "--steps", "3", "--train-samples", "64", "--eval-samples", "0",
            "--reference", "none", "--init-from", "none", "--timeout-s", "200",
            "--launcher", "ssh", "--hostfile", str(hosts.hostfile), "--quiet",
            "--out", str(hosts.results)]
    with open(log, "ab") as f:
        return subprocess.Popen(argv, cwd=REPO, stdout=f, stderr=f, stdin=subprocess.DEVNULL,
                                env={**os.environ, "PYTHONPATH": str(REPO)},
                                start_new_session=True)


def _cells(out: Path) -> dict[str, str]:
    """Each cell's record: 'ok', 'failed: REASON', or '' (none yet)."""
    found = {}
    for cell in sorted(out.glob("10mbps__*__ssh")):
        path = cell / "meta.json"
        meta = json.loads(path.read_text()) if path.is_file() else None
        found[cell.name] = "" if meta is None else meta["status"] + (
            f": {meta['failure']['reason']}" if meta["failure"] else "")
    return found


def _workers(hosts) -> list[int]:
    return [p for i in range(hosts.n) for p in hosts.pids(i)
            if "-m aqsgd.train.worker" in cmdline(p) and "torch.distributed.run" not in cmdline(p)]


def _suite_pids(hosts) -> list[str]:
    return [f"h{i} {p}: {cmdline(p)[:100]}" for i in range(hosts.n) for p in hosts.pids(i)
            if not cmdline(p).startswith("sshd: ")]


def _built(hosts, prefixes: set[str]) -> list[str]:
    """Non-default qdiscs on the hosts and the host records of the runs seen."""
    return ([f"h{i} {q}" for i in range(hosts.n) for q in hosts.qdiscs(i)]
            + [str(HOST_RECORD_ROOT / f"{p}-h{i}") for p in sorted(prefixes)
               for i in range(hosts.n) if (HOST_RECORD_ROOT / f"{p}-h{i}").exists()])


def _prefixes(out: Path, seen: set[str]) -> set[str]:
    seen.update(s["prefix"] for s in state_files(out))
    return seen


def _finished(out: Path) -> dict[str, bytes]:
    return {name: (out / name / "meta.json").read_bytes() + (out / name / "metrics.csv")
            .read_bytes() for name, rec in _cells(out).items() if rec == "ok"}


@pytest.mark.timeout(1500)
def test_a_sweep_over_ssh_survives_a_harness_kill_and_a_host_dropping(sshd_hosts, tmp_path):
    out, log = sshd_hosts.results, tmp_path / "harness.log"
    table, seen = [], set()
    first = _harness(sshd_hosts, log)
    try:  # killed in its second cell, once a worker runs on every host
        wait_for("the second cell on every host",
                 lambda: "ok" in _cells(out).values() and len(_workers(sshd_hosts)) == 2,
                 first, log, START_S)
        _prefixes(out, seen)
        time.sleep(2.0)
    finally:
        killed_at = sigkill(first)
    workers_s = seconds_until(lambda: _suite_pids(sshd_hosts), killed_at, WORKERS_S)
    built_s = seconds_until(lambda: _built(sshd_hosts, seen), killed_at, BUILT_S)
    finished = _finished(out)
    table.append(("harness killed", _cells(out), f"0 processes after {workers_s:.1f} s, "
                  f"0 qdiscs and host records after {built_s:.1f} s"))

    second = _harness(sshd_hosts, log)
    try:  # host 1 drops in its first cell
        wait_for("a worker on every host", lambda: len(_workers(sshd_hosts)) == 2, second,
                 log, START_S)
        _prefixes(out, seen)
        sshd_hosts.set_link(1, up=False)
        code = second.wait(timeout=600)  # never a hang
    finally:
        if second.poll() is None:
            sigkill(second)
        sshd_hosts.set_link(1, up=True)
    after_drop = _cells(out)
    assert code == 1, log.read_text()[-3000:]
    assert "took over the lock" in log.read_text()
    dropped = [rec for rec in after_drop.values() if rec.startswith("failed")]
    assert dropped and all(rec.startswith(("ok", "failed: ")) for rec in after_drop.values())
    table.append(("host 1 dropped", after_drop, ", ".join(_suite_pids(sshd_hosts)) or "-"))

    third = _harness(sshd_hosts, log)
    assert third.wait(timeout=600) == 0, log.read_text()[-3000:]
    done = _cells(out)
    table.append(("resumed to the end", done, ", ".join(_suite_pids(sshd_hosts)) or "-"))
    for fault, cells, left in table:
        print(f"\nssh chaos: {fault}: {json.dumps(cells)}; left: {left}")
    assert set(done.values()) == {"ok"} and len(done) == len(MODES), done
    assert {n: b for n, b in _finished(out).items() if n in finished} == finished
    assert _suite_pids(sshd_hosts) == [] and _built(sshd_hosts, seen) == []
    assert not list((out / ".launcher").glob("*.json"))
