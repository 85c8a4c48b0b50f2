"""Data sets already in the local Hugging Face caches, found as local paths.

    from aqsgd.data.hfcache import resolve_text_source
    resolve_text_source("Salesforce/wikitext/wikitext-2-raw-v1")   # a snapshot folder

Nothing is ever downloaded: a data set id resolves to a folder of the hub cache
(`datasets--owner--name/snapshots/<rev>/...`) or of the `datasets` library's cache
(`owner___name/...`), or the lookup fails naming every place it tried.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["hf_cache_dirs", "resolve_text_source"]


def hf_cache_dirs() -> tuple[Path, Path]:
    """(hub cache, `datasets` cache) as the Hugging Face libraries find them, from the
    environment at call time: HF_HUB_CACHE, HF_DATASETS_CACHE, else under HF_HOME
    (default $XDG_CACHE_HOME/huggingface, ~/.cache/huggingface)."""
    env = os.environ
    cache = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    home = Path(env.get("HF_HOME") or cache / "huggingface").expanduser()
    hub = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE") or home / "hub"
    datasets = env.get("HF_DATASETS_CACHE") or home / "datasets"
    return Path(hub).expanduser(), Path(datasets).expanduser()


def _hub_snapshot(hub_cache: Path, repo: str) -> Path | None:
    """The snapshot folder of dataset `repo` in a hub cache: refs/main's revision, else
    the one revision any ref names, else the only snapshot."""
    root = hub_cache / ("datasets--" + repo.replace("/", "--"))
    snapshots = root / "snapshots"
    if not snapshots.is_dir():
        return None
    refs = root / "refs"
    main = refs / "main"
    named = [main] if main.is_file() else sorted(p for p in refs.rglob("*") if p.is_file())
    present = {p.name for p in snapshots.iterdir() if p.is_dir()}
    revisions = sorted({r.read_text().strip() for r in named} & present) or sorted(present)
    if len(revisions) > 1:
        raise ValueError(
            f"{root}: {len(revisions)} snapshots {revisions} and no ref names one; set the "
            f"data path to one of them"
        )
    return snapshots / revisions[0] if revisions else None


def resolve_text_source(
    spec: str | Path,
    hf_cache_dir: str | Path | None = None,
    datasets_cache_dir: str | Path | None = None,
) -> Path:
    """A local file or directory, or a data set id `owner/name[/subdir...]` (or
    `name[/subdir...]`) already cached, as a local path. Never downloads. Looked up in
    the hub cache (`datasets--owner--name/snapshots/<rev>/subdir`), then in the
    `datasets` cache (`owner___name/subdir`, `name/subdir`); the caches default to
    `hf_cache_dirs()`."""
    path = Path(spec).expanduser()
    if path.exists():
        return path
    default_hub, default_datasets = hf_cache_dirs()
    hub = Path(hf_cache_dir) if hf_cache_dir is not None else default_hub
    datasets = Path(datasets_cache_dir) if datasets_cache_dir is not None else default_datasets
    parts = [part for part in str(spec).split("/") if part]
    tried = []
    for cut in (2, 1):  # "owner/name[/subdir...]" or "name[/subdir...]"
        if len(parts) < cut:
            continue
        repo, sub = "/".join(parts[:cut]), parts[cut:]
        snapshot = _hub_snapshot(hub, repo)
        candidates = [snapshot.joinpath(*sub)] if snapshot is not None else []
        candidates.append(datasets.joinpath(repo.replace("/", "___"), *sub))
        for found in candidates:
            if found.exists():
                return found
            tried.append(str(found))
    raise FileNotFoundError(
        f"data source {str(spec)!r} is neither a local path nor a data set in the local "
        f"Hugging Face caches (downloads are disabled); tried {tried}"
    )
