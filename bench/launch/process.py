"""Processes of a run: starting one in its own process group, waiting for a group of
ranks, stopping them, a free port. Every launcher starts and stops processes here.

    proc = spawn_group(argv, env, log_path)            # own session; output -> log
    line = read_ready_line(proc, "listening", "probe server")
    failure = wait_for_workers(procs, timeout_s=600)   # None when every rank exits 0
    stop_all(procs)                                    # whatever is still running
    port = free_port()
    argv = python_argv(sys.executable, "-m", "bench.net.probe")   # [python, "-P", ...]
    me = ProcessIdentity.of(os.getpid())               # pid + start time + boot: one process
    kill_identified([me])                              # only if that very process still runs

A process from `spawn_group` leads its own process group (`start_new_session`), so
stopping it signals the whole group: its children (data loaders, `ip netns exec`
helpers) stop with it. A process that leads no group (started elsewhere) is
signalled alone.

Note [safe path]: every Python process the suite starts runs as `python -P` (3.11+: no
current folder first on sys.path) with PYTHONSAFEPATH=1 in its environment, which the
interpreters it starts in turn (torchrun's workers) inherit; else a `json.py` in the
folder a run is started from shadows the standard library in every worker. Why -P and
not -I: docs/multihost.md, "Workers that do not read the caller's folder".
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench import REPO_ROOT

__all__ = ["FAIL_GRACE_S", "REPO_ROOT", "SAFE_PATH", "SAFE_PATH_ENV", "STOP_GRACE_S",
           "TEARDOWN_GRACE_S", "ProcessIdentity", "env_with_repo", "free_port", "is_python",
           "isolated", "kill_identified", "python_argv", "read_ready_line", "spawn_group",
           "stop_all", "stop_group", "wait_for_workers"]

FAIL_GRACE_S = 20.0  # after one rank fails, how long the others get to exit
STOP_GRACE_S = 5.0  # SIGTERM to SIGKILL, for the harness's ranks
TEARDOWN_GRACE_S = 2.0  # the same when a launcher exits or drops a helper
KILL_WAIT_S = 10.0  # after SIGKILL; longer only in uninterruptible sleep (left to the kernel)
READY_TIMEOUT_S = 20.0
SAFE_PATH = "-P"  # Note [safe path]
SAFE_PATH_ENV = {"PYTHONSAFEPATH": "1"}  # the same for the interpreters a process starts


def is_python(program: str) -> bool:
    """Whether `program` names a Python interpreter (python, python3, /x/bin/python3.11)."""
    return Path(program).name.startswith("python")


def python_argv(python: str, *args: str) -> list[str]:
    """`python -P ARGS`: a Python process that does not read the current folder."""
    return [python, SAFE_PATH, *args]


def isolated(argv: Sequence[str]) -> list[str]:
    """argv with -P after a leading Python interpreter (once); any other argv as it is
    (PYTHONSAFEPATH in its environment covers the interpreters it starts)."""
    argv = list(argv)
    if argv and is_python(argv[0]) and argv[1:2] != [SAFE_PATH]:
        return python_argv(argv[0], *argv[1:])
    return argv


def spawn_group(argv: Sequence[str], env: dict[str, str] | None = None,
                log_path: Path | str | None = None, *,
                pipe_stdout: bool = False, stdin_pipe: bool = False) -> subprocess.Popen:
    """Start argv in a new session (its own process group) with stdin on /dev/null, or
    with `stdin_pipe` on a pipe this process holds open and never writes (it closes
    when this process exits: `docker exec -i` children watch it, see
    bench/launch/docker/launcher.py). env None: this process's environment. Output: stderr,
    and stdout unless `pipe_stdout`, appended to `log_path`; `pipe_stdout` puts
    stdout (and stderr, when there is no log) on a pipe for the caller to read; else
    both are inherited."""
    stdout = subprocess.PIPE if pipe_stdout else None
    stderr = subprocess.PIPE if pipe_stdout else None
    common = dict(env=env, stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL,
                  start_new_session=True)
    if log_path is None:
        return subprocess.Popen(list(argv), stdout=stdout, stderr=stderr, **common)
    with open(log_path, "ab") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(list(argv), stdout=stdout or log, stderr=log, **common)


def env_with_repo(env: dict[str, str] | None = None) -> dict[str, str]:
    """env (None: os.environ) with this repository first on PYTHONPATH, so that a helper
    started as `python -P -m bench...` inside a namespace imports this checkout, and
    PYTHONSAFEPATH=1 (Note [safe path])."""
    out = {**(os.environ if env is None else env), **SAFE_PATH_ENV}
    out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), out.get("PYTHONPATH")]))
    return out


def read_ready_line(proc: subprocess.Popen, expected: str, what: str,
                    log: Path | None = None, timeout_s: float = READY_TIMEOUT_S) -> str:
    """The first stdout line of `proc` (started with pipe_stdout), which must start with
    `expected` within timeout_s; else stop proc and raise RuntimeError with its
    stderr (from `log` when it writes there)."""
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    line = proc.stdout.readline().decode().strip() if ready else ""
    if not line.startswith(expected):
        stop_group(proc, grace_s=0.0)
        err = log.read_text() if log else proc.stderr.read().decode()
        raise RuntimeError(f"{what} did not start (expected {expected!r} within "
                           f"{timeout_s} s, got {line!r}); stderr:\n{err}")
    return line


def _signal(proc: subprocess.Popen, sig: signal.Signals) -> None:
    """Send sig to proc's process group when proc leads one, else to proc alone."""
    try:
        if os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, sig)
        else:
            os.kill(proc.pid, sig)
    except ProcessLookupError:
        pass  # exited since it was polled


def _wait_until(procs: list[subprocess.Popen], deadline: float) -> list[subprocess.Popen]:
    """Wait for procs until the monotonic deadline; return those still running."""
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    return [p for p in procs if p.poll() is None]


def stop_all(procs: Sequence[subprocess.Popen | None], grace_s: float = STOP_GRACE_S) -> None:
    """Stop every process still running: SIGTERM to each (its group, see module doc),
    up to grace_s for all of them to exit, then SIGKILL to the rest. Entries that are
    None (a helper that was never started) are skipped."""
    running = [p for p in procs if p is not None and p.poll() is None]
    for p in running:
        _signal(p, signal.SIGTERM)
    running = _wait_until(running, time.monotonic() + grace_s)
    for p in running:
        _signal(p, signal.SIGKILL)
    _wait_until(running, time.monotonic() + KILL_WAIT_S)


def stop_group(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """Stop one process and its group (see stop_all)."""
    stop_all([proc], grace_s)


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


def free_port(addr: str = "127.0.0.1") -> int:
    """A TCP port the kernel says is free on `addr` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


@dataclass(frozen=True)
class ProcessIdentity:
    """One process for as long as the machine runs: its pid, its start time (clock ticks
    after boot, field 22 of /proc/PID/stat) and the boot it belongs to. A pid alone is
    reused by the kernel once its process is gone; the three together never are, so a
    state file can name a process that a later cleanup may kill without ever hitting a
    stranger that got the same pid."""

    pid: int
    start_ticks: int
    boot_id: str

    def __post_init__(self) -> None:
        for name in ("pid", "start_ticks"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"ProcessIdentity.{name}: expected an integer >= 0, "
                                 f"got {value!r}")
        if not self.boot_id:
            raise ValueError(f"ProcessIdentity.boot_id: expected a boot id, got {self.boot_id!r}")

    @classmethod
    def of(cls, pid: int) -> ProcessIdentity | None:
        """The identity of the process `pid` now; None when there is none (or a zombie,
        which has already exited)."""
        try:
            # the command name in parentheses may hold spaces: fields follow the last ')'
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            return None
        if fields[0] == "Z":
            return None
        return cls(pid, int(fields[19]), BOOT_ID.read_text().strip())

    def is_running(self) -> bool:
        return ProcessIdentity.of(self.pid) == self

    def to_dict(self) -> dict:
        return {"pid": self.pid, "start_ticks": self.start_ticks, "boot_id": self.boot_id}

    @classmethod
    def from_dict(cls, d: dict) -> ProcessIdentity:
        return cls(d["pid"], d["start_ticks"], d["boot_id"])


def kill_identified(identities: Sequence[ProcessIdentity]) -> list[str]:
    """SIGKILL each process that is still the one identified (its process group when it
    leads one, see module doc); a pid now held by another process is left alone.
    Returns what was killed."""
    killed = []
    for ident in identities:
        if not ident.is_running():
            continue
        try:
            if os.getpgid(ident.pid) == ident.pid:
                os.killpg(ident.pid, signal.SIGKILL)
            else:
                os.kill(ident.pid, signal.SIGKILL)
        except ProcessLookupError:
            continue  # exited between the check and the signal
        killed.append(f"process {ident.pid}")
    return killed
