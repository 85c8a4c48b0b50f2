"""Local launcher: every worker is a process on this machine talking over
127.0.0.1. No root needed and NO network shaping: the scenario's rates and
delays are not applied, and the run record says so (`"shaped": false`).

    with LocalLauncher(load_scenario("100mbps"), n_hosts=2) as hosts:
        p = hosts.spawn(0, [sys.executable, "-m", "aqsgd.train.worker", ...], env, log)

Same interface as bench/netns.py's NetnsLauncher (see docs/ARCHITECTURE.md).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.net.probe import format_table, measure, serve
from bench.net.scenario import NetworkScenario

__all__ = ["LocalLauncher", "UNSHAPED_WARNING"]

UNSHAPED_WARNING = ("UNSHAPED: local launcher, all workers on 127.0.0.1; the scenario's link "
                    "rates, delays, jitter and loss are NOT emulated")
LOOPBACK = "127.0.0.1"
PROBE_BYTES = 64 << 20
KILL_GRACE_S = 2.0


class LocalLauncher:
    def __init__(self, scenario: NetworkScenario | None = None, n_hosts: int | None = None, *,
                 run_id: str | None = None, warn=True, **_ignored_netns_options):
        # warn: True = the sys.stderr of the moment the launcher is entered, a file, or
        # None to stay quiet (resolved late so a replaced sys.stderr is not captured).
        if n_hosts is None and scenario is None:
            raise ValueError("LocalLauncher: give n_hosts or a scenario (its layout's hosts)")
        self.scenario = scenario
        self.n_hosts = scenario.n_hosts if n_hosts is None else n_hosts
        if self.n_hosts < 1:
            raise ValueError(f"n_hosts: expected >= 1, got {self.n_hosts}")
        self.run_id = run_id or f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        self.ignored_options = sorted(_ignored_netns_options)
        self._warn = warn
        self._procs: list[subprocess.Popen] = []
        self._probe_results: list[dict] = []

    def __enter__(self) -> LocalLauncher:
        if self._warn is not None:
            stream = sys.stderr if self._warn is True else self._warn
            print(f"WARNING: {UNSHAPED_WARNING}", file=stream, flush=True)
        return self

    def __exit__(self, *exc) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                for sig in (signal.SIGTERM, signal.SIGKILL):
                    try:
                        os.killpg(proc.pid, sig)
                        proc.wait(timeout=KILL_GRACE_S)
                        break
                    except (ProcessLookupError, subprocess.TimeoutExpired):
                        continue

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
        if log_path is not None:
            with open(log_path, "ab") as log:
                proc = subprocess.Popen(argv, env=full_env, stdout=log,
                                        stderr=subprocess.STDOUT, start_new_session=True)
        else:
            proc = subprocess.Popen(argv, env=full_env, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        self._procs.append(proc)
        return proc

    def probe(self, links=None, check: bool = True, **_ignored) -> list[dict]:
        """One loopback measurement (every local 'link' is the same loopback)."""
        ready = threading.Event()

        class _ReadySignal:  # stands in for serve()'s output stream
            def write(self, text: str) -> None:
                if "listening" in text:
                    ready.set()

            def flush(self) -> None:
                pass

        with socket.socket() as s:  # ask the kernel for a free port
            s.bind((LOOPBACK, 0))
            port = s.getsockname()[1]
        server = threading.Thread(target=serve, args=(LOOPBACK, port, 1, _ReadySignal()),
                                  daemon=True)
        server.start()
        if not ready.wait(10):
            raise RuntimeError("local probe server did not start within 10 s")
        m = measure(LOOPBACK, port, PROBE_BYTES)
        server.join(10)
        self._probe_results = [{"src": 0, "dst": 1 if self.n_hosts > 1 else 0,
                                "rate_mbit_configured": None,
                                "rate_mbit_achieved": m["rate_mbit"],
                                "rate_mbit_first_to_last": m["rate_mbit_first_to_last"],
                                "rtt_ms": m["rtt_ms"], "rtt_ms_min": m["rtt_ms_min"],
                                "rtt_ms_configured": 0.0, "probe_bytes": m["bytes"]}]
        return self._probe_results

    def probe_table(self) -> str:
        return format_table(self._probe_results)

    def record(self) -> dict:
        none = "none (local launcher: loopback, not emulated)"
        return {
            "launcher": "local",
            "shaped": False,
            "warning": UNSHAPED_WARNING,
            "run_id": self.run_id,
            "n_hosts": self.n_hosts,
            "scenario": self.scenario.to_dict() if self.scenario else None,
            "shaping": {p: none for p in ("rate", "delay", "jitter", "loss")},
            "hosts": [{"host": i, "addr": LOOPBACK, "device": "lo"}
                      for i in range(self.n_hosts)],
            "ignored_options": self.ignored_options,
            "probe": self._probe_results,
        }
