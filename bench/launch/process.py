"""Processes of a run: a free port, waiting for a group of ranks, stopping them.

    port = free_port()
    failure = wait_for_workers(procs, timeout_s=600)   # None when every rank exits 0
    stop_all(procs)                                    # whatever is still running

Every process a launcher spawns runs in its own process group
(`start_new_session=True`), so stopping one stops its children too.
"""

from __future__ import annotations

import socket
import subprocess
import time

__all__ = ["FAIL_GRACE_S", "free_port", "stop_all", "wait_for_workers"]

FAIL_GRACE_S = 20.0  # after one rank fails, how long the others get to exit


def free_port(addr: str = "127.0.0.1") -> int:
    """A TCP port the kernel says is free on `addr` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def wait_for_workers(procs: list[subprocess.Popen], timeout_s: float,
                     grace_s: float = FAIL_GRACE_S) -> dict | None:
    """Wait for every rank. None when all exit 0; else a failure record
    {rank, returncode, reason}. Survivors of a failure or a timeout are
    terminated (then killed) so nothing is left running."""
    deadline = time.monotonic() + timeout_s
    failure: dict | None = None
    while True:
        codes = [p.poll() for p in procs]
        if failure is None:
            bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                rank, code = bad[0]
                failure = {"rank": rank, "returncode": code,
                           "reason": f"rank {rank} exited with code {code}"}
                deadline = min(deadline, time.monotonic() + grace_s)
        if all(c is not None for c in codes):
            return failure
        if time.monotonic() > deadline:
            running = [r for r, c in enumerate(codes) if c is None]
            if failure is None:
                failure = {"rank": running[0], "returncode": None,
                           "reason": f"timeout after {timeout_s:.0f} s; ranks {running} "
                                     "still running"}
            stop_all(procs)
            return failure
        time.sleep(0.05)


def stop_all(procs: list[subprocess.Popen]) -> None:
    """Terminate every process still running, then kill those that do not exit."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)
