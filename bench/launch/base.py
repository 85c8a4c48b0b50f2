"""The launcher contract: what every launcher (netns, local, and later docker) offers
the harness.

    factory = choose_launcher("auto").factory   # NetnsLauncher or LocalLauncher (a class)
    with factory(scenario, n_hosts, run_id=rid, state_dir=d) as hosts:
        records = hosts.probe()                 # list[ProbeRecord], the links in use
        print(format_table(records))            # bench.net.probe
        proc = hosts.spawn(0, argv, env, log_path)  # host 0 runs rank 0

A launcher class is built as `factory(scenario, n_hosts=None, *, run_id=None,
state_dir=None)` (n_hosts None: the scenario's layout); options only one launcher
has (netns: allow_drop, payload_correction, executor, python; local: warn) are
keywords the harness never passes. It builds `n_hosts` hosts on `__enter__` and
removes exactly what it built on `__exit__` (also after a crash, Ctrl-C or
SIGTERM). The harness never asks which launcher it holds: the class attributes
`name` and `shaped` say it, `record()` gives meta.json its `launcher` block.

The probe record (`bench.net.probe.ProbeRecord`) lives with the probe in
bench/net, the lower layer, so that the link checks there read the same type
the launchers return.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, ClassVar, Protocol

from bench.net.probe import ProbeRecord

__all__ = ["Launcher"]


class Launcher(Protocol):
    """What the harness may call on a launcher; nothing else."""

    name: ClassVar[str]  # "netns" | "local" | ...: recorded in meta.json
    shaped: ClassVar[bool]  # True when links carry the scenario's rates and delays
    n_hosts: int

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
        log_path. The launcher stops it on exit if it is still running."""

    def probe(self, links: list[tuple[int, int]] | None = None, check: bool = True,
              tolerance: float = 0.10, duration_s: float = 1.0) -> list[ProbeRecord]:
        """Measure each directed link (default: those the placement of the scenario's
        layout uses), each probe planned from the link's rate, round trip and
        `duration_s` (bench.net.probe.plan_probe); with `check`, raise
        bench.net.probe.LinkProbeError when one is off by more than tolerance."""

    def record(self) -> dict[str, Any]:
        """meta.json's `launcher` block: `launcher` (= name), `shaped`, `run_id`,
        `n_hosts`, `scenario`, `shaping`, `hosts`, `probe` ([r.to_dict() ...] of the
        last probe, [] before one), and what else that launcher knows."""
