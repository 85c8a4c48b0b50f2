"""The Docker launcher's run spec (bench.launch.docker.spec), pure logic: names, addresses,
GPU mapping, environment, tc commands, the delay line's tunnels, the exec command line."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from launch_helpers import docker_spec

from bench.launch.docker import DockerLauncher
from bench.launch.docker.spec import TUN_DEV, DockerRunSpec, GpuShortage, gpu_for_rank
from bench.net.delayline import TunnelConfig
from bench.net.scenario import load_scenario, parse_scenario
from bench.net.shaping import EgressLink, egress_argvs

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[4]


# ---------------------------------------------------------------- pure logic
def test_names_and_addresses_are_per_run_and_in_the_benchmarking_range():
    spec = docker_spec(n=3)
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
        docker_spec(n=2, use_gpus=True, gpu_count=1)
    assert [docker_spec(n=2, use_gpus=True, gpu_count=2).gpu(i) for i in (0, 1)] == [0, 1]


def test_worker_env_keeps_nccl_and_gloo_on_the_shaped_interface():
    spec = docker_spec(n=2)
    envs = [spec.worker_env(i) for i in range(2)]
    for env in envs:
        assert env["NCCL_P2P_DISABLE"] == env["NCCL_SHM_DISABLE"] == "1"
        assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "eth0"
    assert envs[0]["NCCL_HOSTID"] != envs[1]["NCCL_HOSTID"]


def test_shaping_is_the_netns_tc_builders_inside_each_container():
    spec = docker_spec(n=2)
    sc = load_scenario("100mbps")
    want = egress_argvs("eth0", [EgressLink(spec.addr(1), sc.link_spec(0, 1))], None,
                        spec.factor, False)
    assert spec.shaping_argvs(0) == want
    assert all(a[0] == "tc" and "-n" not in a for a in want)  # no namespace: in-container
    assert "104558012bit" in want[2]  # 100 Mbit/s payload x 1514/1448
    lifted = spec.rate_limit_argvs(0, 1, lifted=True)
    assert {i for i, _ in lifted} == {0} and all("change" in a for _, a in lifted)


def test_a_capped_downlink_is_a_tbf_on_an_ifb_inside_the_container():
    spec = docker_spec("heterogeneous", n=4)
    argvs = spec.shaping_argvs(3)
    assert ("ip", "link", "add", "name", "ifb0", "type", "ifb") in argvs
    tbf = [a for a in argvs if "tbf" in a]
    assert len(tbf) == 1 and "ifb0" in tbf[0]
    assert (3, tbf[0][:2] + ("change",) + tbf[0][3:]) in [
        (i, a) for i, a in spec.rate_limit_argvs(0, 3, lifted=False)]


def test_with_the_delay_line_workers_talk_over_each_containers_tun():
    spec = docker_spec(n=2, delay_line=True)
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
        docker_spec(n=2, delay_line=True, netem=True)


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
    # -P and PYTHONSAFEPATH: the working folder is not on its path (bench.launch.process)
    assert hosts.python == "host" and argv[:2] == ["docker", "exec"] and argv[-5:] == [
        hosts.spec.container(1), sys.executable, "-P", "-m", "aqsgd.train.worker"]
    assert "PYTHONSAFEPATH=1" in argv
    image = DockerLauncher(load_scenario("100mbps"), 2, run_id="t", gpus=False, python="image")
    assert image.exec_argv(1, [sys.executable, "-c", "1"])[-4:] == ["python3", "-P", "-c", "1"]
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
