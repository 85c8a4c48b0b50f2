"""A harness killed with SIGKILL mid-cell on the SSH launcher, against sshd servers in
namespaces (conftest.py), with no cleanup command: its watchdog (bench.launch.watchdog)
kills the local relays, the channels close and `hostside tied` stops torchrun and the
worker on every host within 10 s; the SSH teardown then removes the qdiscs and the
hosts' records within 30 s, and each rank log says that the harness is gone."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kill_helpers import check_kill, cmdline, naming, sigkill, start_harness, state_files, wait_for

from bench.launch.process import ProcessIdentity
from bench.launch.ssh.hostside import HOST_RECORD_ROOT

pytestmark = [pytest.mark.netns, pytest.mark.workers, pytest.mark.slow]
WAIT_S = 200.0  # bring-up, probe, two torchrun agents and workers importing torch


def _suite_pids(sshd_hosts) -> list[str]:
    """Every process on the hosts but sshd's listener and its per-connection sessions."""
    return [f"h{i} {p}: {cmdline(p)}" for i in range(sshd_hosts.n) for p in sshd_hosts.pids(i)
            if not cmdline(p).startswith("sshd: ")]


def _training(sshd_hosts) -> dict | None:
    """The run's state file once a worker runs on every host."""
    workers = [p for i in range(sshd_hosts.n) for p in sshd_hosts.pids(i)
               if "-m aqsgd.train.worker" in cmdline(p)
               and "torch.distributed.run" not in cmdline(p)]
    states = state_files(sshd_hosts.results)
    return states[0] if states and len(workers) == sshd_hosts.n else None


@pytest.mark.timeout(600)
def test_a_harness_killed_mid_cell_leaves_nothing_on_any_host(sshd_hosts, tmp_path):
    out, log = sshd_hosts.results, tmp_path / "harness.log"
    harness = start_harness(out, log, "ssh", "--hostfile", str(sshd_hosts.hostfile))
    try:
        state = wait_for("a worker on every host", lambda: _training(sshd_hosts), harness,
                         log, WAIT_S)
        time.sleep(5.0)  # into its steps
        assert all(sshd_hosts.qdiscs(i) for i in range(sshd_hosts.n))
    finally:
        killed_at = sigkill(harness)
    relays = [ProcessIdentity.from_dict(p) for p in state["processes"]]
    assert len(relays) == 2

    def processes() -> list:
        return [f"relay {r.pid}" for r in relays if r.is_running()] + _suite_pids(sshd_hosts)

    def built() -> list:
        records = [HOST_RECORD_ROOT / f"{state['prefix']}-h{i}" for i in range(sshd_hosts.n)]
        return ([f"h{i} {q}" for i in range(sshd_hosts.n) for q in sshd_hosts.qdiscs(i)]
                + [str(r) for r in records if Path(r).exists()]
                + list((out / ".launcher").iterdir()) + naming(str(out)))

    check_kill("ssh", harness, killed_at, out, processes, built)
