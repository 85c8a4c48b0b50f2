"""One sweep at a time writes a results directory.

    with sweep_lock(sweep_dir, echo):   # SweepLocked (a ValueError: exit 2) when held
        ...run the cells...

The lock is filelock's `FileLock` (an flock on SWEEP_DIR/LOCK_NAME, which the kernel
drops when its holder exits however it exits) held while the sweep runs. The holder
writes who it is into that file and empties it when done: a second sweep is refused
naming the holder, and a sweep that finds the lock free but the file still naming
someone takes it over and says so. docs/architecture/harness.md, "The sweep lock", says why.
A full file system under the block (ENOSPC, EDQUOT) is raised as ResultsFolderFull
naming the folder: the sweep stops, recording no cell as failed for it (docs/robustness.md).
"""

from __future__ import annotations

import errno
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from bench.launch.process import ProcessIdentity

__all__ = ["LOCK_NAME", "ResultsFolderFull", "SweepLocked", "holder_text", "raise_if_full",
           "sweep_lock"]

LOCK_NAME = ".sweep.lock"


class SweepLocked(ValueError):
    """Another sweep holds the results directory (the message names it)."""


class ResultsFolderFull(OSError):
    """The results folder's file system is full: the sweep stopped (the message names the
    folder; cells finished before are kept, the next run runs the rest)."""


def raise_if_full(err: BaseException) -> None:
    """Re-raise `err` when it is a full file system: then nothing, not even a failed
    cell's record, can be written, and sweep_lock stops the sweep with ResultsFolderFull."""
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        raise err


def holder_text(record: dict) -> str:
    """'pid 123 (python -m bench sweep ...), since 2026-12-02T05:00:00Z'."""
    return (f"pid {record.get('pid')} ({record.get('command', '?')}), since "
            f"{record.get('since_utc', '?')}")


def _record(path: Path) -> dict | None:
    """The holder record in the lock file; None when it is empty."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if not text.strip():
        return None
    try:
        record = json.loads(text)
    except json.JSONDecodeError:
        return {"command": f"unreadable record {text[:60]!r}"}
    return record if isinstance(record, dict) else None


@contextmanager
def sweep_lock(sweep_dir: Path, echo: Callable[[str], None] = print) -> Iterator[None]:
    """Hold SWEEP_DIR/LOCK_NAME while the block runs (module doc); SweepLocked naming
    the holder when another sweep holds it."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    path = sweep_dir / LOCK_NAME
    # the record is written in place: the file must stay the one the flock is on
    lock = FileLock(path, mode=0o644, blocking=False, preserve_lock_file=True,
                    fallback_to_soft=False)
    try:
        lock.acquire()
    except Timeout:
        raise SweepLocked(f"{sweep_dir}: another sweep is writing it: "
                          f"{holder_text(_record(path) or {})}; wait for it to finish, or "
                          f"write elsewhere (--out DIR)") from None
    try:
        previous = _record(path)
        if previous is not None:
            echo(f"{sweep_dir}: took over the lock left by {holder_text(previous)}: no "
                 f"process holds it any more (that sweep was killed or crashed)")
        me = ProcessIdentity.of(os.getpid())
        path.write_text(json.dumps({
            **me.to_dict(), "command": " ".join(sys.argv),
            "since_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}), encoding="utf-8")
        try:
            yield
        except OSError as err:
            if err.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            raise ResultsFolderFull(
                f"{sweep_dir}: no space left on its file system ({err}); the sweep stopped, "
                f"the cells finished before are kept as they were; free space and run the "
                f"same command again to resume") from err
    finally:
        path.write_text("", encoding="utf-8")  # released on purpose: nothing to take over
        lock.release()
