"""The hosts of an SSH sweep checked once, before any cell, against sshd servers in
namespaces (conftest.py): each of three host mistakes (a host that does not answer, a
wrong interface, a wrong port) stops `bench run` of a two-scenario sweep with exit 2 and
one list of the hosts and reasons, the hosts checked one time, nothing written and
nothing on any host; `--dry-run --check-hosts` runs the same checks and changes nothing;
a host sees the results folder as this machine's files or not (the marker file)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.__main__ import main
from bench.launch.hostfile import load_hostfile
from bench.launch.ssh import checks
from bench.launch.ssh.hostside import HOST_RECORD_ROOT
from bench.launch.ssh.launcher import SshLauncher
from bench.launch.ssh.remote import Remote
from bench.net.scenario import load_scenario

pytestmark = pytest.mark.timeout(300)
# two scenarios (100mbps and the loopback reference): two bring-ups, one check
RUN = ["run", "--scenario", "100mbps", "--modes", "fp32", "--stages", "2", "--steps", "2",
       "--train-samples", "64", "--init-from", "none", "--reference", "loopback",
       "--launcher", "ssh", "--quiet"]
HEAD = ("error: ssh launcher: hosts that cannot run this sweep (nothing was changed on any "
        "host):")


def _with_mistake(sshd_hosts, tmp_path: Path, mistake: str) -> tuple[Path, str]:
    """A hostfile whose host 1 has `mistake`, and how errors name that host."""
    lines = sshd_hosts.hostfile.read_text().splitlines()  # line 0 is a comment
    addr, dev = sshd_hosts.addr(1), sshd_hosts.dev(1)
    if mistake == "no answer":  # an address on the hosts' network that nobody has
        addr = f"198.18.{sshd_hosts.subnet}.99"
        lines[2] = lines[2].replace(sshd_hosts.addr(1), addr)
    elif mistake == "wrong interface":
        lines[2] = lines[2].replace(f"interface={dev}", "interface=nodev0")
    else:  # its sshd listens on 22 only
        lines[2] += " port=2222"
    path = tmp_path / "hosts-bad"
    path.write_text("\n".join(lines) + "\n")
    return path, f"root@{addr}" + (":2222" if mistake == "wrong port" else "")


def _nothing_on_the_hosts(sshd_hosts) -> None:
    for i in range(sshd_hosts.n):
        assert sshd_hosts.qdiscs(i) == []
        assert sshd_hosts.run(i, ["ls", str(HOST_RECORD_ROOT)], check=False).stdout == ""


@pytest.mark.parametrize(("mistake", "reason"), [
    ("no answer", "does not answer over SSH (host "),
    ("wrong interface", "has no interface nodev0"),
    ("wrong port", "does not answer over SSH (host "),
])
def test_a_host_mistake_stops_the_sweep_before_any_cell_with_exit_2(
        sshd_hosts, tmp_path, capsys, count_checks, mistake, reason):
    hostfile, name = _with_mistake(sshd_hosts, tmp_path, mistake)
    out = tmp_path / "out"
    code = main([*RUN, "--hostfile", str(hostfile), "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    print(f"\n{mistake}: exit {code}\n" + "\n".join(err))
    assert code == 2
    assert err[0] == HEAD and len(err) == 2, err
    assert err[1].startswith(f"  {name}: {reason}"), err[1]
    assert f"root@{sshd_hosts.addr(0)}" not in "\n".join(err)  # host 0 is fine
    assert count_checks == [2]  # each host once, for both scenarios
    assert not out.exists()
    _nothing_on_the_hosts(sshd_hosts)


def test_dry_run_check_hosts_runs_the_same_checks_and_changes_nothing(
        sshd_hosts, tmp_path, capsys, count_checks):
    out = sshd_hosts.results / "dry"  # where the hosts have a folder of their own
    dry = [*RUN, "--out", str(out), "--dry-run"]
    assert main([*dry, "--hostfile", str(sshd_hosts.hostfile)]) == 0
    assert count_checks == []  # a dry run alone contacts nobody
    assert "checked" not in capsys.readouterr().out
    assert main([*dry, "--check-hosts", "--hostfile", str(sshd_hosts.hostfile)]) == 0
    printed = capsys.readouterr().out
    for i in range(sshd_hosts.n):
        assert (f"root@{sshd_hosts.addr(i)}: checked, {sshd_hosts.addr(i)} on "
                f"{sshd_hosts.dev(i)}, does not share the results folder {out}") in printed
    assert "(2 hosts, " in printed and "idle hosts" not in printed  # the hostfile's two
    bad, name = _with_mistake(sshd_hosts, tmp_path, "wrong interface")
    assert main([*dry, "--check-hosts", "--hostfile", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [HEAD, f"  {name}: has no interface nodev0"]
    assert count_checks == [2, 2]
    assert not out.exists()
    _nothing_on_the_hosts(sshd_hosts)


def test_private_results_folders_are_told_from_this_machines(sshd_hosts, tmp_path):
    results = sshd_hosts.results / "sweep"  # not made yet: its parent is what is compared
    with Remote(load_hostfile(sshd_hosts.hostfile).hosts) as remote:
        assert checks.shares_folder(remote, results) == [False, False]
        assert checks.shares_folder(remote, tmp_path) == [True, True]  # /tmp is shared
    assert not list(sshd_hosts.results.glob(".aqsgd-fs-check-*"))  # the marker went
    assert not list(tmp_path.glob(".aqsgd-fs-check-*"))
    with SshLauncher(load_scenario("100mbps"), 2, run_id="t", shaping=False,
                     hostfile=sshd_hosts.hostfile, state_dir=results / ".launcher") as hosts:
        record = hosts.record()
    assert [h["shares_results"] for h in record["hosts"]] == [False, False]
    assert record["shaped"] is False
