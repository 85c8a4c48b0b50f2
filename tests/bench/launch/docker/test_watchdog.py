"""A harness killed with SIGKILL mid-cell on the Docker launcher, with no cleanup command:
the `docker exec` clients' input closes (the entrypoint's --tied mode stops each worker)
and the watchdog (bench.launch.watchdog) removes the containers, the network and the
volume by name; no process of the run within 10 s, no name within 30 s, and each rank
log says that the harness is gone. Needs the daemon and the worker image (the
`docker_daemon` mark, as test_launcher.py)."""

from __future__ import annotations

import pytest
from kill_helpers import check_kill, cmdline, naming, sigkill, start_harness, training, wait_for

from bench.launch.docker import teardown_docker
from bench.launch.process import ProcessIdentity

pytestmark = [pytest.mark.docker, pytest.mark.docker_daemon, pytest.mark.slow,
              pytest.mark.workers]
WAIT_S = 200.0  # containers, the probe and two workers importing torch


def _present(state: dict) -> list[str]:
    """What of the run is on the daemon: containers by the run's label, the network and
    the volume by the names its state file records."""
    import docker

    client = docker.from_env()
    label = {"label": f"aqsgd-bench.run={state['run_id']}"}
    return ([c.name for c in client.containers.list(all=True, filters=label)]
            + [n.name for n in client.networks.list(names=state["networks"])]
            + [v.name for v in client.volumes.list() if v.name in state["volumes"]])


@pytest.mark.timeout(600)
def test_a_harness_killed_mid_cell_leaves_no_container(tmp_path):
    out, log = tmp_path / "results", tmp_path / "harness.log"
    harness = start_harness(out, log, "docker")
    state = None
    try:
        try:
            state = wait_for("two training workers", lambda: training(out), harness, log,
                             WAIT_S)
            clients = [ProcessIdentity.of(p) for p in state["spawned_pids"]]
        finally:
            killed_at = sigkill(harness)

        def processes() -> list:
            return ([f"docker exec {c.pid}" for c in clients if c and c.is_running()]
                    + [f"{p}: {cmdline(p)}" for p in naming(str(out))
                       if "bench.launch.watchdog" not in cmdline(p)])

        check_kill("docker", harness, killed_at, out, processes,
                   lambda: _present(state) + list((out / ".launcher").iterdir())
                   + naming(str(out)))
    finally:  # whatever failed above, the run's names go (later tests look for none)
        if state is not None:
            teardown_docker(state)
