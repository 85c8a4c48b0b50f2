"""Stragglers: a scenario may slow one host's compute by a factor over an interval.

    stragglers:                              # in a scenario file
      - {host: 1, factor: 2, start_s: 20, duration_s: 30}

The launcher runs each straggler host's processes in a CPU cgroup of its own and, over
the interval, caps it at `cpu_quota_us(factor, cores_available)` per PERIOD_US (Note
[straggler quota] below). Whether a cap bound is in the record's cpu.stat
(`nr_throttled` at the cap's start and end); docs/network.md, "Competing traffic and
stragglers".
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.net.scenario_file import MAX_PHASE_S, MAX_STRAGGLER_FACTOR
from bench.net.schedule import bounded_number
from specfile import SpecError

__all__ = ["MIN_QUOTA_US", "PERIOD_US", "Straggler", "cpu_quota_us"]

PERIOD_US = 100_000  # the CFS period: the kernel's default, 100 ms
MIN_QUOTA_US = 1_000  # cpu.cfs_quota_us / cpu.max refuse less than 1 ms



@dataclass(frozen=True)
class Straggler:
    """Host `host` computes `factor` times slower from `start_s` to `start_s +
    duration_s` seconds of the run's clock."""

    host: int
    factor: float
    start_s: float
    duration_s: float

    def __post_init__(self) -> None:
        if isinstance(self.host, bool) or not isinstance(self.host, int) or self.host < 0:
            raise SpecError.at("host", "a host index >= 0", self.host)
        object.__setattr__(self, "factor", bounded_number("factor", self.factor, 1.0,
                                                   MAX_STRAGGLER_FACTOR, "times slower",
                                                   open_lo=True))
        object.__setattr__(self, "start_s", bounded_number("start_s", self.start_s, 0.0,
                                                    MAX_PHASE_S, "s"))
        object.__setattr__(self, "duration_s", bounded_number("duration_s", self.duration_s, 0.0,
                                                       MAX_PHASE_S, "s", open_lo=True))

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s

    def to_dict(self) -> dict:
        return {"host": self.host, "factor": self.factor, "start_s": self.start_s,
                "duration_s": self.duration_s}


# Note [straggler quota]: a factor f gives the host 1/f of the CPU it has:
#     quota = period x cores_available / f,
# where cores_available is the host's share of the machine: the CPUs the launcher may run
# on, divided by the emulated hosts that share them (on the netns launcher every host is
# one namespace of one machine; a host of its own would have all its CPUs). Why the fair
# share and not the CPU the host happens to get: it is fixed before the run and the same
# on every machine of that size, so a factor means one quota. A worker that would use all
# of that share runs f times slower; one that idles part of each step (a pipeline bubble)
# loses less, and on a machine busy with other work, where a worker gets less than its
# share anyway, a small factor may not bind at all: the record's cpu.stat at the cap's
# start and end (`nr_throttled`) says whether it did. The quota is at least MIN_QUOTA_US
# per period (the kernel's floor).
def cpu_quota_us(factor: float, cores_available: float, period_us: int = PERIOD_US) -> int:
    """The CPU time per period of a host slowed by `factor` (Note [straggler quota])."""
    if not factor > 1 or not cores_available > 0:
        raise ValueError(f"cpu_quota_us: expected factor > 1 and cores_available > 0, got "
                         f"{factor} and {cores_available}")
    return max(MIN_QUOTA_US, round(period_us * cores_available / factor))
