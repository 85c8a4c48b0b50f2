"""Which launcher builds a run's hosts (`--launcher`: "auto" or a key of FACTORIES), and
where each launcher lives.

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
folder of bench/launch/ plus its entries in FACTORIES and TEARDOWNS.
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

__all__ = ["FACTORIES", "LAUNCHERS", "REFERENCE_LAUNCHER", "TEARDOWNS", "LauncherChoice",
           "choose_launcher", "docker_usable", "launcher_factory", "netns_usable", "state_teardown"]

# "module:attribute" of each launcher's class (its `name` is the key)
FACTORIES = {"netns": "bench.launch.netns:NetnsLauncher",
             "docker": "bench.launch.docker:DockerLauncher",
             "local": "bench.launch.local:LocalLauncher",
             "ssh": "bench.launch.ssh.launcher:SshLauncher"}
LAUNCHERS = ("auto", *FACTORIES)  # the --launcher choices
# "module:attribute" of the function removing what a killed run's state file names,
# `teardown(state, path, executor) -> [what was removed]`, by the file's `launcher`
# (bench.launch.state.cleanup)
TEARDOWNS = {"netns": "bench.launch.netns.state:teardown_state",
             "docker": "bench.launch.docker.state:teardown_state",
             "local": "bench.launch.local:teardown_state",
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


# The launcher whose cells' directories carry no tag (LauncherChoice.tag): the suite's
# reference, shaped, the default as root, the one results/baseline was measured on.
REFERENCE_LAUNCHER = "netns"


@dataclass(frozen=True)
class LauncherChoice:
    """Which launcher builds the hosts, and why (printed, and kept in meta).
    `options`: the launcher's own options that change what a cell measures (ssh: the
    hostfile, whether links are shaped), part of the cell's identity."""

    name: str  # netns | docker | local | ssh: the factory's `name`
    reason: str
    factory: type[Launcher] = field(repr=False, compare=False)
    options: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.factory.name != self.name:
            raise ValueError(f"LauncherChoice.name: expected the factory's name "
                             f"{self.factory.name!r}, got {self.name!r}")

    @property
    def shaped(self) -> bool:
        """Whether the factory's links carry the scenario's rates and delays."""
        return self.factory.shaped

    @property
    def tag(self) -> str:
        """How a cell's directory names this launcher: '' for REFERENCE_LAUNCHER (its
        cells keep the sweep's names: `100mbps__fp32`), else the name (`100mbps__fp32__docker`),
        with '-unshaped' for a launcher that shapes told not to (`ssh-unshaped`). Cells of
        two launchers so live side by side in one results directory: a Docker run never
        replaces, nor reuses, the netns cells (Note [cell identity], bench.harness.meta)."""
        if self.name == REFERENCE_LAUNCHER:
            return ""
        unshaped = not self.shaped and "shaping" in self.options
        return f"{self.name}-unshaped" if unshaped else self.name

    def identity(self) -> dict:
        """The launcher's part of a cell's identity, known before any host is up:
        name, whether it shapes, its options."""
        return {"launcher": self.name, "shaped": self.shaped, "options": dict(self.options)}


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


def choose_launcher(choice: str = "auto", plugins: tuple = (), **options: Any
                    ) -> LauncherChoice:
    """auto: netns when root and `ip netns` works, else local (unshaped); docker only
    when asked for (it needs a daemon and the worker image); ssh only when asked for,
    with its options (`hostfile`, the hosts; `shaping`, False to measure the real links
    unshaped), which the factory gets bound (its `bind`), so that the harness builds it
    with the protocol's arguments like any other. Options for a launcher that takes
    none are refused, naming them. `plugins`: the plug-ins (aqsgd.compress.plugins.
    Plugin) the cells run, bound to a launcher whose workers run elsewhere (docker,
    ssh), which refuses a container or host without the same copy (docs/plugins.md)."""
    if choice not in LAUNCHERS:
        raise ValueError(f"launcher must be one of {', '.join(LAUNCHERS)}, got {choice!r}")
    if choice == "ssh":
        return _ssh_choice(plugins=plugins, **options)
    if options:
        raise ValueError(f"launcher {choice} takes no options, got {', '.join(options)} "
                         f"(--hostfile and --no-shaping are the ssh launcher's)")
    if choice == "docker":
        ok, why = docker_usable()
        if not ok:
            raise ValueError(f"launcher docker requested but unusable: {why}")
        return LauncherChoice("docker", why, launcher_factory("docker").bind(plugins))
    if choice in ("auto", "netns"):
        ok, why = netns_usable()
        if ok:
            return LauncherChoice("netns", why, launcher_factory("netns"))
        if choice == "netns":
            raise ValueError(f"launcher netns requested but unusable: {why}")
        reason = f"network namespaces unusable ({why}): links are NOT shaped"
    elif choice == "local":
        reason = "requested: links are NOT shaped"
    else:  # a launcher with no options and no check of its own
        return LauncherChoice(choice, "requested", launcher_factory(choice))
    return LauncherChoice("local", reason, launcher_factory("local"))


def _ssh_choice(hostfile: Path | str | None = None, shaping: bool = True, plugins: tuple = ()
                ) -> LauncherChoice:
    if hostfile is None:
        raise ValueError("launcher ssh needs --hostfile FILE (the hosts, one a line: "
                         "`HOST slots=N interface=DEV ...`, or YAML)")
    if not Path(hostfile).is_file():
        raise ValueError(f"launcher ssh: hostfile {hostfile} not found")
    reason = (f"hosts of {hostfile} over SSH, " + ("their interfaces shaped" if shaping else
              "NOT shaped (--no-shaping): the real links, measured"))
    return LauncherChoice("ssh", reason, launcher_factory("ssh").bind(hostfile, shaping, plugins),
                          {"hostfile": str(Path(hostfile).resolve()), "shaping": shaping})
