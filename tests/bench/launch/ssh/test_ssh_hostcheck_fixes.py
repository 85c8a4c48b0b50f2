"""What the SSH hosts' check names, with its fix, against sshd servers in namespaces
(conftest.py): an sshd without the sftp subsystem on a host that does not share the
results folder (fine on one that does), a host key missing from known_hosts, a wrong
`python=` (another interpreter, one that does not exist); and a relay, the process
behind every rank log, that prints no deprecation warning of asyncssh's."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.__main__ import main
from bench.launch.hostfile import load_hostfile
from bench.launch.ssh import checks
from bench.launch.ssh.relay import relay_argv
from bench.launch.ssh.remote import Remote

pytestmark = [pytest.mark.netns, pytest.mark.timeout(300)]
RUN = ["run", "--scenario", "100mbps", "--modes", "fp32", "--stages", "2", "--steps", "2",
       "--train-samples", "64", "--init-from", "none", "--launcher", "ssh", "--quiet"]
HEAD = ("error: ssh launcher: hosts that cannot run this sweep (nothing was changed on any "
        "host):")


def _changed(sshd_hosts, tmp_path: Path, change: Callable[[int, str], str]) -> Path:
    """The fixture's hostfile with host i's line `change(i, line)`."""
    lines = sshd_hosts.hostfile.read_text().splitlines()  # line 0 is a comment
    path = tmp_path / "hosts-changed"
    path.write_text("\n".join([lines[0], *(change(i, line) for i, line in
                                           enumerate(lines[1:]))]) + "\n")
    return path


def _refused(hostfile: Path, out: Path, capsys) -> list[str]:
    """The error lines of a run of RUN on `hostfile`, which must stop with exit 2."""
    code = main([*RUN, "--hostfile", str(hostfile), "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    print("\n" + "\n".join(err))
    assert code == 2 and err[0] == HEAD, err
    assert not out.exists()
    return err[1:]


def test_a_host_without_sftp_is_named_with_the_sshd_config_line(sshd_hosts_no_sftp, capsys):
    hosts = sshd_hosts_no_sftp
    err = _refused(hosts.hostfile, hosts.results / "out", capsys)
    assert len(err) == 1, err
    assert err[0].startswith(f"  root@{hosts.addr(1)}: its sshd offers no sftp subsystem ("), err
    assert err[0].endswith("which hosts without the shared results folder need; add "
                           "\"Subsystem sftp internal-sftp\" to its sshd_config"), err
    # a results folder both hosts share (this machine's /tmp): nothing travels, no SFTP
    with Remote(load_hostfile(hosts.hostfile).hosts) as remote:
        found = checks.check_machines(remote, needs_netem=False, shaping=False, gpus=None,
                                      results_dir=hosts.workdir / "shared")
    assert found.shares_results == (True, True)


def test_an_unknown_host_key_is_named_with_the_known_hosts_fix(sshd_hosts, tmp_path, capsys):
    lacking = tmp_path / "known_hosts_without_h1"
    lacking.write_text(sshd_hosts.known_hosts.read_text().splitlines()[0] + "\n")
    hostfile = _changed(sshd_hosts, tmp_path, lambda i, line: line if i == 0 else line.replace(
        f"known_hosts={sshd_hosts.known_hosts}", f"known_hosts={lacking}"))
    err = _refused(hostfile, sshd_hosts.results / "out", capsys)
    assert len(err) == 1, err
    assert err[0].startswith(f"  root@{sshd_hosts.addr(1)}: its host key is not in {lacking} "
                             f"or differs from the one there (host root@"), err
    assert "HostKeyNotVerifiable" in err[0]
    assert err[0].endswith(f"add it (`ssh-keyscan {sshd_hosts.addr(1)} >> {lacking}`), or "
                           f"name the file that has it with known_hosts= in the hostfile"), err


def test_a_wrong_python_is_a_line_of_the_check_not_a_traceback(sshd_hosts, tmp_path, capsys):
    system = "/usr/bin/python3"
    if not Path(system).exists():
        pytest.skip(f"{system} not installed")
    # host 0: a Python without the suite's packages; host 1: none at all
    pythons = (system, "/nonexistent/bin/python3")
    wrong = _changed(sshd_hosts, tmp_path, lambda i, line: f"{line} python={pythons[i]}")
    err = _refused(wrong, sshd_hosts.results / "out", capsys)
    assert len(err) == 2 and "Traceback" not in "\n".join(err), err
    h0, h1 = err
    assert h0.startswith(f"  root@{sshd_hosts.addr(0)}: "), h0
    # another Python: its version differs, or it lacks the pinned packages (or both)
    assert f"at python={system}, here " in h0 or "without torch" in h0, h0
    assert h1.startswith(f"  root@{sshd_hosts.addr(1)}: python=/nonexistent/bin/python3 does "
                         f"not run there (exit 127: env: "), h1
    assert h1.endswith("No such file or directory); give python= the interpreter of the "
                       "suite's virtual environment on that host"), h1


def test_a_relay_prints_no_deprecation_warning(sshd_hosts):
    host = load_hostfile(sshd_hosts.hostfile).hosts[0]
    done = subprocess.run(relay_argv(sys.executable, host, "h0", ["echo", "hello"], raw=True),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "hello\n"
    assert "Warning" not in done.stderr, done.stderr  # what every rank log began with
