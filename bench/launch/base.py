"""The launcher contract: what every launcher (netns, local, and later docker) offers
the harness, and the one probe record they all return.

    with choose_launcher("auto").factory(scenario, n_hosts, run_id=rid, state_dir=d) as hosts:
        records = hosts.probe()                    # list[ProbeRecord], the links in use
        print(format_probe_table(records))
        proc = hosts.spawn(0, argv, env, log_path)  # host 0 runs rank 0

A launcher builds `n_hosts` hosts for one run on `__enter__` and removes exactly what
it built on `__exit__` (also after a crash, Ctrl-C or SIGTERM). The harness never asks
which launcher it holds: `name` and `shaped` say it, `record()` gives meta.json its
`launcher` block.
"""

from __future__ import annotations

import dataclasses
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

__all__ = ["Launcher", "ProbeRecord"]


@dataclass(frozen=True)
class ProbeRecord:
    """One directed link as measured by the probe (rates are TCP payload Mbit/s).

    `rate_mbit_configured` None = an unshaped link (loopback, local launcher).
    `rate_mbit_ceiling`: what the host carries on that path with its rate limits lifted,
    measured only when the shaped link fell short (else None). `host_limited`: the
    shortfall is the host's, not the shaping's (bench.net.probe.rate_verdict)."""

    src: int
    dst: int
    rate_mbit_configured: float | None
    rate_mbit_achieved: float
    rate_mbit_first_to_last: float
    rtt_ms: float
    rtt_ms_min: float
    rtt_ms_configured: float
    probe_bytes: int
    rate_mbit_ceiling: float | None = None
    host_limited: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProbeRecord:
        return cls(**data)


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
        """Run argv on host i in its own process group; env (None: os.environ) with
        worker_env(i) on top; stdout and stderr appended to log_path."""

    def probe(self, links: list[tuple[int, int]] | None = None, check: bool = True,
              tolerance: float = 0.10, duration_s: float = 1.0) -> list[ProbeRecord]:
        """Measure each directed link (default: those the run uses); with `check`,
        raise bench.net.probe.LinkProbeError when one is off by more than tolerance."""

    def record(self) -> dict[str, Any]:
        """meta.json's `launcher` block: name, shaped, mechanisms, hosts, probe."""
