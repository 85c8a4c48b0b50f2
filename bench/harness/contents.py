"""What a file or folder holds, as a short hash: how a model, tokenizer or data path
enters a cell's identity (Note [identity by content], docs/results-schema.md).

    content_digest("./mygpt2")          # '3f2a9c0e5b1d7a64': the folder's names and bytes
    content_digest("data.txt")          # a file: its bytes

A file's hash is sha256 of its bytes; a folder's, sha256 of its files' relative names
(sorted) each with its file's hash, so the same files in another folder, or listed in
another order, hash the same. Files of at least CACHE_MIN_BYTES are hashed once and
kept in DIGEST_CACHE under aqsgd.filecache.default_cache_dir(), by (resolved path,
size, mtime_ns): a checkpoint of gigabytes is read again only when it changes.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from aqsgd.filecache import atomic_write_text, default_cache_dir

__all__ = ["CACHE_MIN_BYTES", "DIGEST_CACHE", "DIGEST_CHARS", "content_digest",
           "file_sha256"]

DIGEST_CACHE = "content-digests.json"
CACHE_MIN_BYTES = 1 << 20  # smaller files are hashed faster than a cache entry is kept
DIGEST_CHARS = 16  # hex characters of a digest in an identity (as scenario_key's)
_CHUNK_BYTES = 1 << 20


def file_sha256(path: Path) -> str:
    """sha256 of the file's bytes (hex), read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


class _Cache:
    """DIGEST_CACHE: resolved path -> {size, mtime_ns, sha256}; written back (atomically)
    only when an entry was added. An unreadable cache is started again, never trusted."""

    def __init__(self, cache_dir: Path):
        self.path = cache_dir / DIGEST_CACHE
        try:
            entries = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            entries = {}
        self.entries = entries if isinstance(entries, dict) else {}
        self.changed = False

    def sha256(self, path: Path) -> str:
        stat = path.stat()
        if stat.st_size < CACHE_MIN_BYTES:
            return file_sha256(path)
        key, stamp = str(path), {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
        entry = self.entries.get(key)
        if isinstance(entry, dict) and {k: entry.get(k) for k in stamp} == stamp \
                and isinstance(entry.get("sha256"), str):
            return entry["sha256"]
        sha = file_sha256(path)
        self.entries[key] = {**stamp, "sha256": sha}
        self.changed = True
        return sha

    def save(self) -> None:
        if self.changed:
            atomic_write_text(self.path, json.dumps(self.entries, indent=1, sort_keys=True))


def _files(folder: Path) -> list[Path]:
    """Every file under `folder` (symbolic links followed: a Hugging Face snapshot links
    its files to blobs), sorted by relative name."""
    found = [Path(root) / name for root, _, names in os.walk(folder, followlinks=True)
             for name in names]
    return sorted((p for p in found if p.is_file()),
                  key=lambda p: p.relative_to(folder).as_posix())


def content_digest(path: str | Path, cache_dir: str | Path | None = None) -> str:
    """DIGEST_CHARS hex characters of what `path` (a file or folder) holds (module
    docstring); `cache_dir` None: default_cache_dir(). FileNotFoundError naming the path
    when it is neither."""
    path = Path(path).expanduser().resolve()
    cache = _Cache(Path(cache_dir) if cache_dir is not None else default_cache_dir())
    if path.is_file():
        sha = cache.sha256(path)
    elif path.is_dir():
        digest = hashlib.sha256()
        for file in _files(path):
            digest.update(f"{file.relative_to(path).as_posix()}\0{cache.sha256(file)}\n"
                          .encode())
        sha = digest.hexdigest()
    else:
        raise FileNotFoundError(f"{path}: neither a file nor a folder, cannot hash what it "
                                f"holds")
    cache.save()
    return sha[:DIGEST_CHARS]
