"""Every launcher's state file: where they are, what each starts with, whether its run
is live, and cleanup of a killed run through the teardown of the launcher it names.

    register_state_dir(d)                      # before a launcher writes a file in d
    atomic_write_text(d / f"{prefix}.json", json.dumps({**launcher_fields(...), ...}))
    cleanup(all_recorded_state_files())        # `python -m bench.launch cleanup --all-recorded`

Before a launcher creates anything it writes STATE_DIR/PREFIX.json: `launcher_fields`
(its name, run id, prefix and the launcher process's identity), then every name it may
create and the processes it started. A run whose launcher process still runs is live and
left alone; for a killed one, cleanup kills the recorded processes (identity checked),
calls the teardown of the launcher the file names (bench.launch.choice.state_teardown)
and deletes the file. Nothing is matched by pattern. Every STATE_DIR used is named in
the registry REGISTRY_DIR (tmpfs under RUNTIME_DIR). docs/architecture/launch.md, "Launchers".
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from aqsgd.filecache import atomic_write_text
from bench.launch.choice import state_teardown
from bench.launch.process import ProcessIdentity, kill_identified
from bench.net.executor import Executor

__all__ = ["DEFAULT_STATE_DIR", "REGISTRY_DIR", "RUNTIME_DIR", "StateFileError",
           "all_recorded_state_files", "cleanup", "launcher_fields", "recorded_state_files",
           "register_state_dir", "registered_state_dirs", "remove_killed_runs", "run_is_live"]



def _runtime_dir(uid: int) -> Path:
    """Where state files go for user `uid` (module doc)."""
    if uid == 0:
        return Path("/run/aqsgd-bench")
    user_run = Path(f"/run/user/{uid}")
    return user_run / "aqsgd-bench" if user_run.is_dir() else (
        Path.home() / ".cache" / "aqsgd-bench" / "run")


RUNTIME_DIR = _runtime_dir(os.geteuid())
# Every launcher's, when the caller names none (tmpfs: cleared at reboot, as what it
# names is: namespaces, processes, the suite daemon's containers)
DEFAULT_STATE_DIR = RUNTIME_DIR / "state"
REGISTRY_DIR = RUNTIME_DIR / "state-dirs"  # one file per STATE_DIR ever used


class StateFileError(ValueError):
    """A state file cleanup cannot act on (it names no launcher cleanup knows)."""


# -- the registry of state dirs ------------------------------------------------------
def register_state_dir(state_dir: Path, registry: Path = REGISTRY_DIR) -> None:
    """Create state_dir and name it in the registry (once per directory). The directory
    exists before its entry does, so an entry whose directory is missing is stale."""
    state_dir = Path(state_dir).resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    entry = registry / f"{hashlib.sha1(str(state_dir).encode()).hexdigest()[:16]}.json"
    if not entry.exists():
        atomic_write_text(entry, json.dumps({"state_dir": str(state_dir)}))


def registered_state_dirs(registry: Path = REGISTRY_DIR) -> list[Path]:
    """Every registered state dir that still exists; entries of deleted ones are dropped."""
    dirs = []
    for entry in sorted(registry.glob("*.json")):
        state_dir = Path(json.loads(entry.read_text())["state_dir"])
        if state_dir.is_dir():
            dirs.append(state_dir)
        else:
            entry.unlink(missing_ok=True)
    return dirs


def recorded_state_files(state_dir: Path) -> list[Path]:
    """Every run's state file in state_dir (not the delay lines' configs)."""
    return [f for f in sorted(Path(state_dir).glob("aq*.json"))
            if not f.name.endswith("-delayline.json")]


def all_recorded_state_files(registry: Path = REGISTRY_DIR) -> list[Path]:
    """The state files of DEFAULT_STATE_DIR and of every registered state dir."""
    dirs = dict.fromkeys([DEFAULT_STATE_DIR.resolve(), *registered_state_dirs(registry)])
    return [f for d in dirs for f in recorded_state_files(d)]


# -- writing -------------------------------------------------------------------------
def launcher_fields(launcher: str, run_id: str, prefix: str) -> dict:
    """The fields every launcher's state file starts with; `launcher_process` tells
    cleanup whether the run is still live (run_is_live)."""
    me = ProcessIdentity.of(os.getpid())
    return {"launcher": launcher, "run_id": run_id, "prefix": prefix,
            "launcher_pid": me.pid, "launcher_process": me.to_dict(),
            "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def run_is_live(state: dict) -> bool:
    """Whether the launcher that wrote `state` is still running. Every launcher writes
    launcher_fields; a file from an earlier version of the suite records only the pid
    and counts as live while any process has that pid: cleanup must never remove a live
    run's names."""
    if "launcher_process" in state:
        return ProcessIdentity.from_dict(state["launcher_process"]).is_running()
    pid = state.get("launcher_pid")
    return pid is not None and ProcessIdentity.of(pid) is not None


# -- cleanup -------------------------------------------------------------------------
def cleanup(state_files: list[Path], ex: Executor | None = None) -> list[str]:
    """Tear down what each state file of a killed run records, then delete the file; a
    live run's file is left alone (run_is_live). The processes it lists are killed here,
    the rest by the teardown of the launcher it names (`teardown(state, path, ex)`, found
    by bench.launch.choice.state_teardown; `ex` runs ip/tc commands). A killed run's file
    that names no launcher with a teardown raises StateFileError before anything is
    removed. Returns what was removed."""
    ex = ex or Executor()
    killed = []
    for path in state_files:
        try:
            state = json.loads(path.read_text())
        except FileNotFoundError:
            continue  # its run (or another cleanup) removed it since it was listed
        if not run_is_live(state):
            try:
                killed.append((path, state, state_teardown(state.get("launcher"))))
            except ValueError as err:
                raise StateFileError(f"state file {path}: launcher: {err}") from None
    removed = []
    for path, state, teardown in killed:
        removed += kill_identified([ProcessIdentity.from_dict(p)
                                    for p in state.get("processes", [])])
        removed += teardown(state, path, ex)
        path.unlink(missing_ok=True)
    return removed


def remove_killed_runs(state_dir: Path, launcher: str, ex: Executor | None = None) -> list[str]:
    """What killed runs of `launcher` (its `name`: "netns", "docker") recorded in
    state_dir left behind, removed (a launcher calls this before it builds: a rerun
    starts clean)."""
    mine = []
    for path in recorded_state_files(state_dir):
        try:
            if json.loads(path.read_text()).get("launcher") == launcher:
                mine.append(path)
        except FileNotFoundError:
            continue
    return cleanup(mine, ex)
