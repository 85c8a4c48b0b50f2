"""Which launcher builds a run's hosts: `--launcher auto|netns|local`.

    choice = choose_launcher("auto")   # netns when root and `ip netns` works, else local
    with choice.factory(scenario, n_hosts, run_id=rid, state_dir=d) as hosts: ...
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["LAUNCHERS", "LauncherChoice", "choose_launcher"]

LAUNCHERS = ("auto", "netns", "local")  # the --launcher choices


@dataclass(frozen=True)
class LauncherChoice:
    """Which launcher builds the hosts, and why (printed, and kept in meta)."""

    name: str  # netns | local
    reason: str
    factory: Callable = field(repr=False, compare=False)

    @property
    def shaped(self) -> bool:
        return self.name != "local"


def _netns_usable() -> tuple[bool, str]:
    if os.geteuid() != 0:
        return False, "not root"
    if shutil.which("ip") is None:
        return False, "iproute2 `ip` not found"
    try:
        probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                               timeout=10)
    except (OSError, subprocess.TimeoutExpired) as err:
        return False, f"`ip netns list` failed: {err}"
    if probe.returncode != 0:
        return False, f"`ip netns list` failed: {probe.stderr.strip()}"
    return True, "root and `ip netns` works"


def choose_launcher(choice: str = "auto") -> LauncherChoice:
    """auto: netns when root and `ip netns` works, else local (unshaped)."""
    if choice not in LAUNCHERS:
        raise ValueError(f"launcher must be one of {', '.join(LAUNCHERS)}, got {choice!r}")
    if choice in ("auto", "netns"):
        ok, why = _netns_usable()
        if ok:
            from bench.launch.netns import NetnsLauncher

            return LauncherChoice("netns", why, NetnsLauncher)
        if choice == "netns":
            raise ValueError(f"launcher netns requested but unusable: {why}")
        reason = f"network namespaces unusable ({why}): links are NOT shaped"
    else:
        reason = "requested: links are NOT shaped"
    from bench.launch.local import LocalLauncher

    return LauncherChoice("local", reason, LocalLauncher)
