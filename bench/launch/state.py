"""Every launcher's state file (netns and Docker), and teardown by the names it records.

Before a run creates anything it writes STATE_DIR/P.json (P = its prefix, see
bench/launch/names.py): run id, launcher pid, every namespace and device name it
may create (a Docker run: its containers, network and volume) and the pids it
spawned (rewritten after each spawn). Teardown, in the
launcher's `finally` or later by `python -m bench.launch cleanup`, removes exactly
those names; nothing is ever matched by pattern.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from aqsgd.filecache import atomic_write_text
from bench.launch.names import TopologyNames
from bench.net.executor import CommandError, Executor

__all__ = ["DEFAULT_STATE_DIR", "StateFiles", "cleanup", "existing_namespaces",
           "recorded_state_files", "teardown_recorded", "write_state"]

DEFAULT_STATE_DIR = Path("/run/aqsgd-bench/netns")  # tmpfs: cleared at reboot, as netns are


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


def write_state(files: StateFiles, names: TopologyNames, run_id: str,
                spawned_pids: list[int]) -> None:
    """(Re)write the state file atomically: a kill at any moment leaves a whole one."""
    state = {"launcher": "netns", "run_id": run_id, "prefix": names.prefix,
             "launcher_pid": os.getpid(),
             "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
             "namespaces": names.namespaces(),
             "devices": [list(d) for d in names.devices()],
             "spawned_pids": spawned_pids}
    atomic_write_text(files.state, json.dumps(state, indent=1))


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
    devices (namespace, device), delete the namespaces. Names not present are
    skipped. Returns what was removed."""
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


def recorded_state_files(state_dir: Path) -> list[Path]:
    """Every run's state file in state_dir (not the delay lines' configs)."""
    return [f for f in sorted(state_dir.glob("aq*.json"))
            if not f.name.endswith("-delayline.json")]


def cleanup(state_files: list[Path], ex: Executor | None = None) -> list[str]:
    """Tear down what each state file records (a run that was killed), then delete
    the file and its delay line's config. A Docker run's file names containers, networks
and volumes instead (bench.launch.docker.teardown_docker). Returns what was removed."""
    ex = ex or Executor()
    removed = []
    for path in state_files:
        state = json.loads(path.read_text())
        if state.get("launcher") == "docker":  # files written before this key are netns
            from bench.launch.docker import teardown_docker

            removed += teardown_docker(state)
            path.unlink()
            continue
        removed += teardown_recorded(state["namespaces"],
                                     [tuple(d) for d in state["devices"]], ex)
        path.unlink()
        StateFiles(path.parent, state["prefix"]).delay_line_config.unlink(missing_ok=True)
    return removed
