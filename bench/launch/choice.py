"""Which launcher builds a run's hosts: `--launcher auto|netns|docker|local`.

    choice = choose_launcher("auto")   # netns when root and `ip netns` works, else local
    choice = choose_launcher("docker") # containers (a daemon and the worker image needed)
    with choice.factory(scenario, n_hosts, run_id=rid, state_dir=d) as hosts: ...
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field

from bench.launch.base import Launcher

__all__ = ["LAUNCHERS", "LauncherChoice", "choose_launcher"]

LAUNCHERS = ("auto", "netns", "docker", "local")  # the --launcher choices


@dataclass(frozen=True)
class LauncherChoice:
    """Which launcher builds the hosts, and why (printed, and kept in meta)."""

    name: str  # netns | local: the factory's `name`
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
    from bench.launch.dockerchecks import docker_client
    from bench.launch.dockerspec import DOCKER_IMAGE

    try:
        client = docker_client()
    except RuntimeError as err:
        return False, str(err)
    import docker

    try:
        client.images.get(DOCKER_IMAGE)
    except docker.errors.ImageNotFound:
        return False, f"image {DOCKER_IMAGE} not found: build it with `make docker-image`"
    return True, f"requested: Docker daemon answers, image {DOCKER_IMAGE} present"


def choose_launcher(choice: str = "auto") -> LauncherChoice:
    """auto: netns when root and `ip netns` works, else local (unshaped); docker only
    when asked for (it needs a daemon and the worker image)."""
    if choice not in LAUNCHERS:
        raise ValueError(f"launcher must be one of {', '.join(LAUNCHERS)}, got {choice!r}")
    if choice == "docker":
        ok, why = docker_usable()
        if not ok:
            raise ValueError(f"launcher docker requested but unusable: {why}")
        from bench.launch.docker import DockerLauncher

        return LauncherChoice("docker", why, DockerLauncher)
    if choice in ("auto", "netns"):
        ok, why = netns_usable()
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
