"""The SSH hosts' check without a host: how a reason reads (bench.launch.ssh.messages), a
slots mismatch named before anything runs, and asyncssh imported without its
dependencies' deprecation warnings (in a fresh interpreter, as a user's run imports it)."""

from __future__ import annotations

import subprocess
import sys

from bench import REPO_ROOT
from bench.__main__ import main
from bench.launch.hostfile import HostEntry
from bench.launch.ssh import messages

HOST = HostEntry("10.0.0.12", port=2222, python="/opt/venv/bin/python", suite="/opt/aqsgd")


def test_why_facts_failed_is_told_from_the_interpreter_alone():
    said = "Traceback (most recent call last):\n  ...\nModuleNotFoundError: No module named 'bench'"
    assert messages.no_facts(HOST, 1, said, 127, "env: '/opt/venv/bin/python': No such file",
                             "3.11.7") == (
        "python=/opt/venv/bin/python does not run there (exit 127: env: '/opt/venv/bin/python':"
        " No such file); give python= the interpreter of the suite's virtual environment on "
        "that host")
    # a Python before 3.11 rejects -P: its version is the reason
    assert messages.no_facts(HOST, 2, "Unknown option: -P", 0, "3.10.12\n", "3.11.7") == \
        "Python 3.10.12 at python=/opt/venv/bin/python, here 3.11.7"
    assert messages.no_facts(HOST, 1, said, 0, "3.11.7\n", "3.11.7") == (
        "the suite at /opt/aqsgd does not run with python=/opt/venv/bin/python (exit 1: "
        "ModuleNotFoundError: No module named 'bench'); check suite= and python= in the "
        "hostfile")


def test_packages_missing_and_of_another_version_are_one_reason_each():
    here = {"torch": "2.13.0", "numpy": "2.4.6", "psutil": "7.2.2", "gone": None}
    assert messages.packages_differ({"numpy": "2.4.6", "psutil": "7.0.0"}, here) == [
        "without torch (pinned here: python= may name an interpreter without the suite's "
        "packages)", "psutil 7.0.0, here 7.2.2"]
    assert messages.packages_differ(dict(here), here) == []


def test_an_unknown_host_key_names_the_file_and_the_scan_of_its_port():
    text = messages.unknown_host_key(HOST, "host 10.0.0.12:2222: HostKeyNotVerifiable: x")
    assert text.startswith("its host key is not in ~/.ssh/known_hosts or differs")
    assert "(`ssh-keyscan -p 2222 10.0.0.12 >> ~/.ssh/known_hosts`)" in text


def test_a_slots_mismatch_names_the_host_its_slots_and_the_ranks_per_machine(tmp_path, capsys):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("10.9.0.1 slots=2 interface=eth0\n10.9.0.2 slots=2 interface=eth0\n")
    code = main(["run", "--scenario", "100mbps", "--modes", "fp32", "--stages", "2",
                 "--launcher", "ssh", "--hostfile", str(hostfile), "--dry-run",
                 "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err == (f"error: {hostfile}: host 10.9.0.1 has slots=2; scenario 100mbps places 1 "
                   f"rank(s) on each machine (layout.ranks_per_machine): give slots=1, or a "
                   f"scenario with 2 ranks per machine"), err
    assert not (tmp_path / "out").exists()


def test_importing_the_ssh_modules_and_asyncssh_warns_of_nothing(tmp_path):
    code = ("import warnings\n"
            "import bench.launch.ssh.remote, bench.launch.ssh.relay, asyncssh\n"
            "warnings.warn('this one is deprecated', DeprecationWarning)\n")  # not asyncssh's
    done = subprocess.run([sys.executable, "-P", "-W", "always", "-c", code],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60,
                          env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert "CryptographyDeprecationWarning" not in done.stderr, done.stderr
    # the filter is asyncssh's only: a warning raised elsewhere still shows
    assert done.stderr.count("Warning") == 1 and "this one is deprecated" in done.stderr
