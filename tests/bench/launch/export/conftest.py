"""A real Slurm cluster for the Slurm export's tests: two nodes that are network
namespaces, each running its own slurmd (Debian's slurm-wlm), the controller in the
first.

    def test_x(slurm_cluster):                       # marks the test `netns`
        slurm_cluster.run(["sbatch", script])        # a Slurm command, in node 0
        slurm_cluster.qdiscs(1)                      # node 1's qdiscs on its interface

Layout (every name from one per-run prefix P, removed by that name afterwards): the
namespaces P-n0 and P-n1, joined by one veth pair whose ends are both named `Pd` inside
their namespaces (the interface the job shapes, as a cluster's nodes share an interface
name), addresses 198.18.77.1 and .2/24 (only inside the namespaces, so no route here
can clash with them). The controller (slurmctld) and node 0's slurmd run in P-n0, node
1's slurmd in P-n1, all as root with a slurm.conf this fixture writes (auth/none: no
munge key to share; state, spool and logs in the test's folder; ports fixed per node).
The namespaces share this machine's filesystem: the results folder and the checkout are
at the same paths on both nodes, as a cluster's shared filesystem makes them. Every
daemon is stopped by its own pid, every job of the cluster cancelled first.
"""

from __future__ import annotations

import os
import platform
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from launch_helpers import extra_qdiscs, remove_namespaces, sh

NODES = 2
SUBNET = "198.18.77"
CTLD_PORT, SLURMD_PORT = 6817, 6818  # in the namespaces' own network stacks
START_TIMEOUT_S = 30.0


@dataclass
class SlurmCluster:
    """What the fixture built (see module doc)."""

    prefix: str
    workdir: Path
    daemons: list[subprocess.Popen] = field(default_factory=list)

    def ns(self, i: int) -> str:
        return f"{self.prefix}-n{i}"

    @property
    def dev(self) -> str:
        return f"{self.prefix}d"

    def addr(self, i: int) -> str:
        return f"{SUBNET}.{i + 1}"

    @property
    def conf(self) -> Path:
        return self.workdir / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {k: v for k, v in os.environ.items() if not k.startswith("SLURM")} | {
            "SLURM_CONF": str(self.conf)}

    def run(self, argv: list[str], check: bool = True, node: int = 0
            ) -> subprocess.CompletedProcess:
        """argv in node `node`'s namespace, with this cluster's slurm.conf."""
        return sh([*self.enter(node), *argv], check, env=self.env)

    def enter(self, i: int) -> list[str]:
        """The prefix running a command in node i's network namespace. nsenter, not `ip
        netns exec`, which mounts a sysfs of the namespace's own over /sys and so hides
        /sys/fs/cgroup, which slurmd reads at start."""
        return ["nsenter", f"--net=/run/netns/{self.ns(i)}", "--"]

    def qdiscs(self, i: int) -> list[str]:
        """Node i's qdiscs on its interface that are not the kernel's default."""
        return extra_qdiscs(self.ns(i), self.dev)

    def job_state(self, job_id: str) -> str:
        out = self.run(["scontrol", "show", "job", "-o", job_id]).stdout.split()
        return dict(w.split("=", 1) for w in out if "=" in w)["JobState"]

    # -- building -------------------------------------------------------------------
    def build(self) -> None:
        p = self.prefix
        for i in range(NODES):
            sh(["ip", "netns", "add", self.ns(i)])
            sh(["ip", "-n", self.ns(i), "link", "set", "lo", "up"])
        sh(["ip", "link", "add", f"{p}a", "netns", self.ns(0), "type", "veth", "peer",
              "name", f"{p}b", "netns", self.ns(1)])
        for i, end in enumerate((f"{p}a", f"{p}b")):
            sh(["ip", "-n", self.ns(i), "link", "set", end, "name", self.dev])
            sh(["ip", "-n", self.ns(i), "addr", "add", f"{self.addr(i)}/24", "dev", self.dev])
            sh(["ip", "-n", self.ns(i), "link", "set", self.dev, "up"])
        for sub in ("state", "log", *(f"spooln{i}" for i in range(NODES))):
            (self.workdir / sub).mkdir()
        self.conf.write_text(self._conf())
        self._start(0, ["slurmctld", "-D", "-f", str(self.conf)], "slurmctld")
        for i in range(NODES):
            self._start(i, ["slurmd", "-D", "-N", f"n{i}", "-f", str(self.conf)], f"slurmd{i}")
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert all(d.poll() is None for d in self.daemons), self._logs()
            idle = self.run(["sinfo", "-h", "-o", "%T %D"], check=False).stdout.split()
            if idle[:2] == ["idle", str(NODES)]:
                return
            time.sleep(0.3)
        raise RuntimeError(f"the Slurm nodes did not come up idle:\n{self._logs()}")

    def _conf(self) -> str:
        w = self.workdir
        # one machine's hostname for both (multiple slurmd), each reached at its own address
        nodes = [f"NodeName=n{i} NodeHostname={platform.node()} NodeAddr={self.addr(i)} "
                 f"Port={SLURMD_PORT} CPUs={os.cpu_count()} State=UNKNOWN"
                 for i in range(NODES)]
        return "\n".join([
            f"ClusterName={self.prefix}", f"SlurmctldHost={platform.node()}({self.addr(0)})",
            f"SlurmctldPort={CTLD_PORT}", "AuthType=auth/none", "CredType=cred/none",
            "SlurmUser=root", "SlurmdUser=root", "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none", "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core", "MpiDefault=none", "ReturnToService=2",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            f"StateSaveLocation={w / 'state'}", f"SlurmdSpoolDir={w / 'spool'}%n",
            f"SlurmctldPidFile={w / 'slurmctld.pid'}", f"SlurmdPidFile={w / 'slurmd'}%n.pid",
            f"SlurmctldLogFile={w / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={w / 'log' / 'slurmd'}%n.log", "KillWait=5",
            *nodes, f"PartitionName=test Nodes=n[0-{NODES - 1}] Default=YES "
            f"MaxTime=INFINITE State=UP", ""])

    def _start(self, node: int, argv: list[str], name: str) -> None:
        log = open(self.workdir / "log" / f"{name}.out", "ab")
        self.daemons.append(subprocess.Popen(
            [*self.enter(node), *argv], stdout=log, stderr=log,
            stdin=subprocess.DEVNULL, env=self.env, start_new_session=True))
        log.close()

    def _logs(self) -> str:
        return "\n".join(f"== {p.name}\n{p.read_text()[-2000:]}"
                         for p in sorted((self.workdir / "log").glob("*")))

    # -- removing, by name ------------------------------------------------------------
    def remove(self) -> None:
        if self.daemons and self.daemons[0].poll() is None:
            jobs = self.run(["squeue", "-h", "-o", "%i"], check=False).stdout.split()
            for job in jobs:
                self.run(["scancel", job], check=False)
        for proc in reversed(self.daemons):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        # with a step's processes a failed job left in this run's namespaces
        remove_namespaces([self.ns(i) for i in range(NODES)])


@pytest.fixture
def slurm_cluster(tmp_path, netns_usable):
    """NODES namespaces running Slurm (see module doc), removed afterwards by name."""
    missing = [d for d in ("slurmctld", "slurmd", "sbatch") if shutil.which(d) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (Debian's slurm-wlm; .ci/run "
                    f"installs it)")
    workdir = tmp_path / "slurm"
    workdir.mkdir()
    cluster = SlurmCluster(f"sl{secrets.token_hex(2)}", workdir)
    try:
        cluster.build()
        yield cluster
    finally:
        cluster.remove()
