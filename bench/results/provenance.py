"""Where a run came from: the provenance record every meta.json and baseline carries.

    provenance(repo)   # {"git": {commit, dirty}, "versions": {...}, "hardware": {...}}

Package versions come from the installed distributions without importing them (transformers
alone costs seconds to import); CUDA and the GPUs only when torch is already imported.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path

import psutil

__all__ = ["provenance"]


def _run(argv: list[str], cwd: Path) -> str | None:
    try:
        out = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _git(repo: Path) -> dict:
    commit = _run(["git", "rev-parse", "HEAD"], repo)
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"], repo)
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def _versions() -> dict:
    versions: dict[str, str | None] = {"python": platform.python_version()}
    # the installed distributions' versions, without importing them (module doc)
    for name in ("torch", "triton", "transformers", "tokenizers", "numpy", "pandas"):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    torch = sys.modules.get("torch")
    versions["cuda"] = getattr(getattr(torch, "version", None), "cuda", None) if torch else None
    return versions


def _hardware() -> dict:
    cpu_model = platform.processor() or None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpus: list[str] = []
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return {
        "cpu_model": cpu_model,
        "cpu_cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 2),
        "gpus": gpus,
        "hostname": platform.node(),
        "os": platform.platform(),
    }


def provenance(repo: str | Path) -> dict:
    """Where a run came from: git state, package versions, hardware."""
    return {"git": _git(Path(repo)), "versions": _versions(), "hardware": _hardware()}
