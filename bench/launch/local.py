"""Local launcher: every worker is a process on this machine talking over 127.0.0.1. No
root needed and NO network shaping: the record says so (`"shaped": false`).

    with LocalLauncher(load_scenario("100mbps"), n_hosts=2) as hosts:
        p = hosts.spawn(0, [sys.executable, "-m", "aqsgd.train.worker", ...], env, log)

Its transport (bench.launch.hosts) is this machine. Kill-safe: each worker leads its own
session and starts through PDEATHSIG_GUARD, so the kernel kills it when the harness (its
parent's spawning thread: spawn from a thread that outlives the workers) dies; the state
file lists every worker's identity, so `python -m bench.launch cleanup` and the next local
run in the same STATE_DIR kill exactly those (`teardown_state` has nothing else to
remove). docs/architecture/launch.md, "Launchers", has the reasoning.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from aqsgd.filecache import atomic_write_text
from bench.launch.hosts import Hosts
from bench.launch.process import (
    TEARDOWN_GRACE_S,
    free_port,
    isolated,
    python_argv,
    spawn_group,
    stop_all,
)
from bench.launch.state import launcher_fields
from bench.net.executor import Executor
from bench.net.probe import ProbeRecord, measure, plan_probe, serve
from bench.net.scenario import NetworkScenario

__all__ = ["PDEATHSIG_GUARD", "LocalLauncher", "UNSHAPED_WARNING", "guarded", "teardown_state"]

UNSHAPED_WARNING = ("UNSHAPED: local launcher, all workers on 127.0.0.1; the scenario's link "
                    "rates, delays, jitter and loss are NOT emulated")
LOOPBACK = "127.0.0.1"
SERVER_START_TIMEOUT_S = 10.0
NOT_EMULATED = "none (local launcher: loopback, not emulated)"

# Runs as `python -P -c PDEATHSIG_GUARD HARNESS_PID ARGV...`: SIGKILL on the harness's death
# (PR_SET_PDEATHSIG = 1, kept across execve), then exec ARGV. The parent check closes the
# race of a harness killed between fork and prctl (then the guard's parent is init).
PDEATHSIG_GUARD = """\
import ctypes, os, signal, sys
if ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0) != 0:
    sys.exit(f"prctl(PR_SET_PDEATHSIG): errno {ctypes.get_errno()}")
if os.getppid() != int(sys.argv[1]):
    sys.exit("the harness that started this worker has exited")
os.execvp(sys.argv[2], sys.argv[2:])
"""


def guarded(argv: list[str]) -> list[str]:
    """argv started through PDEATHSIG_GUARD: it dies with this process. A Python argv
    runs with -P (bench.launch.process, Note [safe path])."""
    return python_argv(sys.executable, "-c", PDEATHSIG_GUARD, str(os.getpid()),
                       *isolated(argv))


def teardown_state(state: dict, path: Path, executor: Executor) -> list[str]:
    """A killed local run's teardown (bench.launch.state.cleanup, by its state file):
    its only leftovers are the processes the file lists, which cleanup has killed
    already (those whose identity still matches); nothing else to remove."""
    return []


class LocalLauncher(Hosts):
    """Context manager for `n_hosts` hosts that are all this machine (see module doc).

    `run_id` as NetnsLauncher's; `state_dir`: where its state file goes (None:
    DEFAULT_STATE_DIR; a sweep's is RESULTS/.launcher), named in the registry of state
    dirs on entry (bench.launch.lifecycle), where the leftovers of killed local runs are
    removed first. `warn`: where the UNSHAPED warning goes on entry: True = the
    sys.stderr of that moment (resolved late, so a replaced sys.stderr is not captured),
    a file, or None to stay quiet."""

    name = "local"
    shaped = False
    mechanisms = {p: NOT_EMULATED for p in ("rate", "delay", "jitter", "loss")}

    def __init__(self, scenario: NetworkScenario | None = None, n_hosts: int | None = None, *,
                 run_id: str | None = None, state_dir: Path | str | None = None, warn=True):
        if n_hosts is None and scenario is None:
            raise ValueError("LocalLauncher: give n_hosts or a scenario (its layout's hosts)")
        super().__init__(scenario, n_hosts, run_id=run_id, state_dir=state_dir)
        self._warn = warn

    def _write_state(self) -> None:
        state = {**launcher_fields(self.name, self.run_id, self.prefix),
                 "processes": [p.to_dict() for p in self._started]}
        atomic_write_text(self.state_path, json.dumps(state, indent=1))

    def _prepare(self) -> None:
        if self._warn is not None:
            stream = sys.stderr if self._warn is True else self._warn
            print(f"WARNING: {UNSHAPED_WARNING}", file=stream, flush=True)

    def _build(self) -> None:
        self._write_state()

    def _remove(self) -> None:
        stop_all(self._procs, TEARDOWN_GRACE_S)
        self.state_path.unlink(missing_ok=True)

    def addr(self, i: int) -> str:
        self._check_host(i)
        return LOOPBACK

    def worker_env(self, i: int) -> dict[str, str]:
        self._check_host(i)
        return {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo"}

    def spawn(self, i: int, argv: list[str], env: dict[str, str] | None = None,
              log_path: Path | str | None = None) -> subprocess.Popen:
        """Run argv as a local process in its own process group, ended with this process
        (PDEATHSIG_GUARD) and recorded in the state file; env as NetnsLauncher."""
        proc = spawn_group(guarded(list(argv)), self.worker_environ(i, env), log_path)
        self._procs.append(proc)
        self._note_log(log_path)
        self._started_process(proc)
        return proc

    def _run_on_host(self, i: int, argv: list[str]) -> subprocess.CompletedProcess:
        self._check_host(i)
        return Executor().run(argv)

    def helper_argv(self, i: int, argv: list[str]) -> list[str]:
        self._check_host(i)
        return isolated([sys.executable, *argv[1:]] if argv[:1] == ["python"] else argv)

    def probe(self, links: list[tuple[int, int]] | None = None, check: bool = True,
              tolerance: float = 0.10, duration_s: float = 1.0) -> list[ProbeRecord]:
        """One loopback measurement, planned as an unshaped link (bench.net.probe.plan_probe):
        every local 'link' is the same loopback, so `links` and `duration_s` change
        nothing, and an unshaped link
        promises no rate, so `check` and `tolerance` have nothing to hold it to."""
        ready = threading.Event()

        class _ReadySignal:  # stands in for serve()'s output stream
            def write(self, text: str) -> None:
                if "listening" in text:
                    ready.set()

            def flush(self) -> None:
                pass

        port = free_port(LOOPBACK)
        server = threading.Thread(target=serve, args=(LOOPBACK, port, 1, _ReadySignal()),
                                  daemon=True)
        server.start()
        if not ready.wait(SERVER_START_TIMEOUT_S):
            raise RuntimeError(f"local probe server did not start within "
                               f"{SERVER_START_TIMEOUT_S:g} s")
        plan = plan_probe(None, 0.0)
        m = measure(LOOPBACK, port, plan.bulk_bytes, plan.steady_from_bytes,
                    plan.timeout_s)
        server.join(SERVER_START_TIMEOUT_S)
        self._probe_records = [ProbeRecord.from_measurement(
            0, 1 if self.n_hosts > 1 else 0, m, rate_mbit_configured=None,
            rtt_ms_configured=0.0)]
        return self._probe_records

    def start_schedule(self) -> None:
        """Nothing: loopback has no links to change (record() says so)."""

    def stop_schedule(self) -> dict | None:
        return None

    def _record(self) -> dict:
        return {
            "warning": UNSHAPED_WARNING,
            "shaping": {p: NOT_EMULATED for p in ("rate", "delay", "jitter", "loss", "schedule")},
            "hosts": [{"host": i, "addr": LOOPBACK, "device": "lo"}
                      for i in range(self.n_hosts)],
        }
