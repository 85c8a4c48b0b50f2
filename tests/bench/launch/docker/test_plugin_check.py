"""The Docker launcher and plug-ins (docs/plugins.md): a file plug-in outside the
checkout is mounted read-only at its own path, and bring-up refuses an image whose
interpreter lacks a plug-in or loads another copy, naming it (checks.check_plugins). The
container here runs its command on this host (the same command line the launcher sends
through `docker exec`). With a daemon and the worker image (the `docker_daemon` mark): a
real cell of a plug-in file outside the checkout in two containers, and an image without
an installed plug-in refused at bring-up, naming it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from plugin_helpers import identify_file, write_plain_mode

from aqsgd.compress.plugins import Plugin
from bench import REPO_ROOT
from bench.launch.choice import launcher_factory
from bench.launch.docker import DockerLauncher
from bench.launch.docker.checks import check_plugins
from bench.launch.docker.spec import WORKER_USER
from bench.net.scenario import load_scenario

pytestmark = pytest.mark.docker

EXAMPLE = REPO_ROOT / "examples" / "plugins" / "randproj.py"


class HereContainer:
    """A container whose `exec_run` runs the command on this host (no daemon)."""

    def __init__(self):
        self.calls = []

    def exec_run(self, argv, user, demux):
        self.calls.append((argv, user))
        done = subprocess.run(argv, capture_output=True, timeout=120,
                              env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"})
        return done.returncode, (done.stdout, done.stderr)


@pytest.fixture
def plugin(tmp_path):
    return identify_file(write_plain_mode(tmp_path, "dockertest_mode", rank=7.8))


@pytest.mark.slow
def test_the_same_copy_passes_and_a_missing_or_other_one_is_named(plugin, tmp_path):
    box = HereContainer()
    check_plugins(box, sys.executable, [plugin], "img")
    assert box.calls == [([sys.executable, "-P", "-m", "aqsgd.compress.plugins", plugin.source],
                          WORKER_USER)]
    other = Plugin(plugin.module, plugin.source, "", "0" * 16)
    gone = Plugin("gone_mode", str(tmp_path / "gone_mode.py"), "", "1" * 16)
    with pytest.raises(RuntimeError) as err:
        check_plugins(box, sys.executable, [other, gone], "img")
    text = str(err.value)
    assert f"image img with {sys.executable} cannot run these cells' plug-ins" in text
    assert (f"plug-in dockertest_mode: another copy of {plugin.source} (sha256 "
            f"{plugin.sha256}, here {'0' * 16})") in text
    assert f"plug-in gone_mode: plug-in file {gone.source} does not exist on this host" in text


class Broken:
    """A container whose interpreter is not there."""

    def exec_run(self, argv, user, demux):
        return 127, (b"", b"exec: /nope/python3: not found")


def test_an_interpreter_that_cannot_look_is_named_with_its_output(plugin):
    with pytest.raises(RuntimeError, match=r"image img: /nope/python3 could not look for "
                       r"the plug-ins dockertest_mode \(exit 127\): exec: /nope/python3"):
        check_plugins(Broken(), "/nope/python3", [plugin], "img")
    check_plugins(Broken(), "/nope/python3", [], "img")  # no plug-ins: nothing asked


def test_a_file_plugin_outside_the_checkout_is_mounted_read_only(plugin, tmp_path):
    inside = identify_file(EXAMPLE)
    hosts = launcher_factory("docker").bind((plugin, inside))(
        load_scenario("100mbps"), 2, run_id="t1", state_dir=tmp_path / ".launcher",
        python="image")
    assert type(hosts).plugins == (plugin, inside)
    binds = hosts._mounts()
    assert binds[plugin.source] == {"bind": plugin.source, "mode": "ro"}
    assert str(EXAMPLE) not in binds  # inside the checkout, mounted with it
    assert DockerLauncher(load_scenario("100mbps"), 2, run_id="t2", python="image",
                          state_dir=tmp_path / ".l2").plugins == ()


# ------------------------------------------------------- with a daemon and the image
@pytest.mark.docker_daemon
@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(600)
def test_a_plugin_cell_runs_in_containers_and_an_image_without_one_is_refused(tmp_path):
    from aqsgd.compress.registry import load_plugins, unload_plugins
    from bench.harness.run import run_sweep
    from bench.harness.sweep import SweepSpec, Workload, parse_mode

    outside = tmp_path / "plug" / "randproj_outside.py"  # outside the checkout: mounted
    outside.parent.mkdir()
    shutil.copy(EXAMPLE, outside)
    (plugin,) = load_plugins([str(outside)])
    try:
        spec = SweepSpec("plug", ("100mbps",), (parse_mode("randproj:4/8"),),
                         Workload(steps=2, train_samples=64, timeout_s=240,
                                  dist_timeout_s=60, init_from=None))
        outcomes = run_sweep(spec, tmp_path / "results", launcher="docker", quiet=True,
                             echo=lambda s: None)
    finally:
        unload_plugins([plugin])
    meta = json.loads((tmp_path / "results" / "100mbps__randproj-fw4-bw8__docker" /
                       "meta.json").read_text())
    assert [o.status for o in outcomes] == ["ok"], meta.get("failure")
    assert meta["run_config"]["plugins"][0]["source"] == str(outside)
    gone = Plugin("not_installed_mode", "not_installed_mode", "", "0" * 16)
    hosts = DockerLauncher(load_scenario("100mbps"), 2, state_dir=tmp_path / ".launcher",
                           plugins=(gone,))
    with pytest.raises(RuntimeError, match=r"cannot run these cells' plug-ins[^$]*plug-in "
                       r"not_installed_mode: plug-in module 'not_installed_mode' cannot be "
                       r"imported"):
        with hosts:
            pass
    assert not (tmp_path / ".launcher").exists() or not list(
        (tmp_path / ".launcher").glob("*.json"))  # its containers removed with the state
