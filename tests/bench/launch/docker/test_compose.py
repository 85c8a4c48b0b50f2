"""The compose file (bench.launch.docker.compose): services, network, caps, environment, GPUs,
shaping, delay; and, where docker-compose is installed, that it validates."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import yaml
from launch_helpers import delay_scenario

from bench.launch.docker.compose import compose_dict, write_compose
from bench.launch.docker.spec import TUN_DEV
from bench.net.delayline import TunnelConfig
from bench.net.scenario import load_scenario

pytestmark = pytest.mark.docker


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
    netem = compose_dict(delay_scenario(), 2)["services"]["host0"]
    assert any("netem" in a for a in json.loads(netem["environment"]["AQ_SHAPING_ARGVS"]))
    assert "devices" not in netem and "AQ_DELAYLINE_CONFIG" not in netem["environment"]
    doc = compose_dict(delay_scenario(), 2, delay_mechanism="delayline")
    h0, h1 = doc["services"]["host0"], doc["services"]["host1"]
    assert h0["devices"] == ["/dev/net/tun:/dev/net/tun"] and h0["cap_add"] == ["NET_ADMIN"]
    cfg = TunnelConfig.from_json(h1["environment"]["AQ_DELAYLINE_CONFIG"])
    assert cfg.host == 1 and cfg.delay_in_ms == (10.0, 0.0)
    assert h1["networks"]["aqsgd"]["ipv4_address"] == cfg.peer_addrs[1]
    assert h1["command"][h1["command"].index("--master-addr") + 1] == cfg.tun_addrs[0]
    assert h1["environment"]["GLOO_SOCKET_IFNAME"] == TUN_DEV
    with pytest.raises(ValueError, match="delay_mechanism: expected one of netem, delayline"):
        compose_dict(delay_scenario(), 2, delay_mechanism="tc")


@pytest.mark.skipif(shutil.which("docker-compose") is None,
                    reason="docker-compose not installed (apt-get install docker-compose)")
def test_compose_file_validates_under_docker_compose(tmp_path):
    for name, kw in (("gpus", {"gpus": True, "gpu_count": 2}),
                     ("delayline", {"delay_mechanism": "delayline"})):
        scenario = load_scenario("100mbps") if name == "gpus" else delay_scenario()
        path = write_compose(tmp_path / f"{name}.yaml", scenario, n_hosts=2, **kw)
        done = subprocess.run(["docker-compose", "-f", str(path), "config", "--quiet"],
                              capture_output=True, text=True, cwd=tmp_path, timeout=60)
        assert done.returncode == 0, (name, done.stderr)


def test_the_compose_command_follows_the_scenarios_layout_with_absolute_volumes(
        tmp_path, monkeypatch, capsys):
    """`bench docker compose --scenario 100mbps`: one service per host of the 4-host
    layout, as `bench run` places the cell; every volume absolute, so the file validates
    (and runs) from another folder."""
    from bench import REPO_ROOT
    from bench.__main__ import main

    out = tmp_path / "sub" / "compose.yaml"
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    assert main(["docker", "compose", "--scenario", "100mbps", "--out", str(out)]) == 0
    assert "4 services (4 stages x 1 replica(s)" in capsys.readouterr().out
    doc = yaml.safe_load(out.read_text())
    assert list(doc["services"]) == ["host0", "host1", "host2", "host3"]
    run = yaml.safe_load((tmp_path / "sub" / "compose.run.yaml").read_text())
    assert (run["pipeline"]["stages"], run["pipeline"]["replicas"]) == (4, 1)
    assert run["forward"]["bits"] == 2  # the default mode, aqsgd:2/4
    for service in doc["services"].values():
        hosts = [v.split(":")[0] for v in service["volumes"]]
        assert all(h.startswith("/") for h in hosts), hosts
        assert hosts[0] == str(REPO_ROOT) and hosts[-1] == str(out.with_name("compose.run.yaml"))
        assert service["command"][service["command"].index("--world-size") + 1] == "4"
    # aqsgd+gc: 2 stages x 2 replicas on the same 4 hosts, as in `bench run`
    assert main(["docker", "compose", "--scenario", "100mbps", "--mode", "aqsgd+gc:2/4",
                 "--out", str(out)]) == 0
    assert "4 services (2 stages x 2 replica(s)" in capsys.readouterr().out
    if shutil.which("docker-compose") is not None:
        done = subprocess.run(["docker-compose", "-f", str(out), "config", "--quiet"],
                              capture_output=True, text=True, cwd="/", timeout=60)
        assert done.returncode == 0, done.stderr


def test_a_run_config_that_needs_more_hosts_than_the_scenario_is_refused(tmp_path, capsys):
    from bench.__main__ import main

    config = tmp_path / "big.yaml"
    config.write_text("model: {preset: tiny-8}\npipeline: {stages: 8}\n")
    code = main(["docker", "compose", "--scenario", "100mbps", "--config", str(config),
                 "--out", str(tmp_path / "c.yaml")])
    err = capsys.readouterr().err
    assert code == 2 and "--config" in err and "8 hosts" in err and "Traceback" not in err, err
