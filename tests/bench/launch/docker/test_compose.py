"""The compose file (bench.launch.docker.compose): services, network, caps, environment, GPUs,
shaping, delay; and, where docker-compose is installed, that it validates."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
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
