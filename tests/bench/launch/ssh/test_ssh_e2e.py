"""The SSH launcher end to end, with the real worker, against sshd servers in namespaces
(conftest.py): a 100mbps smoke cell gives the bytes per step and held-out loss of the
same cell on the netns launcher, its probe within 5% of the rates; a harness killed with
SIGKILL mid-cell with its watchdog (as a machine crash leaves it; the watchdog alone:
test_ssh_watchdog.py), then `python -m bench.launch cleanup --all-recorded` (what `make
net-cleanup` runs), leaves no qdisc, process or record on any host and no state file
here; a host that drops off the network mid-run fails the cell naming the host, within
a bounded time, and is left running no worker (its sshd closing the session stops the
whole tree `hostside tied` started, torchrun's workers in their own sessions too)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from kill_helpers import kill_watchdogs

from bench.harness.run import run_sweep
from bench.harness.sweep import SweepSpec, Workload, parse_mode
from bench.launch.ssh.hostside import HOST_RECORD_ROOT

pytestmark = [pytest.mark.netns, pytest.mark.workers, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[4]
CELL = "100mbps__aqsgd-fw2-bw4"  # its directory on netns; other launchers tag it
SSH_CELL = f"{CELL}__ssh"
# as tests/harness_helpers.py SMOKE: 2 stages of the tiny preset, 1 warm-up step, 2 measured
SMOKE = Workload(steps=2, train_samples=64, timeout_s=240, dist_timeout_s=60, init_from=None)
WAIT_S = 200.0  # bring-up, probe, two torchrun agents and workers importing torch


def _smoke(out: Path, launcher: str, **options) -> dict:
    spec = SweepSpec("smoke", ("100mbps",), (parse_mode("aqsgd:2/4"),), SMOKE)
    outcomes = run_sweep(spec, out, launcher=launcher, quiet=True, echo=lambda s: None,
                         launcher_options=options or None)
    meta = json.loads((out / _cell(launcher) / "meta.json").read_text())
    assert [o.status for o in outcomes] == ["ok"], meta.get("failure")
    return meta


def _cell(launcher: str) -> str:
    """The smoke cell's directory on `launcher` (bench.harness.meta.cell_dir_name)."""
    return CELL if launcher == "netns" else f"{CELL}__{launcher}"


def _frame(out: Path, launcher: str) -> pd.DataFrame:
    return pd.read_csv(out / _cell(launcher) / "metrics.csv")


@pytest.mark.timeout(900)
def test_a_smoke_cell_over_ssh_matches_the_netns_launcher(sshd_hosts, tmp_path):
    ssh_meta = _smoke(sshd_hosts.results, "ssh", hostfile=sshd_hosts.hostfile)
    netns_meta = _smoke(tmp_path / "netns", "netns")
    ssh, netns = _frame(sshd_hosts.results, "ssh"), _frame(tmp_path / "netns", "netns")
    key = ["kind", "rank", "step"]
    columns = ["bytes_sent_activation", "bytes_sent_gradient", "bytes_recv_total", "samples"]
    assert ssh[key + columns].sort_values(key).reset_index(drop=True).equals(
        netns[key + columns].sort_values(key).reset_index(drop=True))
    held_out = [f[f["kind"] == "eval"]["eval_loss"].dropna().tolist() for f in (ssh, netns)]
    assert held_out[0] and held_out[0] == pytest.approx(held_out[1], rel=1e-6, abs=1e-6)
    assert ssh_meta["cell"]["launcher"] == "ssh" and ssh_meta["cell"]["shaped"] is True
    for link in ssh_meta["probe"]:
        assert abs(link["rate_mbit_achieved"] - 100.0) <= 5.0, link
    # the metrics came back over SFTP: each host's results folder is its own tmpfs
    log = (sshd_hosts.results / SSH_CELL / "logs" / "rank1.log").read_text()
    assert f"[h1 {sshd_hosts.addr(1)}] aqsgd.train.worker: rank 1 (stage 1, replica 0) of 2 " \
           "starting: " in log.splitlines()[0], log[:2000]
    # the suite's own lines only: no dependency's deprecation warnings (asyncssh's DSA)
    assert "DeprecationWarning" not in log, log[:2000]
    # nor c10d's C++ warnings (no name resolution for the namespaces' addresses)
    for logs in (sshd_hosts.results / SSH_CELL / "logs", tmp_path / "netns"):
        for rank_log in logs.glob("**/rank*.log"):
            assert "[c10d]" not in rank_log.read_text(), rank_log
    assert ssh_meta["launcher"]["hosts"][1]["addr"] == sshd_hosts.addr(1)
    print(f"\nssh {ssh_meta['probe']}\nnetns {netns_meta['probe']}")


# -- a harness killed, a host lost ------------------------------------------------------
def _harness(out: Path, hostfile: Path, log: Path) -> subprocess.Popen:
    """One fp32 cell on 2 hosts over SSH, long enough to be killed in the middle."""
    argv = [sys.executable, "-m", "bench", "run", "--scenario", "100mbps", "--modes", "fp32",
            "--stages", "2", "--steps", "400", "--train-samples", "64", "--reference", "none",
            "--init-from", "none", "--launcher", "ssh", "--hostfile", str(hostfile),
            "--quiet", "--out", str(out)]
    with open(log, "ab") as f:
        return subprocess.Popen(argv, cwd=REPO, stdout=f, stderr=f, stdin=subprocess.DEVNULL,
                                env={**os.environ, "PYTHONPATH": str(REPO)},
                                start_new_session=True)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (FileNotFoundError, ProcessLookupError):
        return ""


def _workers(sshd_hosts, hosts: range | None = None) -> list[int]:
    return [p for i in (hosts or range(sshd_hosts.n)) for p in sshd_hosts.pids(i)
            if "-m aqsgd.train.worker" in _cmdline(p)
            and "torch.distributed.run" not in _cmdline(p)]


def _wait_for_training(sshd_hosts, harness: subprocess.Popen, log: Path,
                       killed: dict | None = None) -> dict:
    """The run's state file once a worker trains on every host (and, after `killed`, once
    that run's workers are gone: a rerun removes them first)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        assert harness.poll() is None, f"the harness exited early:\n{log.read_text()[-3000:]}"
        states = [json.loads(p.read_text())
                  for p in (sshd_hosts.results / ".launcher").glob("aq*.json")]
        states = [st for st in states if killed is None or st["prefix"] != killed["prefix"]]
        old = set() if killed is None else set(killed["workers"])
        workers = _workers(sshd_hosts)
        if states and len(workers) == sshd_hosts.n and not old & set(workers):
            time.sleep(5.0)  # into its steps
            return {**states[0], "workers": workers}
        time.sleep(0.5)
    raise AssertionError(f"no workers on the hosts within {WAIT_S} s:\n"
                         f"{log.read_text()[-3000:]}")


def _cleanup_all_recorded() -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench.launch", "cleanup", "--all-recorded"],
                          cwd=REPO, capture_output=True, text=True, timeout=180,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def _suite_pids(sshd_hosts, i: int) -> list[int]:
    """Host i's processes other than sshd's own per-connection sessions (`sshd:
    root@notty`): a session whose client vanished while the link was down lives until
    sshd's TCP connection times out; sshd made it, not the suite."""
    return [p for p in sshd_hosts.pids(i) if not _cmdline(p).startswith("sshd: ")]


def _assert_nothing_left(sshd_hosts, state: dict) -> None:
    deadline = time.monotonic() + 15.0
    while any(_suite_pids(sshd_hosts, i) for i in range(sshd_hosts.n)) and \
            time.monotonic() < deadline:
        time.sleep(0.2)  # the sessions of the cleanup's own connections end
    for i in range(sshd_hosts.n):
        assert sshd_hosts.qdiscs(i) == [], f"host {i}"
        left = _suite_pids(sshd_hosts, i)
        assert left == [], [_cmdline(p) for p in left]
        assert not Path(HOST_RECORD_ROOT / f"{state['prefix']}-h{i}").exists()
    assert list((sshd_hosts.results / ".launcher").glob("aq*.json")) == []
    relays = [p["pid"] for p in state["processes"]]
    assert not any("bench.launch.ssh.relay" in _cmdline(p) for p in relays)


def _sigkill(harness: subprocess.Popen, out: Path) -> None:
    kill_watchdogs(out / ".launcher")  # a crash: nothing is left to tear the run down
    os.kill(harness.pid, signal.SIGKILL)  # the harness only: relays have their own groups
    harness.wait(timeout=10)


@pytest.mark.timeout(900)
def test_sigkill_mid_cell_then_rerun_and_net_cleanup_leave_nothing_on_any_host(
        sshd_hosts, tmp_path):
    log = tmp_path / "harness.log"
    first = _harness(sshd_hosts.results, sshd_hosts.hostfile, log)
    try:
        killed = _wait_for_training(sshd_hosts, first, log)
    finally:
        _sigkill(first, sshd_hosts.results)
    # what a kill leaves: the shaping, the workers, the relays, the records
    assert all(sshd_hosts.qdiscs(i) for i in range(sshd_hosts.n))
    assert len(_workers(sshd_hosts)) == sshd_hosts.n
    assert all(Path(HOST_RECORD_ROOT / f"{killed['prefix']}-h{i}").is_dir()
               for i in range(sshd_hosts.n))

    rerun = _harness(sshd_hosts.results, sshd_hosts.hostfile, log)
    try:
        # the rerun removed the killed run's records and workers before shaping anew
        second = _wait_for_training(sshd_hosts, rerun, log, killed=killed)
        assert not any(Path(HOST_RECORD_ROOT / f"{killed['prefix']}-h{i}").exists()
                       for i in range(sshd_hosts.n))
        assert not (sshd_hosts.results / ".launcher" / f"{killed['prefix']}.json").exists()
    finally:
        _sigkill(rerun, sshd_hosts.results)

    done = _cleanup_all_recorded()
    assert done.returncode == 0, done.stderr
    for i in range(sshd_hosts.n):
        assert f"root@{sshd_hosts.addr(i)}: tc qdisc del dev {sshd_hosts.dev(i)} root" \
            in done.stdout, done.stdout
    _assert_nothing_left(sshd_hosts, second)
    _assert_nothing_left(sshd_hosts, killed)


@pytest.mark.timeout(600)
def test_a_host_that_drops_mid_run_fails_the_cell_naming_it(sshd_hosts, tmp_path):
    log = tmp_path / "harness.log"
    harness = _harness(sshd_hosts.results, sshd_hosts.hostfile, log)
    try:
        state = _wait_for_training(sshd_hosts, harness, log)
        assert _workers(sshd_hosts, range(1, 2))
        sshd_hosts.set_link(1, up=False)
        dropped = time.monotonic()
        code = harness.wait(timeout=180)  # never a hang
        took_s = time.monotonic() - dropped
        # host 1, still off the network: its sshd gives up on the silent client, the
        # session closes, and `tied` stops torchrun and the worker in its own session
        deadline = time.monotonic() + 60.0
        while _suite_pids(sshd_hosts, 1) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = _suite_pids(sshd_hosts, 1)
        assert left == [], [_cmdline(p) for p in left]
        print(f"\nhost 1, still dropped, ran nothing of the suite "
              f"{time.monotonic() - dropped:.1f} s after the drop")
    finally:
        if harness.poll() is None:
            _sigkill(harness, sshd_hosts.results)
        sshd_hosts.set_link(1, up=True)
    try:
        assert code == 1, log.read_text()[-3000:]
        meta = json.loads((sshd_hosts.results / "100mbps__fp32__ssh" / "meta.json")
                          .read_text())
        assert meta["status"] == "failed"
        failure = meta["failure"]
        assert failure["rank"] == 1 and failure["returncode"] == 255
        assert f"host root@{sshd_hosts.addr(1)} dropped" in failure["log_tail"]
        print(f"\nthe cell failed {took_s:.1f} s after host 1 dropped: {failure['reason']}")
        # the launcher could not tear host 1 down; its state file says what is left there
        left = json.loads((sshd_hosts.results / ".launcher" / f"{state['prefix']}.json")
                          .read_text())
        assert [h["entry"]["host"] for h in left["hosts"]] == [sshd_hosts.addr(1)]
        assert sshd_hosts.qdiscs(0) == [] and sshd_hosts.qdiscs(1)
    finally:  # whatever failed above, the hosts' records go (later tests look for none)
        done = _cleanup_all_recorded()
    assert done.returncode == 0, done.stderr
    _assert_nothing_left(sshd_hosts, state)
