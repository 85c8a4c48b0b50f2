"""What the record and the placement say of an SSH run, without a host: the placement
counts the hosts the hostfile gives (2 machines: `2 hosts`, no idle hosts 2 and 3 of a
4-host scenario), a cell wider than the hostfile is refused before anything runs, and a
launcher that shapes records `shaped: false` on an unshaped scenario's hosts, as the
cell's `shaped` says; `--check-hosts` goes with `--dry-run` only."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.__main__ import main
from bench.harness.preflight import check_sweep, on_hosts
from bench.harness.sweep import SweepSpec, Workload, parse_mode
from bench.launch.choice import choose_launcher
from bench.launch.hosts import Hosts
from bench.launch.ssh.launcher import SshLauncher
from bench.net.scenario import load_scenario

SMALL = Workload(steps=2, train_samples=64, init_from=None, stages=2)


def _hostfile(tmp_path: Path, n: int) -> Path:
    path = tmp_path / "hosts"
    path.write_text("".join(f"10.9.0.{i + 1} interface=eth0\n" for i in range(n)))
    return path


def test_the_placement_counts_the_hosts_the_hostfile_gives(tmp_path):
    choice = choose_launcher("ssh", hostfile=_hostfile(tmp_path, 2))
    assert choice.factory.host_count(load_scenario("100mbps")) == 2
    assert choice.factory.host_count(load_scenario("1gbps")) == 2
    spec = SweepSpec("s", ("100mbps",), (parse_mode("fp32"),), SMALL,
                     reference_scenario="loopback")
    plan = check_sweep(spec)
    assert plan.placements["100mbps__fp32"].n_hosts == 4  # the scenario's own hosts
    placed, same, lines = on_hosts(plan, choice, tmp_path / "out", contact=False)
    assert same is choice and lines == []  # nobody contacted
    for name in ("100mbps__fp32", "loopback__fp32"):
        p = placed.placements[name]
        assert (p.n_hosts, p.idle_hosts) == (2, ())
        first = p.table().splitlines()[0]
        assert "(2 hosts, " in first and "idle hosts" not in p.table()
    # the netns launcher makes every host of the scenario
    netns = choose_launcher("local")
    assert on_hosts(plan, netns, tmp_path, contact=False)[0].placements[
        "100mbps__fp32"].idle_hosts == (2, 3)


def test_a_cell_wider_than_the_hostfile_is_refused_before_anything_runs(tmp_path):
    hostfile = _hostfile(tmp_path, 2)
    choice = choose_launcher("ssh", hostfile=hostfile)
    wide = Workload(steps=2, train_samples=64, init_from=None, stages=4, preset="tiny-4")
    plan = check_sweep(SweepSpec("s", ("100mbps",), (parse_mode("fp32"),), wide))
    with pytest.raises(ValueError, match=rf"cell 100mbps__fp32 runs 4 ranks; launcher ssh "
                                         rf"gives 2 host\(s\) \(hosts of {hostfile} over SSH"):
        on_hosts(plan, choice, tmp_path, contact=False)


class Unshaped(Hosts):
    """A launcher that shapes, with nothing more than its record."""

    name, shaped = "fake", True

    def _record(self):
        return {}


def test_a_shaping_launcher_on_an_unshaped_scenario_records_shaped_false():
    assert Unshaped(load_scenario("loopback"), 2).record()["shaped"] is False
    assert Unshaped(load_scenario("100mbps"), 2).record()["shaped"] is True
    assert SshLauncher.checked is None  # a bound factory is checked only through checked_for


def test_check_hosts_goes_with_dry_run(tmp_path, capsys):
    code = main(["run", "--scenario", "100mbps", "--modes", "fp32", "--launcher", "ssh",
                 "--hostfile", str(_hostfile(tmp_path, 2)), "--check-hosts",
                 "--out", str(tmp_path / "out")])
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        "error: --check-hosts goes with --dry-run (a run checks its hosts first)")
    assert not (tmp_path / "out").exists()
