"""Files written whole: atomic writes, and build-once files in a cache directory that
are safe when several processes race. The one atomic write of the suite lives here
(the harness, launchers and reports use it too).

Every worker of a run may ask for the same tokenizer or starting checkpoint at
once. The first takes an exclusive lock (filelock's `FileLock` on NAME.lock, an flock
the kernel drops if the process dies) and builds; the others wait, then find the file.
The file itself appears by atomic rename, so a reader never sees half of it.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

__all__ = ["default_cache_dir", "build_once", "atomic_write", "atomic_write_bytes",
           "atomic_write_text"]


def default_cache_dir() -> Path:
    """The cache folder: $AQSGD_CACHE_DIR when set (read at each call, so a harness hands it
    to its workers with their environment), else `.cache/` at the repository root
    (git-ignored)."""
    override = os.environ.get("AQSGD_CACHE_DIR")
    return Path(override) if override else Path(__file__).resolve().parent.parent / ".cache"


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Call write(tmp) on a fresh temporary name in path's directory (created if
    missing), then rename it to `path`: readers see the old file or the whole new one,
    and a failure leaves the old file and no temporary behind. The temporary name is
    unique per call but not pre-created, so the file gets the usual permissions (umask),
    as a file written in place would."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """`data` to `path` atomically (flushed to disk before the rename)."""

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    return atomic_write(path, write)


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def build_once(path: Path, write: Callable[[Path], None]) -> bool:
    """Make sure `path` exists, building it with write(tmp_path) under a lock if not.
    Returns True when this call built it, False when it was already there."""
    path = Path(path)
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(path.with_name(path.name + ".lock")):
        if path.exists():  # another process built it while we waited
            return False
        atomic_write(path, write)
        return True
