"""Plug-ins on the SSH launcher (docs/plugins.md), against sshd servers in namespaces
(conftest.py): bring-up asks every host for its copy of each plug-in the cells run and
refuses, before anything changes, a host that lacks one or has another copy, naming the
plug-in; a plug-in cell over SSH runs with the copy every host has. Each host's results
folder is a tmpfs of its own, so a plug-in file there is on this machine only."""

from __future__ import annotations

import json

import pytest
from plugin_helpers import identify_file, write_plain_mode

from aqsgd.compress.registry import load_plugins, unload_plugins
from bench import REPO_ROOT
from bench.harness.run import run_sweep
from bench.harness.sweep import SweepSpec, Workload, parse_mode
from bench.launch.hostfile import load_hostfile
from bench.launch.ssh.checks import HostCheckError
from bench.launch.ssh.launcher import SshLauncher
from bench.launch.ssh.remote import Remote
from bench.net.scenario import load_scenario

pytestmark = pytest.mark.netns

EXAMPLE = REPO_ROOT / "examples" / "plugins" / "randproj.py"


@pytest.mark.slow
def test_a_host_without_the_plugin_or_with_another_copy_is_refused_naming_it(sshd_hosts):
    folder = sshd_hosts.results / "plug"  # here only (module doc)
    folder.mkdir(parents=True)
    path = write_plain_mode(folder, "sshtest_mode", rank=7.9)
    plugin = identify_file(path)
    other = sshd_hosts.workdir / "other_copy.py"
    other.write_text("# v2\n" + path.read_text())
    with Remote(load_hostfile(sshd_hosts.hostfile).hosts) as remote:  # host 1: another copy
        remote.run(1, ["mkdir", "-p", str(folder)])
        remote.put(1, other, str(path))
    hosts = SshLauncher(load_scenario("100mbps"), 2, run_id="test",
                        hostfile=sshd_hosts.hostfile, plugins=(plugin,),
                        state_dir=sshd_hosts.results / ".launcher")
    with pytest.raises(HostCheckError) as err:
        hosts.__enter__()
    lines = {line.split(": ", 1)[0].strip(): line for line in str(err.value).splitlines()[1:]}
    assert (f"plug-in sshtest_mode: plug-in file {path} does not exist on this host"
            in lines[f"root@{sshd_hosts.addr(0)}"])
    assert (f"plug-in sshtest_mode: another copy of {path} (sha256 "
            in lines[f"root@{sshd_hosts.addr(1)}"])
    assert f"here {plugin.sha256}); give every host" in lines[f"root@{sshd_hosts.addr(1)}"]
    for i in range(sshd_hosts.n):  # nothing changed on any host
        assert sshd_hosts.qdiscs(i) == []
        assert sshd_hosts.run(i, ["test", "-e", hosts.record_dir(i)],
                              check=False).returncode == 1


@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(900)
def test_a_plugin_cell_runs_over_ssh_with_the_copy_every_host_has(sshd_hosts):
    (plugin,) = load_plugins([str(EXAMPLE)])  # in the checkout: every host has it
    try:
        spec = SweepSpec("smoke", ("100mbps",), (parse_mode("randproj:4/8"),),
                         Workload(steps=2, train_samples=64, timeout_s=240, dist_timeout_s=60,
                                  init_from=None))
        outcomes = run_sweep(spec, sshd_hosts.results, launcher="ssh", quiet=True,
                             echo=lambda s: None,
                             launcher_options={"hostfile": sshd_hosts.hostfile})
    finally:
        unload_plugins([plugin])
    cell = sshd_hosts.results / "100mbps__randproj-fw4-bw8__ssh"
    meta = json.loads((cell / "meta.json").read_text())
    assert [o.status for o in outcomes] == ["ok"], meta.get("failure")
    assert meta["spec"]["plugins"] == [{"module": "randproj", "version": plugin.version,
                                        "sha256": plugin.sha256}]
    assert meta["run_config"]["plugins"][0]["source"] == str(EXAMPLE)
