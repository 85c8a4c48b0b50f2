"""The Docker launcher's helpers around the daemon (bench/launch/docker/launcher.py):
its client and the host's GPUs, and whether the launcher can run here at all
(`daemon_and_image`, bench.launch.choice.docker_usable); the executor that runs a command
in a container as root; the netem test in a scratch container, the wait for each
container's delay line and its liveness check, the check that the host's interpreter
runs in the image, and that the workers' interpreter loads the same copy of every
plug-in the cells run (`python -m aqsgd.compress.plugins` in a container, docs/plugins.md).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from tenacity import Retrying, retry_if_result, stop_after_delay, wait_fixed

from aqsgd.compress.plugins import Plugin, copy_problems
from bench.launch.docker.spec import (
    DELAY_LINE_LOG_FILE,
    DELAY_LINE_PID_FILE,
    DELAY_LINE_READY_FILE,
    DOCKER_IMAGE,
    TUN_DEVICE,
    WORKER_USER,
)
from bench.launch.process import python_argv
from bench.net.executor import Argv, CommandError, Executor
from bench.net.scenario import NetworkScenario
from bench.net.tc import Capabilities, mechanisms_for

__all__ = ["ContainerExecutor", "check_delay_lines", "check_host_python", "check_plugins",
           "daemon_and_image",
           "docker_client", "gpu_count", "probe_capabilities", "wait_for_delay_line"]

DELAY_LINE_TIMEOUT_S = 70.0  # the entrypoint gives its delay line 60 s (docker/entrypoint.py)
POLL_S = 0.2
NETEM_TEST = ("tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms")


def docker_client(environment: Mapping[str, str] | None = None):
    """The client of the daemon `environment` names (None: this process's environment):
    DOCKER_HOST, or the default socket; a clear error when none answers."""
    import docker

    environment = os.environ if environment is None else environment
    try:
        client = docker.from_env(environment=dict(environment))
        client.ping()
    except docker.errors.DockerException as err:
        where = environment.get("DOCKER_HOST", "the default socket")
        raise RuntimeError(f"no Docker daemon answers at {where} ({err}); start one with "
                           f"`docker/dockerd.sh start` and export the DOCKER_HOST it "
                           f"prints") from None
    return client


def daemon_and_image(image: str = DOCKER_IMAGE) -> tuple[bool, str]:
    """(ok, why): a daemon answers (docker_client) and has `image`."""
    import docker

    try:
        client = docker_client()
    except RuntimeError as err:
        return False, str(err)
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        return False, f"image {image} not found: build it with `make docker-image`"
    return True, f"requested: Docker daemon answers, image {image} present"


def gpu_count() -> int:
    """NVIDIA GPUs on this host (/dev/nvidiaN device nodes)."""
    return sum(1 for p in Path("/dev").glob("nvidia[0-9]*"))


class ContainerExecutor(Executor):
    """Runs argvs inside one container as root (`docker exec`, no shell); keeps the
    history as `docker exec NAME argv...` for the run record."""

    def __init__(self, container, history: list[Argv]):
        super().__init__()
        self.container = container
        self.history = history

    def run(self, argv, check: bool = True) -> subprocess.CompletedProcess:
        argv = tuple(argv)
        self.history.append(("docker", "exec", self.container.name, *argv))
        code, (out, err) = self.container.exec_run(list(argv), user="root", demux=True)
        proc = subprocess.CompletedProcess(list(argv), code, (out or b"").decode(),
                                           (err or b"").decode())
        if check and code != 0:
            raise CommandError(argv, code, proc.stderr)
        return proc


def probe_capabilities(client, image: str, name: str, scenario: NetworkScenario,
                       n_hosts: int, history: list[Argv]) -> Capabilities:
    """Whether netem works in a container (a netem qdisc on the loopback of the
    scratch container `name`, removed before this returns), and whether this host has
    the TUN device the delay line needs. Only a scenario with delay, jitter or loss
    starts the scratch container."""
    import docker

    tun = Path(TUN_DEVICE).exists()
    # with netem assumed, every property netem would deliver shows up as "netem"
    wanted = mechanisms_for(scenario, n_hosts, Capabilities(True, True), False)
    if "netem" not in wanted.values():
        return Capabilities(netem=False, delay_line=tun)
    history.append(("docker", "run", "--rm", "--cap-add", "NET_ADMIN", "--name", name,
                    image, *NETEM_TEST))
    try:
        client.containers.run(image, list(NETEM_TEST[1:]), entrypoint=[NETEM_TEST[0]],
                              name=name, cap_add=["NET_ADMIN"], network_mode="none",
                              user="root")
        netem = True
    except docker.errors.ContainerError:
        netem = False
    finally:
        try:
            client.containers.get(name).remove(force=True)
        except docker.errors.NotFound:
            pass
    return Capabilities(netem=netem, delay_line=tun)


def wait_for_delay_line(container) -> str:
    """Wait until the container's delay line forwards; its scheduling ("normal", or
    "fifo:N" where it got a real-time priority). Raises with the container's log when
    the entrypoint gave up."""
    def ready() -> str | None:  # its scheduling once ready; raises once it cannot be
        code, out = container.exec_run(["cat", DELAY_LINE_READY_FILE], user="root")
        if code == 0 and out.decode().startswith("ready "):
            return out.decode().split()[1]
        container.reload()
        if container.status != "running":
            raise not_ready()
        return None

    def not_ready() -> RuntimeError:
        return RuntimeError(f"the delay line of container {container.name} is not ready "
                            f"(container {container.status}); its log:\n"
                            f"{container.logs().decode(errors='replace')[-4000:]}")

    scheduling = Retrying(stop=stop_after_delay(DELAY_LINE_TIMEOUT_S), wait=wait_fixed(POLL_S),
                          retry=retry_if_result(lambda r: r is None),
                          retry_error_callback=lambda state: None)(ready)
    if scheduling is None:
        raise not_ready()
    return scheduling


def check_delay_lines(containers: list, history: list[Argv]) -> None:
    """Raise if a container's delay line, which carries every packet, has died."""
    for c in containers:
        ex = ContainerExecutor(c, history)
        pid = ex.run(("cat", DELAY_LINE_PID_FILE)).stdout.strip()
        if ex.run(("test", "-d", f"/proc/{pid}"), check=False).returncode != 0:
            log = ex.run(("cat", DELAY_LINE_LOG_FILE), check=False).stdout
            raise RuntimeError(f"the delay line of container {c.name} (pid {pid}) has "
                               f"exited; its log:\n{log[-4000:]}")


def check_host_python(container, python: str, image: str) -> None:
    """The host's interpreter `python` must run in the image as the worker user."""
    code, out = container.exec_run(python_argv(python, "-c", "import torch"), user=WORKER_USER)
    if code != 0:
        raise RuntimeError(
            f"this host's Python ({python}) does not run in image {image} as "
            f"{WORKER_USER!r} (exit {code}): {out.decode(errors='replace')[-1000:]}; "
            f"rebuild the image (`make docker-image`) or pass python='image'")


def check_plugins(container, python: str, plugins: Sequence[Plugin], image: str) -> None:
    """`python` in the container, as the worker user, must load the same copy of each
    plug-in as this host (aqsgd.compress.plugins.host_copies); a RuntimeError naming
    every plug-in it lacks or has another copy of."""
    if not plugins:
        return
    argv = python_argv(python, "-m", "aqsgd.compress.plugins", *(p.source for p in plugins))
    code, (out, err) = container.exec_run(argv, user=WORKER_USER, demux=True)
    out, err = (out or b"").decode(errors="replace"), (err or b"").decode(errors="replace")
    if code != 0:
        raise RuntimeError(f"image {image}: {python} could not look for the plug-ins "
                           f"{', '.join(p.module for p in plugins)} (exit {code}): "
                           f"{err.strip()[-1000:] or out.strip()[-1000:]}")
    problems = copy_problems(plugins, json.loads(out))
    if problems:
        raise RuntimeError(f"image {image} with {python} cannot run these cells' plug-ins "
                           f"(docs/plugins.md):\n  " + "\n  ".join(problems))
