"""The starting checkpoint of every preset a sweep fine-tunes from, built before any
worker starts.

    prepare_checkpoints(cells, repo_root, echo=print)

A worker that built the checkpoint itself would hold up its peers past their
rendezvous timeout; built once here, it is cached in .cache/ by
`python -m aqsgd.model.pretrain` and every rank loads it.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from bench.harness.sweep import CellSpec

__all__ = ["PRETRAIN_TIMEOUT_S", "prepare_checkpoints"]

PRETRAIN_TIMEOUT_S = 1800


def prepare_checkpoints(cells: list[CellSpec], repo_root: Path,
                        echo: Callable[[str], None]) -> None:
    """Build (or find cached) the checkpoint of each preset that `cells` start from
    (`Workload.init_from == "pretrained"`), running the builder in `repo_root`; raises
    naming the preset when one fails."""
    presets = sorted({c.workload.preset for c in cells if c.workload.init_from == "pretrained"})
    for preset in presets:
        echo(f"starting checkpoint for preset {preset} (built once, then cached in .cache/)")
        done = subprocess.run([sys.executable, "-m", "aqsgd.model.pretrain", "--preset", preset],
                              cwd=repo_root, capture_output=True, text=True,
                              timeout=PRETRAIN_TIMEOUT_S)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
            raise RuntimeError(f"building the starting checkpoint of preset {preset} "
                               f"failed (exit {done.returncode}):\n{tail}")
        lines = [line for line in done.stdout.splitlines() if "starting checkpoint" in line]
        echo(lines[-1] if lines else f"starting checkpoint for preset {preset} ready")
