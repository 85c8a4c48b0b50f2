"""The SSH layer (bench/launch/ssh/remote.py) against real sshd servers in namespaces:
commands, exit codes, SFTP both ways, and a host that is gone."""

from __future__ import annotations

import pytest

from bench.launch.hostfile import load_hostfile
from bench.launch.ssh.remote import HostUnreachable, Remote, RemoteCommandError

pytestmark = pytest.mark.netns


def test_commands_and_files_over_ssh(sshd_hosts, tmp_path):
    hosts = load_hostfile(sshd_hosts.hostfile).hosts
    with Remote(hosts) as remote:
        out = remote.run(1, ["ip", "-4", "-o", "addr", "show", "dev", sshd_hosts.dev(1)])
        assert sshd_hosts.addr(1) in out.stdout
        assert remote.run(0, ["sh", "-c", "exit 3"], check=False).returncode == 3
        with pytest.raises(RemoteCommandError, match=f"on root@{sshd_hosts.addr(0)}.*exit 3"):
            remote.run(0, ["sh", "-c", "echo no >&2; exit 3"])
        src = tmp_path / "a.txt"
        src.write_text("payload")
        far = str(sshd_hosts.results / "x" / "a.txt")
        remote.put(0, src, far)
        # the host's results folder is its own: host 1 does not see host 0's copy
        assert remote.run(1, ["test", "-e", far], check=False).returncode == 1
        back = remote.get_tree(0, str(sshd_hosts.results / "x"), tmp_path / "back")
        assert [p.read_text() for p in back] == ["payload"]


def test_a_host_off_the_network_is_named_not_waited_for(sshd_hosts):
    hosts = load_hostfile(sshd_hosts.hostfile).hosts
    with Remote(hosts) as remote:
        remote.run(1, ["true"])
        sshd_hosts.set_link(1, up=False)
        with pytest.raises(HostUnreachable, match=sshd_hosts.addr(1)):
            remote.run(1, ["sleep", "60"])
