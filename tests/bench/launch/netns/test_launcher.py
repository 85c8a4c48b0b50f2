"""Network namespaces for real (bench.launch.netns): bring-up and teardown by name, delay,
loss and jitter, downlink caps, a gloo exchange across shaped links, a dead delay line.

Needs root and `ip netns` (the `netns` mark). Where those are missing the tests skip,
except under CI=true, where they fail: CI runs as root (tests/conftest.py).
"""

import json
import os
import signal
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from launch_helpers import leftovers

from bench.launch.netns import NetnsLauncher
from bench.net.scenario import load_scenario, parse_scenario, with_link

pytestmark = pytest.mark.netns
REPO = Path(__file__).resolve().parents[4]


@pytest.mark.timeout(60)
def test_topology_up_and_removed_by_name(tmp_path):
    with NetnsLauncher(load_scenario("loopback"), 3, state_dir=tmp_path) as hosts:
        prefix = hosts.names.prefix
        state = json.loads(hosts.state_path.read_text())
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        for ns in [hosts.names.switch_ns] + [hosts.netns(i) for i in range(3)]:
            assert ns in listed and ns in state["namespaces"]
        links = subprocess.run(["ip", "-n", hosts.netns(2), "-o", "link"], capture_output=True,
                               text=True).stdout
        assert hosts.device(2) in links and len(hosts.device(2)) <= 15
        assert hosts.addr(0) == "198.18.0.1"
        # long links need socket buffers above Linux's default 4 MiB maximum
        for knob in ("tcp_wmem", "tcp_rmem"):
            value = subprocess.run(["ip", "netns", "exec", hosts.netns(1), "cat",
                                    f"/proc/sys/net/ipv4/{knob}"], capture_output=True,
                                   text=True, check=True).stdout.split()
            assert int(value[2]) == 64 << 20
        env = hosts.worker_env(1)
        assert env["GLOO_SOCKET_IFNAME"] == hosts.device(1)
        assert env["NCCL_P2P_DISABLE"] == env["NCCL_SHM_DISABLE"] == "1"
        assert env["NCCL_HOSTID"] != hosts.worker_env(0)["NCCL_HOSTID"]
        rec = hosts.record()
        assert rec["shaping"]["rate"] == "none" and rec["data_plane"] == "veth + bridge"
        # nothing of ours in the host's own namespace: the bridge lives in P-sw
        assert not [x for x in leftovers(prefix) if not x.startswith("ip list")]
    assert leftovers(prefix) == []
    assert not hosts.state_path.exists()


@pytest.mark.timeout(90)
def test_delay_line_adds_10ms_each_way(tmp_path):
    scenario = with_link(load_scenario("100mbps"), delay_ms=10.0)
    with NetnsLauncher(scenario, 2, state_dir=tmp_path) as hosts:
        (r,) = hosts.probe(links=[(0, 1)], tolerance=0.05, duration_s=0.5)
        rec = hosts.record()
    if rec["capabilities"]["netem"]:
        assert rec["shaping"]["delay"].startswith("netem")
    else:
        assert rec["shaping"]["delay"].startswith("userspace TUN delay line")
    assert abs(r.rtt_ms / 2 - 10.0) <= 2.0, r


UDP_RECEIVE = """
import json, socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 9000))
print("listening", flush=True)
s.settimeout(2.0)
delays = []
try:
    while True:
        data = s.recv(256)
        delays.append((time.monotonic() - float(data.decode())) * 1e3)
except socket.timeout:
    pass
print(json.dumps(delays))
"""

UDP_SEND = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(int(sys.argv[2])):
    s.sendto(repr(time.monotonic()).encode(), (sys.argv[1], 9000))
    time.sleep(0.004)
"""


@pytest.mark.timeout(60)
def test_delay_line_loss_and_jitter(tmp_path):
    # one-way 10 ms +- 4 ms, 20% loss; datagrams carry their send time (CLOCK_MONOTONIC
    # is shared by all network namespaces)
    scenario = with_link(load_scenario("100mbps"), delay_ms=10.0, jitter_ms=4.0,
                         loss_pct=20.0)
    n = 400
    with NetnsLauncher(scenario, 2, state_dir=tmp_path) as hosts:
        rx = hosts.start_helper(1, ["python", "-c", UDP_RECEIVE, hosts.addr(1)])
        assert rx.stdout.readline().strip() == b"listening"
        tx = hosts.start_helper(0, ["python", "-c", UDP_SEND, hosts.addr(1), str(n)])
        assert tx.wait(timeout=30) == 0
        delays = json.loads(rx.stdout.readline())
        rec = hosts.record()
    expected = "netem" if rec["capabilities"]["netem"] else "userspace TUN delay line"
    assert rec["shaping"]["loss"].startswith(expected)
    assert rec["shaping"]["jitter"].startswith(expected)
    assert 0.72 * n <= len(delays) <= 0.88 * n, len(delays)
    # never earlier than delay - jitter; the receiver's clock reading may only add to it
    assert min(delays) >= 6.0 - 0.5, min(delays)
    assert abs(statistics.median(delays) - 10.0) <= 1.5, statistics.median(delays)
    assert 1.5 < statistics.pstdev(delays) < 4.0  # uniform +-4 ms: 2.3 ms


@pytest.mark.timeout(90)
@pytest.mark.parametrize("delay_ms", [0.0, 1.0], ids=["switch-port-tbf", "tun-ifb-tbf"])
def test_downlink_cap_and_asymmetric_link(tmp_path, delay_ms):
    # host 1 receives at most 20 Mbit/s (its downlink); 1 -> 0 is an asymmetric 30 Mbit/s
    raw = {"description": "downlink cap", "layout": {"stages": 2},
           "link": {"rate_mbit": 100, "delay_ms": delay_ms},
           "links": [{"src": 1, "dst": 0, "rate_mbit": 30}],
           "hosts": [{"host": 1, "downlink_mbit": 20}]}
    scenario = parse_scenario(raw, "downlink")
    with NetnsLauncher(scenario, 2, state_dir=tmp_path) as hosts:
        results = hosts.probe(links=[(0, 1), (1, 0)], tolerance=0.05, duration_s=0.7)
        rec = hosts.record()
        devices = subprocess.run(["ip", "-n", hosts.netns(1), "-o", "link"],
                                 capture_output=True, text=True).stdout
    assert [r.rate_mbit_configured for r in results] == [20, 30]
    assert (hosts.names.ifb(1) in devices) == (delay_ms > 0), devices
    assert rec["data_plane"] == ("TUN via delay line" if delay_ms else "veth + bridge")


GLOO_EXCHANGE = """
import datetime, json, sys, time
import torch, torch.distributed as dist
rank, master, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method=f"tcp://{master}:29531", rank=rank, world_size=2,
                        timeout=datetime.timedelta(seconds=60))
x = torch.arange(262144, dtype=torch.float32)  # 1 MiB
dist.barrier()
t0 = time.perf_counter()
if rank == 0:
    dist.send(x, 1)
    y = torch.empty_like(x)
    dist.recv(y, 1)
    ok = torch.equal(y, 2 * x)
else:
    y = torch.empty_like(x)
    dist.recv(y, 0)
    dist.send(2 * y, 0)
    ok = torch.equal(y, x)
json.dump({"ok": bool(ok), "elapsed_s": time.perf_counter() - t0}, open(out, "w"))
dist.destroy_process_group()
"""


@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(150)
def test_gloo_exchange_across_shaped_namespaces(tmp_path):
    # 10 Mbit/s and 5 ms each way: 1 MiB there and back takes >= 2 * 0.84 s
    scenario = with_link(load_scenario("10mbps"), delay_ms=5.0)
    script = tmp_path / "exchange.py"
    script.write_text(GLOO_EXCHANGE)
    with NetnsLauncher(scenario, 2, state_dir=tmp_path) as hosts:
        procs = [hosts.spawn(i, [sys.executable, str(script), str(i), hosts.addr(0),
                                 str(tmp_path / f"rank{i}.json")],
                             env=dict(os.environ, PYTHONPATH=str(REPO)),
                             log_path=tmp_path / f"rank{i}.log")
                 for i in range(2)]
        codes = [p.wait(timeout=120) for p in procs]
    logs = "\n".join((tmp_path / f"rank{i}.log").read_text() for i in range(2))
    assert codes == [0, 0], logs
    r0, r1 = (json.loads((tmp_path / f"rank{i}.json").read_text()) for i in range(2))
    assert r0["ok"] and r1["ok"]
    assert 1.5 <= r0["elapsed_s"] <= 10.0, r0  # the gloo traffic went through the shaper


@pytest.mark.timeout(60)
def test_dead_delay_line_is_reported(tmp_path):
    scenario = with_link(load_scenario("10mbps"), delay_ms=1.0)
    with NetnsLauncher(scenario, 2, state_dir=tmp_path) as hosts:
        if hosts.record()["capabilities"]["netem"]:
            return  # netem host: no delay line to lose
        os.killpg(hosts.delay_line.pid, signal.SIGKILL)
        hosts.delay_line.wait(timeout=10)
        with pytest.raises(RuntimeError, match="delay line exited"):
            hosts.probe(links=[(0, 1)])
    assert leftovers(hosts.names.prefix) == []
