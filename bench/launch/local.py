"""Local launcher: every worker is a process on this machine talking over
127.0.0.1. No root needed and NO network shaping: the scenario's rates and
delays are not applied, and the run record says so (`"shaped": false`).

    with LocalLauncher(load_scenario("100mbps"), n_hosts=2) as hosts:
        p = hosts.spawn(0, [sys.executable, "-m", "aqsgd.train.worker", ...], env, log)

The same contract as the netns and Docker launchers (bench/launch/base.py's Launcher).
Imports the core of bench/launch and bench.net; no other launcher.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from bench.launch.base import new_run_id
from bench.launch.process import TEARDOWN_GRACE_S, free_port, spawn_group, stop_all
from bench.net.probe import ProbeRecord, measure, plan_probe, serve
from bench.net.scenario import NetworkScenario

__all__ = ["LocalLauncher", "UNSHAPED_WARNING"]

UNSHAPED_WARNING = ("UNSHAPED: local launcher, all workers on 127.0.0.1; the scenario's link "
                    "rates, delays, jitter and loss are NOT emulated")
LOOPBACK = "127.0.0.1"
SERVER_START_TIMEOUT_S = 10.0


class LocalLauncher:
    """Context manager for `n_hosts` hosts that are all this machine (see module doc).

    `run_id` as NetnsLauncher's; `state_dir` is accepted for the same reason and
    unused: the local launcher creates nothing that outlives its processes.
    `warn`: where the UNSHAPED warning goes on entry: True = the sys.stderr of that
    moment (resolved late, so a replaced sys.stderr is not captured), a file, or
    None to stay quiet."""

    name = "local"
    shaped = False

    def __init__(self, scenario: NetworkScenario | None = None, n_hosts: int | None = None, *,
                 run_id: str | None = None, state_dir: Path | str | None = None, warn=True):
        if n_hosts is None and scenario is None:
            raise ValueError("LocalLauncher: give n_hosts or a scenario (its layout's hosts)")
        self.scenario = scenario
        self.n_hosts = scenario.n_hosts if n_hosts is None else n_hosts
        if self.n_hosts < 1:
            raise ValueError(f"n_hosts: expected >= 1, got {self.n_hosts}")
        self.run_id = run_id or new_run_id()
        self._warn = warn
        self._procs: list[subprocess.Popen] = []
        self._probe_records: list[ProbeRecord] = []

    def __enter__(self) -> LocalLauncher:
        if self._warn is not None:
            stream = sys.stderr if self._warn is True else self._warn
            print(f"WARNING: {UNSHAPED_WARNING}", file=stream, flush=True)
        return self

    def __exit__(self, *exc) -> None:
        stop_all(self._procs, TEARDOWN_GRACE_S)

    def _check_host(self, i: int) -> None:
        if not 0 <= i < self.n_hosts:
            raise IndexError(f"host index {i} out of range [0, {self.n_hosts})")

    def addr(self, i: int) -> str:
        self._check_host(i)
        return LOOPBACK

    def worker_env(self, i: int) -> dict[str, str]:
        self._check_host(i)
        return {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo"}

    def spawn(self, i: int, argv: list[str], env: dict[str, str] | None = None,
              log_path: Path | str | None = None) -> subprocess.Popen:
        """Run argv as a local process in its own process group; env as NetnsLauncher."""
        full_env = dict(os.environ if env is None else env)
        full_env.update(self.worker_env(i))
        proc = spawn_group(argv, full_env, log_path)
        self._procs.append(proc)
        return proc

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

    def record(self) -> dict:
        none = "none (local launcher: loopback, not emulated)"
        return {
            "launcher": self.name,
            "shaped": self.shaped,
            "warning": UNSHAPED_WARNING,
            "run_id": self.run_id,
            "n_hosts": self.n_hosts,
            "scenario": self.scenario.to_dict() if self.scenario else None,
            "shaping": {p: none for p in ("rate", "delay", "jitter", "loss", "schedule")},
            "hosts": [{"host": i, "addr": LOOPBACK, "device": "lo"}
                      for i in range(self.n_hosts)],
            "probe": [r.to_dict() for r in self._probe_records],
        }
