"""Stragglers, for real on network namespaces: a straggler host's processes run in the
run's CPU cgroup from their start; over the straggler's interval a CPU-bound process
there gets at most its quota (period x the host's cores / factor), measured by its own
CPU clock; the record says when the cap went on and off; the cgroup is removed at
teardown, and by the state file's teardown (`make net-cleanup`) for a killed run.

Needs root, `ip netns` and a CPU cgroup controller (the `netns` mark; CI runs as root).
"""

import json
import os
import subprocess
import sys
import time

import pytest

from bench.launch.netns import NetnsLauncher
from bench.launch.netns.cgroups import CpuCgroups
from bench.launch.netns.state import teardown_state
from bench.net.executor import Executor
from bench.net.scenario import parse_scenario

pytestmark = [pytest.mark.netns, pytest.mark.slow]

# CPU seconds per 0.25 s window, against the wall clock, for 6 s
BUSY = """import json, time
out, t_end = [], time.time() + 6.0
while time.time() < t_end:
    a, c = time.time(), time.process_time()
    while time.time() - a < 0.25:
        pass
    out.append((a, time.time(), time.process_time() - c))
print(json.dumps(out))
"""


def _scenario(factor: float = 20.0) -> object:
    return parse_scenario({"description": "host 1 slowed from 2 s to 4.5 s",
                           "layout": {"stages": 2}, "link": {"rate_mbit": 100},
                           "stragglers": [{"host": 1, "factor": factor, "start_s": 2,
                                           "duration_s": 2.5}]}, "straggler")


@pytest.mark.timeout(120)
def test_a_straggler_hosts_process_gets_its_quota_over_the_interval(tmp_path):
    # a cap far below what the process gets on a machine shared with other work
    factor = 20.0
    with NetnsLauncher(_scenario(factor), 2, state_dir=tmp_path / "state") as hosts:
        [path] = [hosts._cgroups[1]]
        assert json.loads(hosts.state_path.read_text())["cgroups"] == [str(path)]
        hosts.start_schedule()
        busy = hosts.spawn(1, [sys.executable, "-c", BUSY], None, tmp_path / "busy.log")
        other = hosts.spawn(0, ["sleep", "1"], None, tmp_path / "sleep.log")
        # the spawned shell writes its own pid into the cgroup before it execs the
        # command: give it the moment it takes to start on a loaded machine
        deadline = time.monotonic() + 10.0
        while str(busy.pid) not in (path / "cgroup.procs").read_text().split() and \
                time.monotonic() < deadline and busy.poll() is None:
            time.sleep(0.05)
        assert str(busy.pid) in (path / "cgroup.procs").read_text().split()
        assert other.poll() is None  # host 0's process, alive, is not in host 1's cgroup
        assert str(other.pid) not in (path / "cgroup.procs").read_text().split()
        busy.wait(30)
        run = hosts.stop_schedule()
        stat = CpuCgroups.stat(path)
        block = hosts.record()["schedule"]["stragglers"]
    assert not path.exists()  # removed at teardown
    start = run["started_unix"]
    cpu = [(a - start, z - start, used / (z - a)) for a, z, used in
           json.loads((tmp_path / "busy.log").read_text().strip().splitlines()[-1])]
    capped = [share for a, z, share in cpu if 2.3 <= a and z <= 4.5]
    cores = len(os.sched_getaffinity(0)) / 2  # the host's share of the machine
    print(f"cores per host {cores:g}; CPU share per window: "
          f"{[(round(a, 2), round(s, 2)) for a, _, s in cpu]}; cpu.stat {stat}")
    assert len(capped) >= 6
    # the kernel holds the cgroup to its quota: cores / factor CPU-seconds per second
    assert max(capped) <= cores / factor * 1.25 + 0.02
    assert stat["nr_throttled"] > 0
    free = [share for a, z, share in cpu if z <= 2.0 or a >= 4.8]
    assert sum(free) / len(free) > 2 * sum(capped) / len(capped)
    on, off = block["applied"]
    assert (on["factor"], off["factor"]) == (factor, None)
    assert 0 <= on["applied_s"] - 2 < 0.3 and 0 <= off["applied_s"] - 4.5 < 0.3
    assert f"cpu.cfs_quota_us = {round(100_000 * cores / factor)}" in on["commands"][0] \
        or "cpu.max" in on["commands"][0]


@pytest.mark.timeout(120)
def test_a_killed_runs_cgroup_goes_with_its_state_file(tmp_path):
    with NetnsLauncher(_scenario(), 2, state_dir=tmp_path / "state") as hosts:
        path = hosts._cgroups[1]
        hosts.spawn(1, ["sleep", "60"], None, tmp_path / "sleep.log")
        state = json.loads(hosts.state_path.read_text())
        # what `python -m bench.launch cleanup` does for a killed run's file
        removed = teardown_state(state, hosts.state_path, Executor())
        assert f"cgroup {path}" in removed and not path.exists()


@pytest.mark.timeout(60)
def test_removing_a_cgroup_kills_a_process_that_joined_it_but_no_namespace(tmp_path):
    # a worker killed between joining its cgroup and `ip netns exec`: no namespace
    # lists it, so the cgroup's own list is what finds it
    groups = CpuCgroups.find()
    path = groups.create(f"aqsgd-test{os.getpid()}-h9")
    proc = subprocess.Popen(groups.enter_argv(path, ["sleep", "60"]))
    try:
        deadline = time.monotonic() + 5
        while not (path / "cgroup.procs").read_text().split():
            assert time.monotonic() < deadline, "the process never joined its cgroup"
            time.sleep(0.05)
        assert CpuCgroups.remove(path) and not path.exists()
        assert proc.wait(timeout=5) == -9
    finally:
        proc.kill()
        CpuCgroups.remove(path)
