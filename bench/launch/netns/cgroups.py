"""CPU cgroups of a netns run's straggler hosts (bench.net.straggler): one cgroup per
straggler host, named from the run's prefix, its processes put in it as they start,
capped over the straggler's interval, removed by its exact name at teardown.

    groups = CpuCgroups.find()                       # v1 cpu controller, or v2 cpu.max
    path = groups.create("aqsgd-aq3f9c1-h1")         # recorded in the state file first
    argv = groups.enter_argv(path, ["ip", "netns", "exec", ...])  # joins, then execs
    groups.set_quota(path, quota_us=50_000)          # None: no cap
    groups.remove(path)

Where: this kernel has the cgroup v1 cpu controller mounted at /sys/fs/cgroup/cpu
(`cpu.cfs_quota_us`, `cpu.cfs_period_us`); a unified (v2) hierarchy with the cpu
controller enabled at its root has `cpu.max` ("QUOTA PERIOD" or "max PERIOD") instead.
The groups go directly under the hierarchy's root (a run's processes are then capped
by nothing else of the suite). A process joins before it runs anything of its own:
`enter_argv` wraps argv in `sh -c 'echo $$ > cgroup.procs && exec "$@"'`, so the worker
and everything it starts is inside from its first instruction.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CGROUP_ROOT", "CgroupError", "CpuCgroups", "cgroup_name"]

CGROUP_ROOT = Path("/sys/fs/cgroup")
REMOVE_WAIT_S = 10.0  # killed processes leave their cgroup as they exit


class CgroupError(RuntimeError):
    """No CPU cgroup controller this process can use, or a cgroup that will not go."""


def cgroup_name(prefix: str, host: int) -> str:
    """The cgroup of host `host` of the netns run with prefix `prefix`."""
    return f"aqsgd-{prefix}-h{host}"


@dataclass(frozen=True)
class CpuCgroups:
    """A CPU controller hierarchy: `base` (where the groups go) and its `version`."""

    base: Path
    version: int

    @classmethod
    def find(cls, root: Path = CGROUP_ROOT) -> CpuCgroups:
        """The v1 cpu hierarchy, else a v2 root with cpu enabled; CgroupError naming
        what was looked at when neither is there."""
        if (root / "cpu" / "cpu.cfs_quota_us").is_file():
            return cls(root / "cpu", 1)
        control = root / "cgroup.subtree_control"
        if control.is_file() and "cpu" in control.read_text().split():
            return cls(root, 2)
        raise CgroupError(f"no CPU cgroup controller: neither {root / 'cpu'} (cgroup v1 cpu) "
                          f"nor cpu in {control} (cgroup v2); a straggler needs one")

    def path(self, name: str) -> Path:
        return self.base / name

    def create(self, name: str) -> Path:
        path = self.path(name)
        path.mkdir()
        return path

    def enter_argv(self, path: Path, argv: list[str]) -> list[str]:
        """argv run inside cgroup `path` from its start (module doc)."""
        return ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(path / "cgroup.procs"), *argv]

    def set_quota(self, path: Path, quota_us: int | None, period_us: int) -> str:
        """Cap the cgroup at quota_us per period_us (None: uncapped); what was written."""
        if self.version == 1:
            (path / "cpu.cfs_period_us").write_text(str(period_us))
            value = "-1" if quota_us is None else str(quota_us)
            (path / "cpu.cfs_quota_us").write_text(value)
            return f"{path / 'cpu.cfs_quota_us'} = {value} (period {period_us} us)"
        value = f"{'max' if quota_us is None else quota_us} {period_us}"
        (path / "cpu.max").write_text(value)
        return f"{path / 'cpu.max'} = {value}"

    @staticmethod
    def stat(path: Path) -> dict[str, int]:
        """The cgroup's cpu.stat (v1: nr_periods, nr_throttled, throttled_time in ns;
        v2: usage_usec, nr_throttled, throttled_usec, ...)."""
        return {k: int(v) for k, v in (line.split() for line in
                                       (path / "cpu.stat").read_text().splitlines())}

    @staticmethod
    def remove(path: Path) -> bool:
        """Remove cgroup `path`, killing what is still inside it (a worker that joined
        the group but had not yet entered its namespace when the run was killed is
        found by no namespace) and waiting for it to leave; False when it was not
        there."""
        deadline = time.monotonic() + REMOVE_WAIT_S
        while True:
            try:
                path.rmdir()
                return True
            except FileNotFoundError:
                return False
            except OSError as err:  # EBUSY: a process still inside
                CpuCgroups._kill_inside(path)
                if time.monotonic() > deadline:
                    left = (path / "cgroup.procs").read_text().split()
                    raise CgroupError(f"cgroup {path} will not go ({err}); processes "
                                      f"still inside: {left}") from None
                time.sleep(0.1)

    @staticmethod
    def _kill_inside(path: Path) -> None:
        """SIGKILL every process listed in cgroup `path` (one of the suite's, by its
        exact name)."""
        try:
            pids = (path / "cgroup.procs").read_text().split()
        except FileNotFoundError:
            return
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
