"""The Docker launcher for real, where a daemon and the worker image are at hand: one
2-stage fine-tune cell across two shaped containers through the harness, net-cleanup of a
killed run, stopping a worker, the entrypoint, a delay scenario, an fp32 cell's loss.

The tests use the image `make docker-image` builds (bench.launch.docker.spec.DOCKER_IMAGE)
and the daemon DOCKER_HOST names (`docker/dockerd.sh start` prints it): the `docker_daemon`
mark. CI builds both; elsewhere they skip saying which is missing (tests/conftest.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness_helpers import check_smoke_cell, smoke_sweep, two_launchers_in_one_dir
from kill_helpers import kill_watchdogs
from launch_helpers import delay_scenario, docker_spec

from bench.launch.docker import DockerLauncher, teardown_docker
from bench.launch.docker.spec import DOCKER_IMAGE, TUN_DEV
from bench.net.scenario import load_scenario

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[4]


# ------------------------------------------------------- with a daemon and the image
def _left_over(names: dict[str, list[str]]) -> list[str]:
    import docker

    client = docker.from_env()
    left = []
    for kind, coll in (("containers", client.containers), ("networks", client.networks),
                       ("volumes", client.volumes)):
        for name in names[kind]:
            try:
                coll.get(name)
                left.append(name)
            except docker.errors.NotFound:
                pass
    return left


@pytest.mark.docker_daemon
@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(300)
def test_two_stage_cell_across_two_shaped_containers(tmp_path):
    out, outcomes = smoke_sweep(tmp_path, "docker")
    assert [o.status for o in outcomes] == ["ok"]
    meta = check_smoke_cell(out, "docker")
    launcher = meta["launcher"]
    assert meta["cell"]["shaped"] is True and meta["cell"]["rate_mbit"] == 100
    assert launcher["shaping"]["rate"].startswith("htb")
    assert len(meta["probe"]) == 2
    for link in meta["probe"]:  # measured inside the containers
        assert abs(link["rate_mbit_achieved"] / link["rate_mbit_configured"] - 1) < 0.05, link
    names = {"containers": launcher["containers"], "networks": [launcher["network"]["name"]],
             "volumes": launcher["volumes"]}
    assert _left_over(names) == []
    assert not list((out / ".launcher").glob("aqd*.json"))


@pytest.mark.docker_daemon
@pytest.mark.netns
@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(500)
def test_a_docker_run_after_a_netns_run_measures_its_own_cell_and_keeps_the_netns_one(
        tmp_path):
    # `make bench SCENARIO=100mbps` then `... LAUNCHER=docker`: never the netns table again
    summary = two_launchers_in_one_dir(tmp_path, "netns", "docker")
    assert set(summary["cell"]) == {"100mbps__aqsgd-fw2-bw4", "100mbps__aqsgd-fw2-bw4__docker"}
    assert all(label.startswith(("netns (htb", "docker (htb"))
               for label in summary["launcher_label"])


@pytest.mark.docker_daemon
@pytest.mark.timeout(180)
def test_a_killed_run_is_removed_by_net_cleanup(tmp_path):
    state_dir = tmp_path / "state"
    code = ("import time; from bench.net.scenario import load_scenario\n"
            "from bench.launch.docker import DockerLauncher\n"
            f"h = DockerLauncher(load_scenario('100mbps'), 2, state_dir={str(state_dir)!r})\n"
            "h.__enter__(); print('up', flush=True); time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert proc.stdout.readline().strip() == "up"
    finally:
        kill_watchdogs(state_dir)  # a crash: nothing tears the run down
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    (state,) = state_dir.glob("aqd*.json")
    names = json.loads(state.read_text())
    try:
        built = [c for c in names["containers"] if not c.endswith("-cap")]  # the netem test's
        assert _left_over(names) == built + names["networks"] + names["volumes"]
        done = subprocess.run([sys.executable, "-m", "bench.launch", "cleanup",
                               "--all-recorded", "--state-dir", str(state_dir)],
                              capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
        assert done.returncode == 0, done.stderr
        time.sleep(0.1)
        assert _left_over(names) == [] and not state.exists()
    finally:  # a failed check above must not leave the killed run's containers behind
        teardown_docker(names)


@pytest.mark.docker_daemon
@pytest.mark.timeout(120)
def test_stopping_a_spawned_worker_stops_it_inside_its_container(tmp_path):
    from bench.launch.process import stop_group

    with DockerLauncher(load_scenario("100mbps"), 2, state_dir=tmp_path / ".launcher") as hosts:
        proc = hosts.spawn(1, ["sleep", "300"], None, tmp_path / "sleep.log")
        container = hosts._containers[1]

        def sleeping() -> bool:
            return any("sleep 300" in " ".join(p) for p in container.top()["Processes"])

        deadline = time.monotonic() + 20
        while not sleeping():
            assert time.monotonic() < deadline, "the spawned command never started"
            time.sleep(0.2)
        stop_group(proc, 2.0)  # what the harness does: signals the docker exec client
        deadline = time.monotonic() + 20
        while sleeping():
            assert time.monotonic() < deadline, "the command outlived its docker exec client"
            time.sleep(0.2)


@pytest.mark.docker_daemon
@pytest.mark.timeout(120)
def test_the_entrypoint_shapes_first_then_runs_the_command_as_the_worker_user():
    import secrets

    import docker

    client = docker.from_env()
    spec = docker_spec(n=2)
    name = f"aqdtest-{secrets.token_hex(3)}"
    try:
        out = client.containers.run(
            DOCKER_IMAGE, ["sh", "-c", "id -u; tc qdisc show dev eth0"], name=name,
            environment={"AQ_SHAPING_ARGVS": json.dumps([list(a)
                                                         for a in spec.shaping_argvs(0)])},
            cap_add=["NET_ADMIN"]).decode()
    finally:
        try:
            client.containers.get(name).remove(force=True)
        except docker.errors.NotFound:
            pass
    uid, *qdiscs = out.splitlines()
    assert uid == "1000"
    assert any(q.startswith("qdisc htb 1: root") for q in qdiscs), out


@pytest.mark.docker_daemon
@pytest.mark.timeout(180)
def test_a_delay_scenario_runs_each_containers_delay_line_and_probes_rtt_and_rate(tmp_path):
    with DockerLauncher(delay_scenario(10.0), 2, state_dir=tmp_path / ".launcher") as hosts:
        records = hosts.probe(check=False, duration_s=1.0)  # held to the netns test's bounds
        rec = hosts.record()
        devices = hosts.run_as_root(1, ("ip", "-o", "link")).stdout
    names = {"containers": [*rec["containers"], f"{rec['prefix']}-cap"],
             "networks": [rec["network"]["name"]], "volumes": rec["volumes"]}
    if rec["capabilities"]["netem"]:  # a kernel with netem keeps using it
        assert rec["shaping"]["delay"].startswith("netem") and TUN_DEV not in devices
    else:
        assert rec["shaping"]["delay"].startswith("userspace TUN delay line inside each")
        assert TUN_DEV in devices and rec["hosts"][0]["device"] == TUN_DEV
    assert len(records) == 2
    for r in records:  # measured inside the containers; one way within 2 ms, as on netns
        assert abs(r.rtt_ms / 2 - 10.0) <= 2.0, r
        assert abs(r.rate_mbit_achieved / 100 - 1) < 0.05, r
    assert _left_over(names) == [] and not list((tmp_path / ".launcher").glob("aqd*.json"))


@pytest.mark.docker_daemon
@pytest.mark.slow
@pytest.mark.netns
@pytest.mark.workers
@pytest.mark.timeout(600)
def test_an_fp32_cell_under_docker_ends_at_the_netns_cells_loss(tmp_path):
    import pandas as pd

    from bench.harness.run import run_sweep
    from bench.harness.sweep import SweepSpec, Workload, parse_mode

    # the cached starting checkpoint and the pydoc text: both must be the host's
    workload = Workload(steps=2, train_samples=64, timeout_s=200, dist_timeout_s=60)
    losses = {}
    for launcher in ("netns", "docker"):
        spec = SweepSpec("same", ("100mbps",), (parse_mode("fp32"),), workload)
        out = tmp_path / launcher
        outcomes = run_sweep(spec, out, launcher=launcher, quiet=True, echo=lambda s: None)
        assert [o.status for o in outcomes] == ["ok"], launcher
        (cell,) = [p for p in out.iterdir() if (p / "metrics.csv").is_file()]
        frame = pd.read_csv(cell / "metrics.csv")
        train = frame[(frame["kind"] == "train") & frame["loss"].notna()]
        losses[launcher] = train.sort_values("step")["loss"].tolist()
    assert len(losses["docker"]) == len(losses["netns"]) == 3
    assert losses["docker"] == pytest.approx(losses["netns"], rel=1e-5, abs=1e-6), losses
