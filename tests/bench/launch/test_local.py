"""The local launcher (bench.launch.local): unshaped loopback, the environment, the record."""

import dataclasses
import json
import sys

import pytest

from bench.launch.local import LocalLauncher
from bench.net.probe import ProbeRecord
from bench.net.scenario import load_scenario


@pytest.mark.timeout(60)
def test_local_launcher(tmp_path):
    out = tmp_path / "env.json"
    code = ("import json, os, sys; json.dump({k: os.environ.get(k) for k in "
            "('GLOO_SOCKET_IFNAME', 'EXTRA')}, open(sys.argv[1], 'w'))")
    with LocalLauncher(load_scenario("100mbps"), 2, warn=None) as hosts:
        assert hosts.addr(1) == "127.0.0.1"
        p = hosts.spawn(1, [sys.executable, "-c", code, str(out)], {"EXTRA": "x"},
                        tmp_path / "w1.log")
        assert p.wait(timeout=30) == 0
        sleeper = hosts.spawn(0, ["sleep", "60"])
        probe = hosts.probe()
        rec = hosts.record()
    assert sleeper.poll() is not None  # killed on exit
    assert json.loads(out.read_text()) == {"GLOO_SOCKET_IFNAME": "lo", "EXTRA": "x"}
    assert rec["shaped"] is False and "UNSHAPED" in rec["warning"]
    assert probe[0].rate_mbit_achieved > 100
    # the same record as every launcher's, in the run record too
    assert probe[0].rate_mbit_configured is None and probe[0].host_limited is False
    assert rec["probe"] == [probe[0].to_dict()]
    assert list(rec["probe"][0]) == [f.name for f in dataclasses.fields(ProbeRecord)]
