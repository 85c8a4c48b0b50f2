"""A harness killed with SIGKILL mid-cell on the Docker launcher, with no cleanup command:
the `docker exec` clients' input closes (the entrypoint's --tied mode stops each worker)
and the watchdog (bench.launch.watchdog) removes the containers, the network and the
volume by name; no process of the run within 10 s, no name within 30 s, and each rank
log says that the harness is gone. Needs the daemon and the worker image (the
`docker_daemon` mark, as test_launcher.py)."""

from __future__ import annotations

import pytest
from kill_helpers import (
    cmdline,
    naming,
    seconds_until,
    sigkill,
    start_harness,
    state_files,
    wait_for,
)

from bench.launch.docker import teardown_docker
from bench.launch.process import ProcessIdentity

pytestmark = [pytest.mark.docker, pytest.mark.docker_daemon, pytest.mark.slow,
              pytest.mark.workers]
WORKERS_S, BUILT_S = 10.0, 30.0  # the bounds, from the kill
WAIT_S = 200.0  # containers, the probe and two workers importing torch


def _present(state: dict) -> list[str]:
    """The containers, network and volume of the run's state file that exist."""
    import docker

    client = docker.from_env()
    found = []
    for kind, collection in (("containers", client.containers),
                             ("networks", client.networks), ("volumes", client.volumes)):
        for name in state[kind]:
            try:
                collection.get(name)
                found.append(name)
            except docker.errors.NotFound:
                continue
    return found


def _training(out) -> dict | None:
    """The run's state file once its two workers train (a metrics record written)."""
    for state in state_files(out):
        if len(state["spawned_pids"]) == 2 and any(
                f.stat().st_size for f in out.glob("*/metrics/rank*.jsonl")):
            return state
    return None


@pytest.mark.timeout(600)
def test_a_harness_killed_mid_cell_leaves_no_container(tmp_path):
    out, log = tmp_path / "results", tmp_path / "harness.log"
    harness = start_harness(out, log, "docker")
    state = None
    try:
        try:
            state = wait_for("two training workers", lambda: _training(out), harness, log,
                             WAIT_S)
            clients = [ProcessIdentity.of(p) for p in state["spawned_pids"]]
        finally:
            killed_at = sigkill(harness)

        def processes() -> list:
            return ([f"docker exec {c.pid}" for c in clients if c and c.is_running()]
                    + [f"{p}: {cmdline(p)}" for p in naming(str(out))
                       if "bench.launch.watchdog" not in cmdline(p)])

        workers_s = seconds_until(processes, killed_at, WORKERS_S)
        built_s = seconds_until(lambda: _present(state) + list((out / ".launcher").iterdir())
                                + naming(str(out)), killed_at, BUILT_S)
    finally:  # whatever failed above, the run's names go (later tests look for none)
        if state is not None:
            teardown_docker(state)
    rank_logs = sorted(out.glob("*/logs/rank*.log"))
    assert len(rank_logs) == 2
    for rank_log in rank_logs:
        assert f"the harness (pid {harness.pid}) is gone" in rank_log.read_text(), rank_log
    print(f"\ndocker: the last worker ended {workers_s:.1f} s after the harness was killed, "
          f"the containers, network and volume were gone after {built_s:.1f} s")
