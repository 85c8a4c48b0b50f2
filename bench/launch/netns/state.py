"""The netns run's state file and teardown by the names it records.

Before a netns run creates anything it writes STATE_DIR/P.json (P = its prefix, see
bench/launch/netns/names.py): the fields every launcher's state file starts with
(bench.launch.state.launcher_fields, `"launcher": "netns"`), every namespace and device
it may create, and the processes it started (delay line, workers; rewritten after each
start). Beside it, P-delayline.json and P-delayline.log are the delay line's config and
log. Teardown, in the launcher's `finally` or later by `python -m bench.launch cleanup`
(through `teardown_state`, which bench.launch.choice names for "netns"), removes exactly
those names: every process inside the namespaces, the devices (with their qdiscs), the
namespaces, the straggler hosts' CPU cgroups (`cgroups`), the competing flows' log
folder P-flows; nothing is ever matched by pattern.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path

from aqsgd.filecache import atomic_write_text
from bench.launch.netns.cgroups import CpuCgroups
from bench.launch.netns.names import TopologyNames
from bench.launch.process import ProcessIdentity
from bench.launch.state import launcher_fields
from bench.net.executor import CommandError, Executor

__all__ = ["StateFiles", "existing_namespaces", "teardown_recorded", "teardown_state",
           "write_state"]


@dataclass(frozen=True)
class StateFiles:
    """The files one netns run keeps in the state dir, named by its prefix."""

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

    @property
    def flow_logs(self) -> Path:
        """The folder of the competing flows' logs (bench/launch/competing.py)."""
        return self.state_dir / f"{self.prefix}-flows"

    @property
    def delay_line_control(self) -> Path:
        """The delay line's control socket (bench.net.delayline.set_link)."""
        return self.state_dir / f"{self.prefix}-delayline.sock"


def write_state(files: StateFiles, names: TopologyNames, run_id: str,
                processes: list[ProcessIdentity], cgroups: list[Path]) -> None:
    """(Re)write a netns run's state file atomically: a kill at any moment leaves a whole
    one. `processes`: what the run started (delay line, workers); `cgroups`: the CPU
    cgroups of its straggler hosts (bench/launch/netns/cgroups.py), by path."""
    state = {**launcher_fields("netns", run_id, names.prefix),
             "namespaces": names.namespaces(),
             "devices": [list(d) for d in names.devices()],
             "processes": [p.to_dict() for p in processes],
             "cgroups": [str(p) for p in cgroups]}
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


def teardown_state(state: dict, path: Path, ex: Executor) -> list[str]:
    """What a killed netns run's state file (`state`, read from `path`) names, removed,
    with its delay line's config and log (bench.launch.state.cleanup calls this; the
    processes the file lists are killed before). Returns what was removed."""
    removed = teardown_recorded(state["namespaces"], [tuple(d) for d in state["devices"]], ex)
    for cgroup in state["cgroups"]:
        if CpuCgroups.remove(Path(cgroup)):
            removed.append(f"cgroup {cgroup}")
    files = StateFiles(path.parent, state["prefix"])
    for helper in (files.delay_line_config, files.delay_line_log, files.delay_line_control):
        helper.unlink(missing_ok=True)
    if files.flow_logs.is_dir():
        shutil.rmtree(files.flow_logs)
    return removed
