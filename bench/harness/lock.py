"""One sweep at a time writes a results directory.

    with sweep_lock(sweep_dir, echo):   # SweepLocked (a ValueError: exit 2) when held
        ...run the cells...

The lock is `fcntl.flock` on SWEEP_DIR/LOCK_NAME, held for as long as the sweep runs;
the kernel releases it when its holder exits however it exits (SIGKILL included), so a
dead holder never blocks. The holder writes who it is into the file (pid with its start
time, command line, since when, UTC) and empties it when it is done: a second sweep
into the same directory is refused naming the holder, and a sweep that finds the lock
free but the file still naming someone knows that holder died, takes the lock over and
says so. The record is information only: the flock alone decides.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.launch.process import ProcessIdentity

__all__ = ["LOCK_NAME", "SweepLocked", "holder_text", "sweep_lock"]

LOCK_NAME = ".sweep.lock"


class SweepLocked(ValueError):
    """Another sweep holds the results directory (the message names it)."""


def holder_text(record: dict) -> str:
    """'pid 123 (python -m bench sweep ...), since 2026-12-02T05:00:00Z'."""
    return (f"pid {record.get('pid')} ({record.get('command', '?')}), since "
            f"{record.get('since_utc', '?')}")


def _record(f) -> dict | None:
    f.seek(0)
    text = f.read()
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
    with open(os.open(path, os.O_RDWR | os.O_CREAT, 0o644), "r+", encoding="utf-8") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            record = _record(f) or {}
            raise SweepLocked(f"{sweep_dir}: another sweep is writing it: "
                              f"{holder_text(record)}; wait for it to finish, or write "
                              f"elsewhere (--out DIR)") from None
        previous = _record(f)
        if previous is not None:
            echo(f"{sweep_dir}: took over the lock left by {holder_text(previous)}: no "
                 f"process holds it any more (that sweep was killed or crashed)")
        me = ProcessIdentity.of(os.getpid())
        f.seek(0)
        f.truncate()
        f.write(json.dumps({**me.to_dict(), "command": " ".join(sys.argv),
                            "since_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}))
        f.flush()
        try:
            yield
        finally:
            f.seek(0)
            f.truncate()  # released on purpose: the next sweep takes nothing over
            f.flush()
            fcntl.flock(f, fcntl.LOCK_UN)
