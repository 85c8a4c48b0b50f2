"""Which launcher builds a run's hosts (`--launcher auto|netns|docker|local|ssh`), and where
each launcher lives.

    choice = choose_launcher("auto")   # netns when root and `ip netns` works, else local
    choice = choose_launcher("docker") # containers (a daemon and the worker image needed)
    choice = choose_launcher("ssh", hostfile="hosts.txt", shaping=True)  # real hosts
    with choice.factory(scenario, n_hosts, run_id=rid, state_dir=d) as hosts: ...
    netns_usable(), docker_usable()    # (ok, why)
    launcher_factory("netns")          # the class, without a usability check
    state_teardown("docker")           # what removes a killed run's names, by its state file

The launchers are named here by module path only (FACTORIES, TEARDOWNS) and imported
when a run asks for one (importlib): the core of bench/launch imports no launcher, and
no launcher another (the import contracts in pyproject.toml). A new launcher is a
folder of bench/launch/ plus its lines here.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.launch.base import Launcher
from bench.net.executor import Executor

__all__ = ["FACTORIES", "LAUNCHERS", "TEARDOWNS", "LauncherChoice", "choose_launcher",
           "docker_usable", "launcher_factory", "netns_usable", "state_teardown"]

LAUNCHERS = ("auto", "netns", "docker", "local", "ssh")  # the --launcher choices

# "module:attribute" of each launcher's class (its `name` is the key)
FACTORIES = {"netns": "bench.launch.netns:NetnsLauncher",
             "docker": "bench.launch.docker:DockerLauncher",
             "local": "bench.launch.local:LocalLauncher",
             "ssh": "bench.launch.ssh.launcher:SshLauncher"}
# "module:attribute" of the function removing what a killed run's state file names,
# `teardown(state, path, executor) -> [what was removed]`, by the file's `launcher`
# (bench.launch.state.cleanup); the local launcher writes no state file
TEARDOWNS = {"netns": "bench.launch.netns.state:teardown_state",
             "docker": "bench.launch.docker.state:teardown_state",
             "ssh": "bench.launch.ssh.state:teardown_state"}
# the Docker launcher's own check that a daemon answers and the worker image is present
DOCKER_CHECK = "bench.launch.docker.checks:daemon_and_image"

Teardown = Callable[[dict, Path, Executor], list[str]]


def _resolve(ref: str) -> Any:
    """The attribute named by "module:attribute", importing the module."""
    module, attr = ref.split(":")
    return getattr(importlib.import_module(module), attr)


def launcher_factory(name: str) -> type[Launcher]:
    """The launcher class named `name` (one of FACTORIES), as it is: no usability check."""
    if name not in FACTORIES:
        raise ValueError(f"launcher: expected one of {', '.join(FACTORIES)}, got {name!r}")
    return _resolve(FACTORIES[name])


def state_teardown(launcher: object) -> Teardown:
    """The teardown of the launcher a state file names in its `launcher` field;
    ValueError naming the value when no launcher of that name writes state files."""
    if launcher not in TEARDOWNS:
        raise ValueError(f"expected one of {', '.join(sorted(TEARDOWNS))}, got {launcher!r}")
    return _resolve(TEARDOWNS[launcher])


@dataclass(frozen=True)
class LauncherChoice:
    """Which launcher builds the hosts, and why (printed, and kept in meta)."""

    name: str  # netns | docker | local: the factory's `name`
    reason: str
    factory: type[Launcher] = field(repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.factory.name != self.name:
            raise ValueError(f"LauncherChoice.name: expected the factory's name "
                             f"{self.factory.name!r}, got {self.name!r}")

    @property
    def shaped(self) -> bool:
        """Whether the factory's links carry the scenario's rates and delays."""
        return self.factory.shaped


def netns_usable() -> tuple[bool, str]:
    """(ok, why): this process may create network namespaces (root, and `ip netns`
    works)."""
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


def docker_usable() -> tuple[bool, str]:
    """(ok, why): a Docker daemon answers and the worker image is present (the Docker
    launcher's own check, DOCKER_CHECK)."""
    return _resolve(DOCKER_CHECK)()


def choose_launcher(choice: str = "auto", **options: Any) -> LauncherChoice:
    """auto: netns when root and `ip netns` works, else local (unshaped); docker only
    when asked for (it needs a daemon and the worker image); ssh only when asked for,
    with its options (`hostfile`, the hosts; `shaping`, False to measure the real links
    unshaped), which the factory gets bound (its `bind`), so that the harness builds it
    with the protocol's arguments like any other. Options for a launcher that takes
    none are refused, naming them."""
    if choice not in LAUNCHERS:
        raise ValueError(f"launcher must be one of {', '.join(LAUNCHERS)}, got {choice!r}")
    if choice == "ssh":
        return _ssh_choice(**options)
    if options:
        raise ValueError(f"launcher {choice} takes no options, got {', '.join(options)} "
                         f"(--hostfile and --no-shaping are the ssh launcher's)")
    if choice == "docker":
        ok, why = docker_usable()
        if not ok:
            raise ValueError(f"launcher docker requested but unusable: {why}")
        return LauncherChoice("docker", why, launcher_factory("docker"))
    if choice in ("auto", "netns"):
        ok, why = netns_usable()
        if ok:
            return LauncherChoice("netns", why, launcher_factory("netns"))
        if choice == "netns":
            raise ValueError(f"launcher netns requested but unusable: {why}")
        reason = f"network namespaces unusable ({why}): links are NOT shaped"
    else:
        reason = "requested: links are NOT shaped"
    return LauncherChoice("local", reason, launcher_factory("local"))


def _ssh_choice(hostfile: Path | str | None = None, shaping: bool = True) -> LauncherChoice:
    if hostfile is None:
        raise ValueError("launcher ssh needs --hostfile FILE (the hosts, one a line: "
                         "`HOST slots=N interface=DEV ...`, or YAML)")
    if not Path(hostfile).is_file():
        raise ValueError(f"launcher ssh: hostfile {hostfile} not found")
    reason = (f"hosts of {hostfile} over SSH, " + ("their interfaces shaped" if shaping else
              "NOT shaped (--no-shaping): the real links, measured"))
    return LauncherChoice("ssh", reason, launcher_factory("ssh").bind(hostfile, shaping))
