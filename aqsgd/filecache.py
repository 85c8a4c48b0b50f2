"""Build-once files in a cache directory, safe when several processes race.

Every worker of a run may ask for the same tokenizer or starting checkpoint at
once. The first takes an exclusive lock (fcntl.flock on NAME.lock, released by
the kernel if the process dies) and builds; the others wait, then find the file.
The file itself appears by atomic rename, so a reader never sees half of it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["default_cache_dir", "build_once", "atomic_write"]


def default_cache_dir() -> Path:
    """`.cache/` at the repository root (git-ignored)."""
    return Path(__file__).resolve().parent.parent / ".cache"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    lock_path = path.with_name(path.name + ".lock")
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call write(tmp) on a temporary name in path's directory, then rename to path."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def build_once(path: Path, write: Callable[[Path], None]) -> bool:
    """Make sure `path` exists, building it with write(tmp_path) under a lock if not.
    Returns True when this call built it, False when it was already there."""
    path = Path(path)
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path):
        if path.exists():  # another process built it while we waited
            return False
        atomic_write(path, write)
        return True
