"""The Docker launcher: its pure logic everywhere (names, addresses, GPU mapping,
environment, tc commands, the compose file, teardown by name with a fake client),
and, where a daemon and the worker image are at hand, one real 2-stage fine-tune
cell across two shaped containers through the harness.

The integration tests use the image `make docker-image` builds
(bench.launch.docker.spec.DOCKER_IMAGE) and the daemon DOCKER_HOST names
(`docker/dockerd.sh start` prints it): the `docker_daemon` mark. CI builds both;
elsewhere they skip saying which is missing (tests/conftest.py)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.launch.docker import DockerLauncher, teardown_docker
from bench.launch.docker.compose import compose_dict, write_compose
from bench.launch.docker.spec import (
    DOCKER_IMAGE,
    TUN_DEV,
    DockerRunSpec,
    GpuShortage,
    gpu_for_rank,
)
from bench.launch.state import cleanup
from bench.net.delayline import TunnelConfig
from bench.net.scenario import load_scenario, parse_scenario
from bench.net.shaping import EgressLink, egress_argvs

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[1]


def _spec(scenario="100mbps", n=2, **kw) -> DockerRunSpec:
    return DockerRunSpec(load_scenario(scenario), n, "aqd1a2b3", 300, **kw)


# ---------------------------------------------------------------- pure logic
def test_names_and_addresses_are_per_run_and_in_the_benchmarking_range():
    spec = _spec(n=3)
    assert spec.containers() == ["aqd1a2b3-h0", "aqd1a2b3-h1", "aqd1a2b3-h2"]
    assert (spec.network, spec.volume) == ("aqd1a2b3-net", "aqd1a2b3-cache")
    assert spec.subnet == "198.19.44.0/24" and spec.gateway == "198.19.44.1"
    assert [spec.addr(i) for i in range(3)] == ["198.19.44.2", "198.19.44.3", "198.19.44.4"]
    with pytest.raises(IndexError, match=r"host index 3 out of range \[0, 3\)"):
        spec.addr(3)
    a = DockerRunSpec.new(load_scenario("100mbps"), 2, "run")
    b = DockerRunSpec.new(load_scenario("100mbps"), 2, "run")
    assert a.prefix != b.prefix and a.prefix.startswith("aqd") and len(a.prefix) == 8
    with pytest.raises(ValueError, match="subnet_index: expected 0..511"):
        DockerRunSpec(load_scenario("100mbps"), 2, "aqd00000", 512)


def test_rank_i_gets_gpu_i_and_too_few_gpus_is_a_clear_error():
    assert [gpu_for_rank(r, 4, 8, True) for r in range(4)] == [0, 1, 2, 3]
    assert gpu_for_rank(1, 4, 0, False) is None
    with pytest.raises(GpuShortage, match=r"4 ranks, but this host has 2 GPU\(s\)"):
        gpu_for_rank(0, 4, 2, True)
    with pytest.raises(GpuShortage):  # refused before anything is created
        _spec(n=2, use_gpus=True, gpu_count=1)
    assert [_spec(n=2, use_gpus=True, gpu_count=2).gpu(i) for i in (0, 1)] == [0, 1]


def test_worker_env_keeps_nccl_and_gloo_on_the_shaped_interface():
    spec = _spec(n=2)
    envs = [spec.worker_env(i) for i in range(2)]
    for env in envs:
        assert env["NCCL_P2P_DISABLE"] == env["NCCL_SHM_DISABLE"] == "1"
        assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "eth0"
    assert envs[0]["NCCL_HOSTID"] != envs[1]["NCCL_HOSTID"]


def test_shaping_is_the_netns_tc_builders_inside_each_container():
    spec = _spec(n=2)
    sc = load_scenario("100mbps")
    want = egress_argvs("eth0", [EgressLink(spec.addr(1), sc.link_spec(0, 1))], None,
                        spec.factor, False)
    assert spec.shaping_argvs(0) == want
    assert all(a[0] == "tc" and "-n" not in a for a in want)  # no namespace: in-container
    assert "104558012bit" in want[2]  # 100 Mbit/s payload x 1514/1448
    lifted = spec.rate_limit_argvs(0, 1, lifted=True)
    assert {i for i, _ in lifted} == {0} and all("change" in a for _, a in lifted)


def test_a_capped_downlink_is_a_tbf_on_an_ifb_inside_the_container():
    spec = _spec("heterogeneous", n=4)
    argvs = spec.shaping_argvs(3)
    assert ("ip", "link", "add", "name", "ifb0", "type", "ifb") in argvs
    tbf = [a for a in argvs if "tbf" in a]
    assert len(tbf) == 1 and "ifb0" in tbf[0]
    assert (3, tbf[0][:2] + ("change",) + tbf[0][3:]) in [
        (i, a) for i, a in spec.rate_limit_argvs(0, 3, lifted=False)]


def _delay_scenario(delay_ms=10.0, **link):
    return parse_scenario({"description": "delay", "layout": {"stages": 2},
                           "link": {"rate_mbit": 100, "delay_ms": delay_ms, **link}}, "delay")


def test_with_the_delay_line_workers_talk_over_each_containers_tun():
    spec = _spec(n=2, delay_line=True)
    sc = load_scenario("100mbps")
    assert spec.network_addr(1) == "198.19.44.3" and spec.addr(1) == spec.tun_addr(1)
    assert spec.tun_addr(1) == "198.18.44.3"  # the other half of the /15, same /24 number
    assert spec.worker_env(0)["GLOO_SOCKET_IFNAME"] == TUN_DEV == spec.device
    argvs = spec.shaping_argvs(0)
    assert argvs[:2] == [("ip", "addr", "add", "198.18.44.2/24", "dev", TUN_DEV),
                         ("ip", "link", "set", TUN_DEV, "up", "mtu", "8964",
                          "txqueuelen", "1000")]
    # tc on the TUN towards the peer's TUN address; no Ethernet header on a TUN
    assert argvs[2:] == egress_argvs(TUN_DEV, [EgressLink("198.18.44.3", sc.link_spec(0, 1))],
                                     None, 8964 / 8912, False)
    with pytest.raises(ValueError, match="at most one delay mechanism"):
        _spec(n=2, delay_line=True, netem=True)


def test_tunnel_config_gives_each_container_its_outgoing_links():
    raw = {"description": "asym", "layout": {"stages": 2},
           "link": {"rate_mbit": 100, "delay_ms": 5, "jitter_ms": 1, "loss_pct": 0.5},
           "links": [{"src": 1, "dst": 0, "delay_ms": 20}]}
    spec = DockerRunSpec(parse_scenario(raw, "asym"), 2, "aqd1a2b3", 300, delay_line=True)
    c0, c1 = spec.tunnel_config(0), spec.tunnel_config(1)
    # delay and jitter where a packet arrives, loss where it leaves
    assert (c0.delay_in_ms, c1.delay_in_ms) == ((0.0, 20.0), (5.0, 0.0))
    assert c0.jitter_in_ms == (0.0, 1.0) and c1.loss_out_pct == (0.5, 0.0)
    assert c0.peer_addrs == (spec.network_addr(0), spec.network_addr(1))
    assert c1.tun_addrs == (spec.tun_addr(0), spec.tun_addr(1)) and c1.host == 1
    assert TunnelConfig.from_json(c1.to_json()) == c1
    with pytest.raises(ValueError, match=r"TunnelConfig.delay_in_ms: expected 2 entries"):
        TunnelConfig(0, TUN_DEV, ("a", "b"), ("c", "d"), 1, (0.0,), (0.0, 0.0), (0.0, 0.0))


def test_exec_argv_runs_as_the_worker_with_only_the_worker_env(monkeypatch):
    monkeypatch.setenv("VIRTUAL_ENV", "/host/venv")
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    hosts = DockerLauncher(load_scenario("100mbps"), 2, run_id="t", gpus=False)
    env = {**os.environ, "EXTRA": "1"}
    argv = hosts.exec_argv(1, [sys.executable, "-m", "aqsgd.train.worker"], env)
    # the host's interpreter by default on a CPU run: same stdlib text, same torch
    assert hosts.python == "host" and argv[:2] == ["docker", "exec"] and argv[-4:] == [
        hosts.spec.container(1), sys.executable, "-m", "aqsgd.train.worker"]
    image = DockerLauncher(load_scenario("100mbps"), 2, run_id="t", gpus=False, python="image")
    assert image.exec_argv(1, [sys.executable, "-c", "1"])[-3:] == ["python3", "-c", "1"]
    assert str(Path(sys.base_prefix).resolve()) in hosts._mounts()
    with pytest.raises(ValueError, match="python: expected one of host, image, got 'conda'"):
        DockerLauncher(load_scenario("100mbps"), 2, gpus=False, python="conda")
    monkeypatch.setattr(sys, "base_prefix", "/usr")  # a distribution's Python: never mounted
    assert DockerLauncher(load_scenario("100mbps"), 2, gpus=False).python == "image"
    with pytest.raises(ValueError, match="python: 'host' needs an interpreter outside"):
        DockerLauncher(load_scenario("100mbps"), 2, gpus=False, python="host")
    assert argv[argv.index("-u") + 1] == "worker"
    passed = dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "-e")
    assert passed["EXTRA"] == "1" and passed["NCCL_DEBUG"] == "INFO"
    assert passed["NCCL_HOSTID"].endswith("host1") and passed["PYTHONPATH"] == str(REPO)
    assert "VIRTUAL_ENV" not in passed and "PATH" not in passed


def test_compose_file_has_services_network_caps_env_gpus_and_shaping(tmp_path):
    doc = compose_dict(load_scenario("100mbps"), 2, gpus=True, gpu_count=2)
    assert "version" not in doc and list(doc["services"]) == ["host0", "host1"]
    net = doc["networks"]["aqsgd"]["ipam"]["config"][0]
    assert net["subnet"] == "198.18.1.0/24"
    h1 = doc["services"]["host1"]
    assert h1["cap_add"] == ["NET_ADMIN"] and "privileged" not in h1
    assert h1["networks"]["aqsgd"]["ipv4_address"] == "198.18.1.3"
    assert h1["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] == ["1"]
    shaping = json.loads(h1["environment"]["AQ_SHAPING_ARGVS"])
    assert shaping[0][:5] == ["tc", "qdisc", "add", "dev", "eth0"]
    assert h1["command"][h1["command"].index("--master-addr") + 1] == "198.18.1.2"
    assert "deploy" not in compose_dict(load_scenario("100mbps"), 2)["services"]["host0"]


def test_compose_delay_by_netem_or_by_each_services_delay_line():
    netem = compose_dict(_delay_scenario(), 2)["services"]["host0"]
    assert any("netem" in a for a in json.loads(netem["environment"]["AQ_SHAPING_ARGVS"]))
    assert "devices" not in netem and "AQ_DELAYLINE_CONFIG" not in netem["environment"]
    doc = compose_dict(_delay_scenario(), 2, delay_mechanism="delayline")
    h0, h1 = doc["services"]["host0"], doc["services"]["host1"]
    assert h0["devices"] == ["/dev/net/tun:/dev/net/tun"] and h0["cap_add"] == ["NET_ADMIN"]
    cfg = TunnelConfig.from_json(h1["environment"]["AQ_DELAYLINE_CONFIG"])
    assert cfg.host == 1 and cfg.delay_in_ms == (10.0, 0.0)
    assert h1["networks"]["aqsgd"]["ipv4_address"] == cfg.peer_addrs[1]
    assert h1["command"][h1["command"].index("--master-addr") + 1] == cfg.tun_addrs[0]
    assert h1["environment"]["GLOO_SOCKET_IFNAME"] == TUN_DEV
    with pytest.raises(ValueError, match="delay_mechanism: expected one of netem, delayline"):
        compose_dict(_delay_scenario(), 2, delay_mechanism="tc")


@pytest.mark.skipif(shutil.which("docker-compose") is None,
                    reason="docker-compose not installed (apt-get install docker-compose)")
def test_compose_file_validates_under_docker_compose(tmp_path):
    for name, kw in (("gpus", {"gpus": True, "gpu_count": 2}),
                     ("delayline", {"delay_mechanism": "delayline"})):
        scenario = load_scenario("100mbps") if name == "gpus" else _delay_scenario()
        path = write_compose(tmp_path / f"{name}.yaml", scenario, n_hosts=2, **kw)
        done = subprocess.run(["docker-compose", "-f", str(path), "config", "--quiet"],
                              capture_output=True, text=True, cwd=tmp_path, timeout=60)
        assert done.returncode == 0, (name, done.stderr)


class _NotFound(Exception):
    pass


class _Fake:
    """A docker client's containers/networks/volumes collections, by name."""

    def __init__(self, present):
        self.present, self.removed = set(present), []

    def get(self, name):
        if name not in self.present:
            raise _NotFound(name)
        fake = self

        class Obj:
            def remove(self, **kw):
                fake.removed.append(name)
                fake.present.discard(name)

        return Obj()


def test_teardown_removes_exactly_the_recorded_names(monkeypatch):
    import docker

    monkeypatch.setattr(docker.errors, "NotFound", _NotFound)
    client = type("C", (), {})()
    client.containers = _Fake({"aqd1-h0", "someone-else"})
    client.networks = _Fake({"aqd1-net"})
    client.volumes = _Fake(set())
    removed = teardown_docker({"containers": ["aqd1-h0", "aqd1-h1"], "networks": ["aqd1-net"],
                               "volumes": ["aqd1-cache"]}, client)
    assert removed == ["container aqd1-h0", "network aqd1-net"]
    assert client.containers.present == {"someone-else"}


def test_cleanup_of_a_docker_state_file_goes_through_teardown_docker(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr("bench.launch.docker.state.teardown_docker",
                        lambda state: seen.append(state) or ["container x"])
    path = tmp_path / "aqd12345.json"
    path.write_text(json.dumps({"launcher": "docker", "prefix": "aqd12345",
                                "containers": ["x"], "networks": [], "volumes": []}))
    assert cleanup([path]) == ["container x"] and not path.exists()
    assert seen[0]["containers"] == ["x"]


def test_teardown_of_a_state_file_talks_to_the_daemon_it_records(monkeypatch):
    # `make net-cleanup` from a shell whose DOCKER_HOST is another daemon's, or unset
    import bench.launch.docker.state as docker_state
    import docker

    monkeypatch.setattr(docker.errors, "NotFound", _NotFound)
    seen = []

    def client(environment):
        seen.append(environment.get("DOCKER_HOST"))
        fake = type("C", (), {})()
        fake.containers = fake.networks = fake.volumes = _Fake(set())
        return fake

    monkeypatch.setattr(docker_state, "docker_client", client)
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/someone-else.sock")
    names = {"containers": ["aqd1-h0"], "networks": [], "volumes": []}
    assert teardown_docker({**names, "docker_host": "unix:///run/suite.sock"}) == []
    assert teardown_docker({**names, "docker_host": None}) == []  # the default socket
    assert seen == ["unix:///run/suite.sock", None]


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
    from test_harness_e2e import _check_smoke_cell, _smoke

    out, outcomes = _smoke(tmp_path, "docker")
    assert [o.status for o in outcomes] == ["ok"]
    meta = _check_smoke_cell(out, "docker")
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
    spec = _spec(n=2)
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
    with DockerLauncher(_delay_scenario(10.0), 2, state_dir=tmp_path / ".launcher") as hosts:
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
