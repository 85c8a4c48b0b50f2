"""Real SSH servers on real addresses for the SSH launcher's tests: N hosts that are
network namespaces, each running its own sshd (Debian's openssh-server).

    def test_x(sshd_hosts):                      # marks the test `netns`
        sshd_hosts.hostfile                      # a hostfile naming the N hosts
        sshd_hosts.run(1, ["tc", "qdisc", "show"])   # a command inside host 1
    def test_y(sshd_hosts_shared): ...           # hosts that share the results folder
    def test_z(sshd_hosts_no_sftp): ...          # host 1's sshd offers no sftp subsystem

Layout (every name from one per-run prefix P, removed by that name afterwards):
namespaces P-h0..P-h{N-1} and the switch P-sw, whose bridge P-br joins one veth per host
(P-hI's end `PhI`, address 198.18.X.(I+1)/24) and one from this (the root) namespace
(`Pc`, 198.18.X.254), which is where the launcher's SSH connections come from. X is a
/24 of 198.18.0.0/15 that no route here uses yet.

Each sshd runs with a config, host key, authorized key and known_hosts file the fixture
writes (key auth only, root allowed by key, a silent client given up after about 6 s, as
a server with ClientAliveInterval does), listening on its host's address. It runs
in a mount namespace of its own in which the sweep's results folder is an empty tmpfs:
the hosts share this machine's filesystem (the suite's checkout and virtual
environment are where the hostfile says), but not the results, so the launcher's
copies over SFTP are what brings results back; `sshd_hosts_shared`'s hosts share the
results folder too, as hosts with an NFS home do. The namespaces share this machine's UTS
name (hostname), as separate machines would not; nothing in the launcher relies on it.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from launch_helpers import extra_qdiscs, remove_namespaces, sh

SSHD = "/usr/sbin/sshd"
PRIVSEP_DIR = Path("/run/sshd")
HOSTS = 2
START_TIMEOUT_S = 20.0
CLIENT_ALIVE_S, CLIENT_ALIVE_MAX = 2, 3


def _free_subnet() -> int:
    """A third octet X with 198.18.X.0/24 unused by every route of this namespace."""
    routes = sh(["ip", "-4", "route", "show", "table", "all"]).stdout
    used = []
    for line in routes.split("\n"):
        word = line.split(" ", 1)[0]
        for candidate in (word, line.split(" ")[1] if " " in line else ""):
            try:
                used.append(ipaddress.ip_network(candidate, strict=False))
            except ValueError:
                continue
    for x in range(200, 255):
        net = ipaddress.ip_network(f"198.18.{x}.0/24")
        if not any(net.overlaps(u) for u in used if u.prefixlen > 0):
            return x
    raise RuntimeError("no free /24 in 198.18.200.0 - 198.18.254.0 for the sshd hosts")


@dataclass
class SshdHosts:
    """What the fixture built (see module doc)."""

    prefix: str
    n: int
    subnet: int
    workdir: Path
    results: Path
    share_results: bool = False  # the results folder: this machine's, or a tmpfs a host
    no_sftp: frozenset[int] = frozenset()  # hosts whose sshd_config has no Subsystem sftp
    sshd: list[subprocess.Popen] = field(default_factory=list)
    made_privsep: bool = False

    def ns(self, i: int) -> str:
        return f"{self.prefix}-h{i}"

    @property
    def switch(self) -> str:
        return f"{self.prefix}-sw"

    def dev(self, i: int) -> str:
        return f"{self.prefix}h{i}"

    def addr(self, i: int) -> str:
        return f"198.18.{self.subnet}.{i + 1}"

    @property
    def key(self) -> Path:
        return self.workdir / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.workdir / "known_hosts"

    @property
    def hostfile(self) -> Path:
        return self.workdir / "hostfile"

    def run(self, i: int, argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
        """argv inside host i's namespace (as the machine's root, not over SSH)."""
        return sh(["ip", "netns", "exec", self.ns(i), *argv], check)

    def qdiscs(self, i: int) -> list[str]:
        """Host i's qdiscs on its interface that are not the kernel's default."""
        return extra_qdiscs(self.ns(i), self.dev(i))

    def pids(self, i: int) -> list[int]:
        """Processes in host i's namespace other than its sshd listener."""
        listener = self.sshd[i].pid if i < len(self.sshd) else None
        out = sh(["ip", "netns", "pids", self.ns(i)], check=False).stdout.split()
        return [int(p) for p in out if int(p) != listener]

    def set_link(self, i: int, up: bool) -> None:
        """Take host i off the network (its interface down) or back on."""
        sh(["ip", "-n", self.ns(i), "link", "set", self.dev(i), "up" if up else "down"])

    # -- building -------------------------------------------------------------------
    def build(self) -> None:
        p = self.prefix
        sh(["ip", "netns", "add", self.switch])
        sh(["ip", "-n", self.switch, "link", "add", f"{p}-br", "type", "bridge"])
        sh(["ip", "-n", self.switch, "link", "set", f"{p}-br", "up"])
        sh(["ip", "link", "add", f"{p}c", "type", "veth", "peer", "name", f"{p}cs",
              "netns", self.switch])
        sh(["ip", "addr", "add", f"198.18.{self.subnet}.254/24", "dev", f"{p}c"])
        sh(["ip", "link", "set", f"{p}c", "up"])
        self._join_switch(f"{p}cs")
        for i in range(self.n):
            sh(["ip", "netns", "add", self.ns(i)])
            sh(["ip", "-n", self.ns(i), "link", "set", "lo", "up"])
            sh(["ip", "-n", self.ns(i), "link", "add", self.dev(i), "type", "veth", "peer",
                  "name", f"{p}s{i}", "netns", self.switch])
            sh(["ip", "-n", self.ns(i), "addr", "add", f"{self.addr(i)}/24", "dev",
                  self.dev(i)])
            sh(["ip", "-n", self.ns(i), "link", "set", self.dev(i), "up"])
            self._join_switch(f"{p}s{i}")
        self._keys()
        for i in range(self.n):
            self.sshd.append(self._start_sshd(i))
        self._write_hostfile()

    def _join_switch(self, dev: str) -> None:
        sh(["ip", "-n", self.switch, "link", "set", dev, "master", f"{self.prefix}-br"])
        sh(["ip", "-n", self.switch, "link", "set", dev, "up"])

    def _keys(self) -> None:
        sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key)])
        shutil.copy(self.key.with_suffix(".pub"), self.workdir / "authorized_keys")
        lines = []
        for i in range(self.n):
            hostkey = self.workdir / f"host{i}_ed25519"
            sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(hostkey)])
            pub = hostkey.with_suffix(".pub").read_text().split()
            lines.append(f"{self.addr(i)} {pub[0]} {pub[1]}")
        self.known_hosts.write_text("\n".join(lines) + "\n")

    def _start_sshd(self, i: int) -> subprocess.Popen:
        config = self.workdir / f"sshd{i}.conf"
        config.write_text("\n".join([
            "Port 22", f"ListenAddress {self.addr(i)}",
            f"HostKey {self.workdir / f'host{i}_ed25519'}",
            f"AuthorizedKeysFile {self.workdir / 'authorized_keys'}",
            f"PidFile {self.workdir / f'sshd{i}.pid'}", "UsePAM no", "StrictModes no",
            "PermitRootLogin prohibit-password", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            *([] if i in self.no_sftp else ["Subsystem sftp internal-sftp"]),
            "MaxSessions 64", "MaxStartups 64", "LogLevel ERROR",
            # a client gone silent (its host dropped) is given up after about 6 s: the
            # session closes, and `hostside tied` stops what it started
            f"ClientAliveInterval {CLIENT_ALIVE_S}", f"ClientAliveCountMax {CLIENT_ALIVE_MAX}",
            ""]))
        if not PRIVSEP_DIR.exists():  # sshd's privilege separation; removed afterwards
            PRIVSEP_DIR.mkdir(parents=True)
            self.made_privsep = True
        self.results.mkdir(parents=True, exist_ok=True)
        # a private mount namespace in which the results folder is this host's own
        script = ("" if self.share_results else
                  f"mount -t tmpfs -o size=256m tmpfs {self.results} && ") + \
            f"exec {SSHD} -D -e -f {config}"
        log = open(self.workdir / f"sshd{i}.log", "ab")
        proc = subprocess.Popen(["ip", "netns", "exec", self.ns(i), "unshare", "--mount",
                                 "--propagation", "private", "sh", "-c", script],
                                stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            listening = self.run(i, ["ss", "-Htln", f"src {self.addr(i)}:22"], check=False)
            if listening.stdout.strip():
                return proc
            if proc.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError(f"sshd on {self.ns(i)} did not listen; log:\n"
                           f"{(self.workdir / f'sshd{i}.log').read_text()}")

    def _write_hostfile(self) -> None:
        lines = [f"{self.addr(i)} slots=1 user=root interface={self.dev(i)} "
                 f"identity={self.key} known_hosts={self.known_hosts}" for i in range(self.n)]
        self.hostfile.write_text("# written by tests/bench/launch/ssh/conftest.py\n"
                                 + "\n".join(lines) + "\n")

    # -- removing, by name ------------------------------------------------------------
    def remove(self) -> None:
        for proc in self.sshd:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=10)
        remove_namespaces([self.ns(i) for i in range(self.n)] + [self.switch])
        sh(["ip", "link", "del", f"{self.prefix}c"], check=False)
        if self.made_privsep:
            PRIVSEP_DIR.rmdir()


def _sshd_hosts(tmp_path: Path, share_results: bool, no_sftp: frozenset[int] = frozenset()):
    if not Path(SSHD).exists():
        pytest.skip(f"{SSHD} not installed (Debian's openssh-server; .ci/run installs it)")
    workdir = tmp_path / "sshd"
    workdir.mkdir()
    hosts = SshdHosts(f"sh{secrets.token_hex(2)}", HOSTS, _free_subnet(), workdir,
                      tmp_path / "results", share_results, no_sftp)
    try:
        hosts.build()
        yield hosts
    finally:
        hosts.remove()


@pytest.fixture
def sshd_hosts(tmp_path, netns_usable):
    """HOSTS namespaces with an sshd each (see module doc), removed afterwards by name."""
    yield from _sshd_hosts(tmp_path, share_results=False)


@pytest.fixture
def sshd_hosts_shared(tmp_path, netns_usable):
    """As sshd_hosts, but every host sees the results folder as this machine's files."""
    yield from _sshd_hosts(tmp_path, share_results=True)


@pytest.fixture
def sshd_hosts_no_sftp(tmp_path, netns_usable):
    """As sshd_hosts, but host 1's sshd offers no sftp subsystem."""
    yield from _sshd_hosts(tmp_path, share_results=False, no_sftp=frozenset({1}))


@pytest.fixture
def count_checks(monkeypatch) -> list[int]:
    """The hosts of each call of the SSH launcher's checks (gather_facts), one entry a
    call: a sweep that checks its hosts once makes one."""
    from bench.launch.ssh import checks

    calls: list[int] = []
    real = checks.gather_facts

    def counted(remote, *args, **kw):
        calls.append(len(remote.hosts))
        return real(remote, *args, **kw)

    monkeypatch.setattr(checks, "gather_facts", counted)
    return calls
