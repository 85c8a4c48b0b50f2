"""The SSH launcher's hostfile (both forms, errors naming file, field and value), its
place in the launcher choice, and what it plans without a host: no root, no SSH."""

from __future__ import annotations

import pytest

from bench.__main__ import build_parser, launcher_options
from bench.launch.choice import LAUNCHERS, TEARDOWNS, choose_launcher, state_teardown
from bench.launch.hostfile import HostfileError, load_hostfile
from bench.launch.ssh.launcher import SshLauncher, real_links
from bench.net.scenario import load_scenario


def _write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_pdsh_form_and_the_yaml_form_mean_the_same(tmp_path):
    text = _write(tmp_path, "hosts", "# two hosts\n"
                  "gpu-a slots=2 interface=ens5 user=root identity=~/.ssh/k\n"
                  "\n10.0.0.2 port=2222  # the second\n")
    yaml = _write(tmp_path, "hosts.yaml", "hosts:\n"
                  "  - {host: gpu-a, slots: 2, interface: ens5, user: root, identity: ~/.ssh/k}\n"
                  "  - {host: 10.0.0.2, port: 2222}\n")
    a, b = load_hostfile(text), load_hostfile(yaml)
    assert a == b
    first, second = a.hosts
    assert (first.host, first.slots, first.interface, first.user) == ("gpu-a", 2, "ens5", "root")
    assert first.identity.endswith("/.ssh/k") and not first.identity.startswith("~")
    assert (second.port, second.slots, second.interface, second.user) == (2222, 1, "eth0", None)
    assert second.name == "10.0.0.2:2222" and first.name == "root@gpu-a"


@pytest.mark.parametrize(("name", "text", "message"), [
    ("h", "a port=22x\n", "field 'hosts[0].port': expected an integer, got '22x'"),
    ("h", "a\nb slots=0\n", "field 'hosts[1].slots': expected an integer in [1, 64], got 0"),
    ("h", "a slots\n", "line 1: expected key=value after the host name, got 'slots'"),
    ("h", "a slots=1 slots=2\n", "line 1: key 'slots' given twice"),
    ("h", "a colour=red\n", "field 'hosts[0].colour': unknown hosts field 'colour'"),
    ("h", "a\na\n", "field 'hosts[1].host': expected a host not listed before"),
    ("h", "# nothing\n", "field 'hosts': expected at least one host"),
    ("h", "a python=venv/bin/python\n", "field 'hosts[0].python': expected an absolute path"),
    ("h.yaml", "hosts:\n  - {host: a, slotz: 1}\n", "field 'hosts[0].slotz': unknown"),
    ("h.yaml", "hosts:\n  - {host: a, interface: a/b}\n", "field 'hosts[0].interface'"),
])
def test_a_bad_hostfile_names_file_field_and_value(tmp_path, name, text, message):
    path = _write(tmp_path, name, text)
    with pytest.raises(HostfileError) as err:
        load_hostfile(path)
    assert str(err.value).startswith(f"{path}: ")
    assert message in str(err.value)


def test_a_missing_hostfile_is_named(tmp_path):
    with pytest.raises(HostfileError, match="cannot read hostfile .*nope"):
        load_hostfile(tmp_path / "nope")


def test_choice_binds_the_hostfile_and_shaping_to_the_factory(tmp_path):
    path = _write(tmp_path, "hosts", "a\n")
    assert "ssh" in LAUNCHERS and "ssh" in TEARDOWNS
    assert state_teardown("ssh").__module__ == "bench.launch.ssh.state"
    shaped = choose_launcher("ssh", hostfile=path)
    assert shaped.name == "ssh" and shaped.shaped and shaped.factory.hostfile == path
    real = choose_launcher("ssh", hostfile=path, shaping=False)
    assert not real.shaped and "NOT shaped" in real.reason
    assert issubclass(real.factory, SshLauncher)
    # built with the protocol's arguments only, as the harness does
    hosts = real.factory(load_scenario("100mbps"), 2, run_id="r", state_dir=tmp_path / "s")
    assert hosts.hostfile_path == path and hosts.shaping is False and hosts.n_hosts == 2
    assert hosts.results_dir == tmp_path.resolve()


def test_choice_refuses_ssh_without_a_hostfile_and_options_elsewhere(tmp_path):
    with pytest.raises(ValueError, match="needs --hostfile FILE"):
        choose_launcher("ssh")
    with pytest.raises(ValueError, match="hostfile .*nope not found"):
        choose_launcher("ssh", hostfile=tmp_path / "nope")
    with pytest.raises(ValueError, match="launcher local takes no options, got hostfile"):
        choose_launcher("local", hostfile=tmp_path)


def test_the_command_line_passes_only_the_options_given(tmp_path):
    parser = build_parser()
    plain = parser.parse_args(["run", "--scenario", "100mbps"])
    assert launcher_options(plain) == {}
    ssh = parser.parse_args(["run", "--scenario", "100mbps", "--launcher", "ssh",
                             "--hostfile", str(tmp_path / "h"), "--no-shaping"])
    assert launcher_options(ssh) == {"hostfile": tmp_path / "h", "shaping": False}


def test_real_links_promise_nothing():
    wan = load_scenario("wan")
    real = real_links(wan)
    assert all(real.payload_rate_mbit(a, b) is None for a in range(4) for b in range(4)
               if a != b)
    assert real.link.delay_ms == 0 and real.overrides == () and real.host_caps == ()
    assert real.layout == wan.layout


def test_no_shaping_refuses_a_scenario_whose_links_have_schedules(tmp_path):
    from bench.launch.ssh.launcher import SshLauncher
    from bench.net.scenario import load_scenario
    from bench.net.tc import ShapingError

    scenario = load_scenario("dynamic-smoke")
    hosts = SshLauncher(scenario, hostfile=tmp_path / "hosts", shaping=False)
    assert scenario.scheduled_links(hosts.n_hosts)
    with pytest.raises(ShapingError, match="schedules.*--no-shaping"):
        hosts._check_schedule_fits()
