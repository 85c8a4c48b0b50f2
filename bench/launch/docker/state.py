"""The Docker run's state file and teardown by the names it records.

Before a Docker run creates anything it writes STATE_DIR/P.json (P = its prefix, see
bench/launch/docker/spec.py): the fields every launcher's state file starts with
(bench.launch.state.launcher_fields, `"launcher": "docker"`), the daemon it talks to
(`docker_host`: DOCKER_HOST, None for the default socket), every container, network and
volume it may create, and the pids of the `docker exec` clients it spawned. Teardown, in
the launcher's `finally` or later by `python -m bench.launch cleanup` (through
`teardown_state`, which bench.launch.choice names for state files of "docker"), removes
exactly those names from that daemon, whatever DOCKER_HOST the shell running the
cleanup has.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from aqsgd.filecache import atomic_write_text
from bench.launch.docker.checks import docker_client
from bench.launch.docker.spec import DockerRunSpec
from bench.launch.state import launcher_fields
from bench.net.executor import Executor

__all__ = ["recorded_client", "teardown_docker", "teardown_state", "write_state"]


def write_state(path: Path, spec: DockerRunSpec, run_id: str, spawned_pids: list[int]) -> None:
    """(Re)write a Docker run's state file atomically: every name the run may create,
    before it is created, and the pids spawned so far."""
    state = {**launcher_fields("docker", run_id, spec.prefix),
             "docker_host": os.environ.get("DOCKER_HOST"),
             "containers": [*spec.containers(), spec.scratch_container],
             "networks": [spec.network],
             "volumes": [spec.volume], "spawned_pids": spawned_pids}
    atomic_write_text(path, json.dumps(state, indent=1))


def recorded_client(state: dict):
    """The client of the daemon a state file's run used: its `docker_host` (None or
    missing: the default socket), the rest of the environment (TLS settings) this
    process's."""
    environment = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
    if state.get("docker_host"):
        environment["DOCKER_HOST"] = state["docker_host"]
    return docker_client(environment)


def teardown_docker(names: dict[str, list[str]], client=None) -> list[str]:
    """Remove the named containers (forced: their processes die with them), then the
    networks, then the volumes; names not present are skipped. `client` None: the
    daemon `names` records (recorded_client). Returns what was removed."""
    import docker

    client = client or recorded_client(names)
    removed = []
    kinds = (("containers", client.containers, {"force": True}),
             ("networks", client.networks, {}), ("volumes", client.volumes, {"force": True}))
    for kind, collection, kw in kinds:
        for name in names.get(kind, []):
            try:
                collection.get(name).remove(**kw)
            except docker.errors.NotFound:
                continue
            removed.append(f"{kind[:-1]} {name}")
    return removed


def teardown_state(state: dict, path: Path, ex: Executor) -> list[str]:
    """What a killed Docker run's state file names, removed from the daemon it records
    (bench.launch.state.cleanup calls this; `path` and `ex` are unused: a Docker run
    keeps no other file and runs no command on the host)."""
    return teardown_docker(state)
