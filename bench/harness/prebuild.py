"""What cells need built, built before the first cell: the fused CPU kernels and the
starting checkpoint of every preset the cells fine-tune from, each printed with its time
and recorded (with wall-clock start and end) in the sweep's builds.json.

    builds = prepare_builds(cells, repo_root, echo=print)   # [Build, ...]
    write_json(sweep_dir / "builds.json", [b.to_dict() for b in builds])

A worker that built something itself would do it inside a measured step (the kernels:
about 7 s on 2 cores, against steps of 0.2-0.3 s) or hold up its peers past their
rendezvous timeout (a checkpoint); built once here, both are cached under the cache
folder (aqsgd.filecache.default_cache_dir) and every rank loads them.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from aqsgd.filecache import default_cache_dir
from bench.harness.sweep import CellSpec
from bench.launch.process import python_argv

__all__ = ["PRETRAIN_TIMEOUT_S", "Build", "prepare_builds", "prepare_checkpoints",
           "prepare_kernels"]

PRETRAIN_TIMEOUT_S = 1800
# the first word of aqsgd.model.pretrain's last line -> Build.how
_HOW = {"built": "built", "shipped": "shipped", "reusing": "cached"}


@dataclass(frozen=True)
class Build:
    """One artefact made ready before the cells: what, where, how (this run built it,
    found it cached, or took the one shipped with the repository) and when (Unix
    seconds, wall clock)."""

    what: str
    path: str
    how: Literal["built", "cached", "shipped"]
    started_unix: float
    ended_unix: float

    @property
    def seconds(self) -> float:
        return self.ended_unix - self.started_unix

    def line(self) -> str:
        how = f"built in {self.seconds:.1f} s" if self.how == "built" else self.how
        return f"{self.what}: {how} ({self.path})"

    def to_dict(self) -> dict:
        return {**asdict(self), "seconds": round(self.seconds, 3)}


def prepare_kernels() -> Build:
    """The fused CPU kernels of aqsgd.quant.fused, built into the cache folder unless
    there; a RuntimeError with the reason when they cannot be built (the workers would
    then code with the slower torch path, and the table would time that)."""
    from aqsgd.quant import fused

    path = fused.library_path(default_cache_dir())
    there, started = path.exists(), time.time()
    library = fused.load_library(default_cache_dir())
    if library.lib is None:
        raise RuntimeError(f"the fused CPU kernels cannot be built: {library.note}")
    return Build("fused CPU kernels", str(path), "cached" if there else "built", started,
                 time.time())


def prepare_checkpoints(cells: list[CellSpec], repo_root: Path,
                        echo: Callable[[str], None]) -> list[Build]:
    """Build (or find cached) the checkpoint of each preset that `cells` start from
    (Workload.checkpoint_preset), running the builder in `repo_root`; raises naming the
    preset when one fails."""
    presets = sorted({c.workload.checkpoint_preset for c in cells} - {None})
    builds = []
    for preset in presets:
        echo(f"starting checkpoint for preset {preset} (built once, then cached)")
        started = time.time()
        # -P: a json.py in the folder the sweep started from shadows nothing (Note [safe path])
        argv = python_argv(sys.executable, "-m", "aqsgd.model.pretrain", "--preset", preset)
        done = subprocess.run(argv,
                              cwd=repo_root, capture_output=True, text=True,
                              timeout=PRETRAIN_TIMEOUT_S)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
            raise RuntimeError(f"building the starting checkpoint of preset {preset} "
                               f"failed (exit {done.returncode}):\n{tail}")
        # its line: 'built|shipped|reusing starting checkpoint for preset NAME: PATH (S s)'
        line = next((x for x in reversed(done.stdout.splitlines())
                     if "starting checkpoint for preset" in x), "")
        path = line.split(": ", 1)[1].rsplit(" (", 1)[0] if ": " in line else ""
        verb = line.split(" ", 1)[0]
        if verb not in _HOW:
            raise RuntimeError(f"the starting checkpoint builder of preset {preset} did "
                               f"not say where its checkpoint is:\n{done.stdout[-2000:]}")
        how = _HOW[verb]
        builds.append(Build(f"starting checkpoint of {preset}", path, how, started,
                            time.time()))
    return builds


def prepare_builds(cells: list[CellSpec], repo_root: Path,
                   echo: Callable[[str], None]) -> list[Build]:
    """Everything `cells` need built (module docstring), each echoed with its time."""
    if not cells:
        return []
    kernels = prepare_kernels()
    echo(kernels.line())
    checkpoints = prepare_checkpoints(cells, repo_root, echo)
    for build in checkpoints:
        echo(build.line())
    return [kernels, *checkpoints]
