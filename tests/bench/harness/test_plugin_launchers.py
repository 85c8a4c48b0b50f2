"""Which plug-ins a launcher is told to look for (docs/plugins.md, "Every worker loads the
same plug-ins"): a sweep's plan lists the plug-ins its cells run, once each, and none for
the built-in modes; choose_launcher binds them to the launchers whose workers run
elsewhere (ssh, docker), whose bring-up then checks every host; netns and local run the
workers here and take nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness_helpers import SMOKE

from aqsgd.compress.registry import PLUGINS, load_plugins, unload_plugins
from bench.harness.modes import parse_mode
from bench.harness.preflight import check_sweep
from bench.harness.sweep import SweepSpec
from bench.launch.choice import choose_launcher, launcher_factory

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "plugins" / "randproj.py"


@pytest.fixture
def randproj():
    (plugin,) = load_plugins([str(EXAMPLE)])
    yield plugin
    unload_plugins(list(PLUGINS.values()))


def test_the_plan_lists_each_plugin_its_cells_run_once(randproj):
    modes = ("fp32", "randproj:4/8", "randproj:2/4", "aqsgd:2/4")
    plan = check_sweep(SweepSpec("plug", ("100mbps",), tuple(map(parse_mode, modes)), SMOKE))
    assert plan.plugins == (randproj,)
    plain = check_sweep(SweepSpec("plain", ("100mbps",), (parse_mode("fp32"),), SMOKE))
    assert plain.plugins == ()


def test_the_launchers_whose_workers_run_elsewhere_get_them_bound(randproj, tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("10.0.0.1 slots=1 interface=eth0\n10.0.0.2 slots=1 interface=eth0\n")
    ssh = choose_launcher("ssh", (randproj,), hostfile=hostfile)
    assert ssh.factory.plugins == (randproj,)
    assert ssh.options == {"hostfile": str(hostfile.resolve()), "shaping": True}  # not identity
    assert choose_launcher("ssh", hostfile=hostfile).factory.plugins == ()
    assert launcher_factory("docker").bind((randproj,)).plugins == (randproj,)
    assert choose_launcher("local", (randproj,)).name == "local"  # the same machine
