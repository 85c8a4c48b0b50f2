"""Timing of code on this machine's CPU: rounds of a loop (warm-up rounds left out),
named phases timed inside each round on one clock or more, and the median and spread.

    timer = Timer("wall", "cpu")
    for _ in timer.rounds(repeats=20, warmup=1):
        x = torch.randn(16, 64, 128)              # untimed: the round's own input
        with timer.phase("fwd+bwd"):
            module(x).sum().backward()
    timer.samples("fwd+bwd", "wall").median_s, timer.samples("fwd+bwd", "cpu").median_s
    time_call(opt.step, repeats=10, clock="cpu").median_s  # one untimed call, then 10

Clocks (CLOCKS): "wall" is time.perf_counter, "cpu" time.process_time (this process's
CPU time, all threads). No GPU synchronization; standard library only. Its users and
the clocks: docs/micro.md, "Timing".
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

__all__ = ["CLOCKS", "Samples", "Timer", "time_call"]

CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}


@dataclass(frozen=True)
class Samples:
    """Seconds of each timed round of one phase on one clock, in the order timed."""

    seconds: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.seconds:
            raise ValueError("Samples.seconds: expected at least one timed round, got none")

    @property
    def median_s(self) -> float:
        return statistics.median(self.seconds)

    def quantile_s(self, q: float) -> float:
        """The sample at rank floor(q * n) of the n sorted ones (no interpolation: always a
        time that was measured; 0.1 and 0.9 of 11 samples are the 2nd and the 10th)."""
        if not 0 <= q <= 1:
            raise ValueError(f"Samples.quantile_s: expected 0 <= q <= 1, got {q!r}")
        ordered = sorted(self.seconds)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    @property
    def iqr_s(self) -> float:
        """Interquartile range, as statistics.quantiles(n=4) interpolates the quartiles
        (its 'exclusive' method); needs two samples or more."""
        if len(self.seconds) < 2:
            raise ValueError(f"Samples.iqr_s: expected two samples or more, got "
                             f"{len(self.seconds)}")
        q = statistics.quantiles(self.seconds, n=4)
        return q[2] - q[0]


class Timer:
    """Phases timed inside the rounds of a loop (module docstring), on `clocks` (names in
    CLOCKS; "wall" when none given). A phase timed in a warm-up round, or one that raised,
    is not kept."""

    def __init__(self, *clocks: str) -> None:
        clocks = clocks or ("wall",)
        unknown = [c for c in clocks if c not in CLOCKS]
        if unknown or len(set(clocks)) != len(clocks):
            raise ValueError(f"Timer: expected distinct clocks among {sorted(CLOCKS)}, "
                             f"got {list(clocks)}")
        self.clocks = clocks
        self._now = tuple(CLOCKS[c] for c in clocks)
        self._seconds: dict[tuple[str, str], list[float]] = {}
        self._round: str | None = None  # None: outside rounds(); else "warm-up" or "timed"

    def rounds(self, repeats: int, warmup: int = 1) -> Iterator[int]:
        """Yield `warmup` + `repeats` times (the round's number, from 0); the phases of the
        first `warmup` rounds are timed but not kept (allocators, caches, kernels warm)."""
        if not (isinstance(repeats, int) and repeats >= 1 and isinstance(warmup, int)
                and warmup >= 0):
            raise ValueError(f"Timer.rounds: expected repeats >= 1 and warmup >= 0, got "
                             f"repeats={repeats!r}, warmup={warmup!r}")
        try:
            for i in range(warmup + repeats):
                self._round = "warm-up" if i < warmup else "timed"
                yield i
        finally:
            self._round = None

    def phase(self, name: str) -> _Phase:
        """A context manager timing its body as the phase `name` of this round."""
        if self._round is None:
            raise RuntimeError(f"Timer.phase({name!r}): expected inside Timer.rounds()")
        return _Phase(self, name)

    def samples(self, phase: str, clock: str | None = None) -> Samples:
        """The kept times of `phase` on `clock` (the first of the timer's clocks by
        default)."""
        clock = self.clocks[0] if clock is None else clock
        if (phase, clock) not in self._seconds:
            timed = sorted({p for p, _ in self._seconds})
            raise KeyError(f"Timer.samples: no timed round of phase {phase!r} on clock "
                           f"{clock!r}; timed phases {timed}, clocks {list(self.clocks)}")
        return Samples(tuple(self._seconds[phase, clock]))

    def _keep(self, name: str, starts: list[float], ends: list[float]) -> None:
        if self._round != "timed":
            return
        for clock, start, end in zip(self.clocks, starts, ends, strict=True):
            self._seconds.setdefault((name, clock), []).append(end - start)


class _Phase:
    """One timed body: every clock read on entry and again on exit, in the timer's order."""

    __slots__ = ("_name", "_starts", "_timer")

    def __init__(self, timer: Timer, name: str) -> None:
        self._timer, self._name, self._starts = timer, name, []

    def __enter__(self) -> None:
        self._starts = [now() for now in self._timer._now]

    def __exit__(self, exc_type, exc, tb) -> None:
        ends = [now() for now in self._timer._now]
        if exc_type is None:
            self._timer._keep(self._name, self._starts, ends)


def time_call(fn: Callable[[], object], repeats: int, *, warmup: int = 1,
              clock: str = "wall") -> Samples:
    """`fn()` called `warmup` times untimed, then `repeats` times each timed on `clock`."""
    timer = Timer(clock)
    for _ in timer.rounds(repeats, warmup):
        with timer.phase("call"):
            fn()
    return timer.samples("call")
