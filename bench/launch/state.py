"""Every launcher's state file (netns and Docker), where cleanup finds them, and teardown
by the names they record.

Before a run creates anything it writes STATE_DIR/P.json (P = its prefix, see
bench/launch/names.py): run id, the launcher process (pid, start time and boot, see
bench.launch.process.ProcessIdentity), every namespace and device name it may create (a
Docker run: its containers, network and volume) and the processes it started (rewritten
after each start). Teardown, in the launcher's `finally` or later by
`python -m bench.launch cleanup`, removes exactly those names; nothing is ever matched
by pattern.

Where the state files are. A run keeps its state file in its own STATE_DIR (a sweep:
RESULTS/.launcher, beside its results, so that a rerun of the sweep finds what its
killed predecessor left by looking in its own directory, and a Docker run mounts the
directory above it), and every STATE_DIR a launcher has used is named in one registry,
REGISTRY_DIR (one small file per directory, written before the directory can hold a
state file). `cleanup --all-recorded` reads the registry, so it finds every run whatever
directory a sweep passed (`--out` anywhere), and needs no list of result folders. The
registry is on tmpfs (/run) like the namespaces and processes it leads to: a reboot
clears both together.

Live or killed. A state file whose launcher process is still running belongs to a live
run: cleanup leaves it alone (so `make net-cleanup` during a sweep breaks nothing). Once
that process is gone (killed, crashed), everything the file names is removed: the
processes it started (only those whose identity still matches: a pid reused by another
process is never signalled), every process inside its namespaces, its devices (with
their qdiscs), its namespaces, then the file itself. A launcher entering removes the
killed runs of its own kind recorded in its own STATE_DIR first
(bench.launch.lifecycle), so a sweep rerun after a kill starts clean.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from aqsgd.filecache import atomic_write_text
from bench.launch.names import TopologyNames
from bench.launch.process import ProcessIdentity, kill_identified
from bench.net.executor import CommandError, Executor

__all__ = ["DEFAULT_STATE_DIR", "REGISTRY_DIR", "StateFiles", "all_recorded_state_files",
           "cleanup", "existing_namespaces", "launcher_fields", "recorded_state_files",
           "register_state_dir", "registered_state_dirs", "remove_killed_runs", "run_is_live",
           "teardown_recorded", "write_state"]

DEFAULT_STATE_DIR = Path("/run/aqsgd-bench/netns")  # tmpfs: cleared at reboot, as netns are
REGISTRY_DIR = Path("/run/aqsgd-bench/state-dirs")  # one file per STATE_DIR ever used


@dataclass(frozen=True)
class StateFiles:
    """The files one run keeps in the state dir, named by its prefix."""

    state_dir: Path
    prefix: str

    @property
    def state(self) -> Path:
        return self.state_dir / f"{self.prefix}.json"

    @property
    def delay_line_config(self) -> Path:
        return self.state_dir / f"{self.prefix}-delayline.json"

    @property
    def delay_line_log(self) -> Path:
        return self.state_dir / f"{self.prefix}-delayline.log"


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


def write_state(files: StateFiles, names: TopologyNames, run_id: str,
                processes: list[ProcessIdentity]) -> None:
    """(Re)write a netns run's state file atomically: a kill at any moment leaves a whole
    one. `processes`: what the run started (delay line, workers)."""
    state = {**launcher_fields("netns", run_id, names.prefix),
             "namespaces": names.namespaces(),
             "devices": [list(d) for d in names.devices()],
             "processes": [p.to_dict() for p in processes]}
    atomic_write_text(files.state, json.dumps(state, indent=1))


def run_is_live(state: dict) -> bool:
    """Whether the launcher that wrote `state` is still running. Every launcher writes
    launcher_fields; a file from an earlier version of the suite records only the pid
    and counts as live while any process has that pid: cleanup must never remove a live
    run's names."""
    if "launcher_process" in state:
        return ProcessIdentity.from_dict(state["launcher_process"]).is_running()
    pid = state.get("launcher_pid")
    return pid is not None and ProcessIdentity.of(pid) is not None


# -- teardown ------------------------------------------------------------------------
def existing_namespaces(ex: Executor) -> set[str]:
    out = ex.run(("ip", "netns", "list")).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def _existing_devices(ex: Executor, netns: str) -> set[str]:
    out = ex.run(("ip", "-n", netns, "-o", "link", "show")).stdout
    # lines look like "3: aq1h0@if2: <BROADCAST,...": the name ends at '@' or ':'
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line}


def teardown_recorded(namespaces: list[str], devices: list[tuple[str, str]],
                      ex: Executor | None = None) -> list[str]:
    """Remove recorded names: kill the processes inside the namespaces, delete the
    devices (namespace, device; their qdiscs go with them), delete the namespaces.
    Names not present are skipped. Returns what was removed."""
    ex = ex or Executor()
    removed = []
    present = existing_namespaces(ex)
    namespaces = [ns for ns in namespaces if ns in present]
    for ns in namespaces:
        for pid in ex.run(("ip", "netns", "pids", ns)).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
                removed.append(f"process {pid} in {ns}")
            except ProcessLookupError:
                pass
    found = {ns: _existing_devices(ex, ns) for ns in namespaces}
    for ns, dev in devices:
        if ns in namespaces and dev in found[ns]:
            try:
                ex.run(("ip", "-n", ns, "link", "del", dev))
                removed.append(f"device {dev} in {ns}")
            except CommandError:
                # a veth's peer or a TUN whose process just died vanishes on its own
                if dev in _existing_devices(ex, ns):
                    raise
    for ns in reversed(namespaces):
        ex.run(("ip", "netns", "del", ns))
        removed.append(f"namespace {ns}")
    return removed


def cleanup(state_files: list[Path], ex: Executor | None = None) -> list[str]:
    """Tear down what each state file of a killed run records, then delete the file and
    its delay line's files; a live run's file is left alone (run_is_live). A Docker run's
    file names containers, networks and volumes instead (bench.launch.docker.
    teardown_docker). Returns what was removed."""
    ex = ex or Executor()
    removed = []
    for path in state_files:
        try:
            state = json.loads(path.read_text())
        except FileNotFoundError:
            continue  # its run (or another cleanup) removed it since it was listed
        if run_is_live(state):
            continue
        removed += kill_identified([ProcessIdentity.from_dict(p)
                                    for p in state.get("processes", [])])
        if state["launcher"] == "docker":
            from bench.launch.docker import teardown_docker

            removed += teardown_docker(state)
        else:
            removed += teardown_recorded(state["namespaces"],
                                         [tuple(d) for d in state["devices"]], ex)
            files = StateFiles(path.parent, state["prefix"])
            for helper in (files.delay_line_config, files.delay_line_log):
                helper.unlink(missing_ok=True)
        path.unlink(missing_ok=True)
    return removed


def remove_killed_runs(state_dir: Path, launcher: str, ex: Executor | None = None) -> list[str]:
    """What killed runs of `launcher` ("netns", "docker") recorded in state_dir left
    behind, removed (a launcher calls this before it builds: a rerun starts clean)."""
    mine = []
    for path in recorded_state_files(state_dir):
        try:
            if json.loads(path.read_text()).get("launcher") == launcher:
                mine.append(path)
        except FileNotFoundError:
            continue
    return cleanup(mine, ex)
