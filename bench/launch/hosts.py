"""The launchers' common body, built on one small transport per launcher (the model is
Mininet's Node.cmd: run a command on a host, everything else built on it).

    class MyLauncher(ShapedHosts):     # Hosts for one that shapes nothing (local)
        name, shaped = "mine", True
        def _run_on_host(self, i, argv): ...          # a command on host i, as root
        def helper_argv(self, i, argv): ...           # the local argv running argv there
        def spawn(self, i, argv, env, log_path): ...  # a worker on host i
        def addr(self, i), worker_env(self, i): ...
        def _prepare(self), _build(self), _remove(self): ...  # bring-up and teardown
        def _schedule_plan(self), _framing(self), _record(self): ...

`Hosts` gives the arguments every launcher takes (scenario, n_hosts, run_id, state_dir),
the run prefix, the host limit and check, the state file's path and `record()`;
`ShapedHosts` adds the link probe (bench.launch.probing), the link schedules
(bench.launch.schedules) and the shaped launchers' record. docs/architecture/launch.md
("Launchers") lists what a new launcher writes.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from pathlib import Path
from typing import Any, ClassVar

from bench.launch.base import links_record, new_run_id
from bench.launch.lifecycle import HostsLifecycle
from bench.launch.probing import PROBE_PORT, default_probe_links, exchange, probe_each
from bench.launch.process import SAFE_PATH_ENV, ProcessIdentity, env_with_repo, spawn_group
from bench.launch.schedules import ScheduledLinks
from bench.launch.state import DEFAULT_STATE_DIR
from bench.net.executor import Argv
from bench.net.probe import ProbePlan, ProbeRecord, check_links
from bench.net.scenario import NetworkScenario
from bench.net.scenario_file import MAX_HOSTS

__all__ = ["MAX_HOSTS", "Hosts", "ShapedHosts", "check_host", "new_prefix"]

PROBE = ["python", "-m", "bench.net.probe"]


def new_prefix(run_id: str, stem: str = "aq") -> str:
    """`stem` + 5 hex digits: every name a run creates starts with it (short enough for
    Linux's 15-character device names), new for every call (a launcher that finds its
    names taken draws another)."""
    digest = hashlib.sha1(f"{run_id}-{os.getpid()}-{time.time_ns()}".encode())
    return stem + digest.hexdigest()[:5]


def check_host(i: int, n_hosts: int) -> None:
    """Raise IndexError unless 0 <= i < n_hosts."""
    if not 0 <= i < n_hosts:
        raise IndexError(f"host index {i} out of range [0, {n_hosts})")


class Hosts(HostsLifecycle):
    """What every launcher shares: its arguments, prefix, host check, state file and
    record. A launcher gives the transport and its bring-up (module doc)."""

    name: ClassVar[str]
    shaped: ClassVar[bool]
    prefix_stem: ClassVar[str] = "aq"
    mechanisms: dict[str, str]

    def __init__(self, scenario: NetworkScenario | None, n_hosts: int | None = None, *,
                 run_id: str | None = None, state_dir: Path | str | None = None):
        self.scenario = scenario
        self.n_hosts = scenario.n_hosts if n_hosts is None else n_hosts
        if not 1 <= self.n_hosts <= MAX_HOSTS:
            raise ValueError(f"n_hosts: expected 1..{MAX_HOSTS}, got {self.n_hosts}")
        self.run_id = run_id or new_run_id()
        self.prefix = new_prefix(self.run_id, self.prefix_stem)
        self.state_dir = Path(state_dir) if state_dir else DEFAULT_STATE_DIR
        self._procs: list[subprocess.Popen] = []
        self._started: list[ProcessIdentity] = []  # what cleanup of a killed run kills
        self._probe_records: list[ProbeRecord] = []
        self._timing: dict[str, float] = {}

    @classmethod
    def host_count(cls, scenario: NetworkScenario) -> int:
        """How many of the scenario's hosts this launcher gives a cell (the placement's
        hosts): all of them, where the run makes its hosts."""
        return scenario.n_hosts

    @classmethod
    def checked_for(cls, needs: list[tuple[NetworkScenario, int]], results_dir: Path
                    ) -> tuple[type[Hosts], list[str]]:
        """This factory once the hosts that the bring-ups `needs` ((scenario, n_hosts)
        each) use are checked, before any cell, and a line per host on what was found;
        nothing to check where the run makes its hosts (an SSH hostfile's are checked)."""
        return cls, []

    @property
    def state_path(self) -> Path:
        return self.state_dir / f"{self.prefix}.json"

    def _check_host(self, i: int) -> None:
        check_host(i, self.n_hosts)

    def worker_environ(self, i: int, env: dict[str, str] | None) -> dict[str, str]:
        """A worker's whole environment on host i: env (None: os.environ) with
        worker_env(i) and PYTHONSAFEPATH=1 (bench.launch.process, Note [safe path]) on
        top."""
        return {**(os.environ if env is None else env), **self.worker_env(i), **SAFE_PATH_ENV}

    def _started_process(self, proc: subprocess.Popen) -> None:
        """Record a process this run started in the state file (its identity, which
        cleanup of a killed run kills) before anything else can happen to it."""
        ident = ProcessIdentity.of(proc.pid)
        if ident is not None:  # None: it has exited already, nothing to clean up
            self._started.append(ident)
        self._write_state()

    def _write_state(self) -> None:
        raise NotImplementedError

    # -- the transport --------------------------------------------------------------
    def _run_on_host(self, i: int, argv: Argv) -> Any:
        """Run one command (tc, ip) on host i to completion, with the rights to shape it;
        raise bench.net.executor.CommandError when it fails."""
        raise NotImplementedError

    def helper_argv(self, i: int, argv: list[str]) -> list[str]:
        """The command, run here, that runs argv on host i (a leading "python": that
        host's interpreter, with the suite importable, started with -P: Note [safe path]
        in bench.launch.process)."""
        raise NotImplementedError

    def start_helper(self, i: int, argv: list[str]) -> subprocess.Popen:
        """argv started on host i (helper_argv) in its own process group, stdout on a
        pipe; the caller stops it (bench.launch.process.stop_group)."""
        return spawn_group(self.helper_argv(i, argv), env_with_repo(), pipe_stdout=True)

    # -- record ---------------------------------------------------------------------
    def _record(self) -> dict[str, Any]:
        """What this launcher adds to record() (its shaping, hosts, names)."""
        raise NotImplementedError

    def record(self) -> dict[str, Any]:
        """meta.json's `launcher` block (bench.launch.base.Launcher.record)."""
        # a launcher that shapes has nothing to shape on an unshaped scenario's links
        # (loopback, the reference): not shaped, as the cell's `shaped` says
        n, scenario = self.n_hosts, self.scenario
        given = scenario is not None and any(scenario.link_spec(a, b).shaped for a in range(n)
                                             for b in range(n) if a != b)
        return {"launcher": self.name, "shaped": self.shaped and given, "run_id": self.run_id,
                "prefix": self.prefix, "n_hosts": self.n_hosts,
                "scenario": self.scenario.to_dict() if self.scenario else None,
                **self._record(), "probe": [r.to_dict() for r in self._probe_records]}


class ShapedHosts(Hosts, ScheduledLinks):
    """A launcher whose links carry the scenario: the probe's exchange and lifted limits,
    the schedules' commands and the record's links, schedule and timing, all through
    the transport. Sets `allow_drop` and `payload_correction` (as NetnsLauncher's)."""

    def __init__(self, scenario: NetworkScenario, n_hosts: int | None = None, *,
                 run_id: str | None = None, state_dir: Path | str | None = None,
                 allow_drop: bool = False, payload_correction: bool = True):
        super().__init__(scenario, n_hosts, run_id=run_id, state_dir=state_dir)
        self.allow_drop = allow_drop
        self.payload_correction = payload_correction
        self.mechanisms: dict[str, str] = {}

    def _framing(self) -> float:
        """Bytes a link's class counts per byte of TCP payload of a full segment."""
        raise NotImplementedError

    def _payload_ratio(self) -> float:
        # configured literally, a link carries rate / framing of TCP payload
        return 1.0 if self.payload_correction else 1.0 / self._framing()

    def check_delay_line(self) -> None:
        """Raise if a delay line carrying the run's packets has died (none: nothing)."""

    def probe(self, links: list[tuple[int, int]] | None = None, check: bool = True,
              tolerance: float = 0.10, duration_s: float = 1.0) -> list[ProbeRecord]:
        """Measure each directed link (default: default_probe_links) one after the other
        (bench.launch.probing.probe_each: a short link again, then its host's ceiling
        with the path's limits lifted); with `check`, raise LinkProbeError when one is
        off by more than `tolerance` (a host-limited link is recorded, not raised)."""
        self.check_delay_line()
        links = links or default_probe_links(self.scenario, self.n_hosts)
        self._probe_records = probe_each(
            self.scenario, links, measure=self._measure_link, lift_limits=self._lift_limits,
            payload_ratio=self._payload_ratio(),
            delay_dropped=self.mechanisms.get("delay", "none").startswith("dropped"),
            tolerance=tolerance, duration_s=duration_s)
        if check:
            check_links(self._probe_records, tolerance)
        return self._probe_records

    def _measure_link(self, src: int, dst: int, plan: ProbePlan) -> dict:
        """One bench.net.probe exchange: its server on host dst, its client on host src."""
        server = self.start_helper(dst, [*PROBE, "serve", "--addr", self.addr(dst),
                                         "--port", str(PROBE_PORT)])
        client = self.helper_argv(src, [*PROBE, "measure", "--addr", self.addr(dst),
                                        "--port", str(PROBE_PORT), *plan.client_args()])
        return exchange(server, client, plan, env_with_repo(), src, dst, f"host {dst}")

    def _lift_limits(self, src: int, dst: int, lifted: bool) -> None:
        """On the hosts that hold them (src's egress, dst's downlink cap)."""
        plan, interfaces = self._schedule_plan()
        for host, argv in plan.rate_limit_argvs(src, dst, lifted, interfaces):
            self._run_on_host(host, argv)

    def _commands(self) -> list[str]:
        """Every command the run ran on its hosts, as text (record()'s `commands`)."""
        raise NotImplementedError

    def record(self) -> dict[str, Any]:
        return {**super().record(), "allow_drop": self.allow_drop,
                "removed_before_start": list(self.removed_before_start),
                "links": links_record(self.scenario, self.n_hosts),
                "schedule": self.schedule_record(), "timing": dict(self._timing),
                "commands": self._commands()}
