"""The launcher contract: what every launcher offers the harness.

    factory = choose_launcher("auto").factory   # NetnsLauncher or LocalLauncher (a class)
    with factory(scenario, n_hosts, run_id=rid, state_dir=d) as hosts:
        records = hosts.probe()                 # list[ProbeRecord], the links in use
        print(format_table(records))            # bench.net.probe
        proc = hosts.spawn(0, argv, env, log_path)  # host 0 runs rank 0

A launcher is built as `factory(scenario, n_hosts=None, *, run_id=None, state_dir=None)`;
options of one launcher are keywords the harness never passes, or bound to the factory
by bench.launch.choice.choose_launcher (SSH's --hostfile, --no-shaping). It builds the
hosts on `__enter__` and removes exactly what it built on `__exit__` (also after a
crash, Ctrl-C or SIGTERM). The harness never asks which launcher it holds. Every
launcher is built on bench.launch.hosts (its transport); `new_run_id()` and
`links_record()` are shared here. docs/architecture/launch.md, "Launchers".
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any, ClassVar, Protocol

from bench.net.probe import ProbeRecord
from bench.net.scenario import NetworkScenario

__all__ = ["Launcher", "links_record", "new_run_id"]


def new_run_id() -> str:
    """A launcher's run id when the harness gives none: the time and this process's pid."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"


def links_record(scenario: NetworkScenario, n_hosts: int) -> list[dict[str, Any]]:
    """`record()`'s `links`: every directed link between the n_hosts hosts up, with its
    spec (bench.net.scenario.LinkSpec) and the payload rate the caps leave it."""
    return [{"src": a, "dst": b, **scenario.link_spec(a, b).to_dict(),
             "payload_rate_mbit": scenario.payload_rate_mbit(a, b)}
            for a in range(n_hosts) for b in range(n_hosts) if a != b]


class Launcher(Protocol):
    """What the harness may call on a launcher; nothing else."""

    name: ClassVar[str]  # "netns" | "docker" | "local" | "ssh": recorded in meta.json
    shaped: ClassVar[bool]  # True when links carry the scenario's rates and delays
    n_hosts: int
    # once up: which mechanism delivers each of rate, delay, jitter, loss ("htb",
    # "netem", "delayline", or "none ..." / "dropped ..." with why; bench.net.tc.
    # choose_mechanisms); part of a cell's recorded identity (bench.harness.meta)
    mechanisms: dict[str, str]

    @classmethod
    def host_count(cls, scenario: NetworkScenario) -> int:
        """How many of the scenario's hosts a cell may use (the placement's hosts): all,
        or fewer where the hosts are given (an SSH hostfile's); nobody contacted."""

    @classmethod
    def checked_for(cls, needs: list[tuple[NetworkScenario, int]], results_dir: Path
                    ) -> tuple[type[Launcher], list[str]]:
        """The factory once the hosts of the bring-ups `needs` ((scenario, n_hosts) each)
        are checked, before any cell, nothing changed (bench.launch.hosts.Hosts), with a
        line per host on what was found; a ValueError names every host that fails."""

    def __enter__(self) -> Launcher: ...

    def __exit__(self, *exc: object) -> None: ...

    def addr(self, i: int) -> str:
        """The address workers use for host i (MASTER_ADDR = addr(0))."""

    def worker_env(self, i: int) -> dict[str, str]:
        """Variables every process on host i needs (socket interfaces for gloo/NCCL)."""

    def spawn(self, i: int, argv: list[str], env: dict[str, str] | None = None,
              log_path: Path | str | None = None) -> subprocess.Popen:
        """Run argv on host i in its own process group (bench.launch.process.spawn_group);
        env (None: os.environ) with worker_env(i) on top; stdout and stderr appended to
        log_path. The launcher stops it on exit if it is still running. The harness puts
        the job's rank count in env as WORLD_SIZE: a launcher that starts one agent per
        host (SSH: torchrun's --nnodes) needs it; the others pass it on unread."""

    def probe(self, links: list[tuple[int, int]] | None = None, check: bool = True,
              tolerance: float = 0.10, duration_s: float = 1.0) -> list[ProbeRecord]:
        """Measure each directed link (default: those the placement of the scenario's
        layout uses), each probe planned from the link's rate, round trip and
        `duration_s` (bench.net.probe.plan_probe); with `check`, raise
        bench.net.probe.LinkProbeError when one is off by more than tolerance."""

    def start_schedule(self) -> None:
        """Start every link's schedule (bench.net.schedule) now, on one clock for all
        hosts (bench.launch.schedules.ScheduledLinks; nothing when no link has one, or
        on a launcher that shapes nothing)."""

    def stop_schedule(self) -> dict | None:
        """Stop the schedule, every link back to its own values; the record of that run
        (None when none ran). Raises bench.launch.schedules.ScheduleFailed when a change
        could not be applied."""

    def record(self) -> dict[str, Any]:
        """meta.json's `launcher` block: `launcher` (= name), `shaped`, `run_id`,
        `n_hosts`, `scenario`, `shaping`, `hosts`, `probe` ([r.to_dict() ...] of the
        last probe, [] before one), the shaped launchers' `schedule` (the links'
        schedules and the last run's changes, None without), and what else that
        launcher knows."""
