"""What a time-resolved probe (bench.net.probe.stream) says of each phase of a link's
schedule: the rate delivered inside each phase against the rate the phase promises.

    windows = [PhaseWindow(0, 0.0, 5.0, 50.0), PhaseWindow(1, 5.0, 10.0, 20.0)]
    rates = phase_rates(reply, started_unix, windows, settle_s=1.0)
    check_phases(rates, tolerance=0.05)        # PhaseRateError naming the phase

A phase's window leaves out its first `settle_s` (TCP finding the new rate, the queue
of the phase before draining); only bins wholly inside count. A down phase must carry
at most `DOWN_SHARE` of the rate of the phase before it. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DOWN_SHARE", "PhaseRate", "PhaseRateError", "PhaseWindow", "check_phases",
           "phase_rates", "resume_s"]

DOWN_SHARE = 0.01  # a down phase may carry at most this share of the rate before it


class PhaseRateError(RuntimeError):
    """A phase of a link's schedule that did not deliver its rate."""


@dataclass(frozen=True)
class PhaseWindow:
    """Phase `index` runs from `start_s` to `end_s` after the schedule's start, at
    `rate_mbit` (payload; None: down)."""

    index: int
    start_s: float
    end_s: float
    rate_mbit: float | None


@dataclass(frozen=True)
class PhaseRate:
    """A phase as measured: `rate_mbit_achieved` over `measured_s` seconds of it."""

    index: int
    start_s: float
    end_s: float
    rate_mbit_expected: float | None
    rate_mbit_achieved: float
    measured_s: float

    def to_dict(self) -> dict:
        return dict(vars(self))


def _bin_times(reply: dict, started_unix: float) -> list[tuple[float, float, int]]:
    """(start, end, bytes) of every bin, in seconds after the schedule's start."""
    t0, b = reply["t0_unix"] - started_unix, reply["bin_s"]
    return [(t0 + k * b, t0 + (k + 1) * b, n) for k, n in enumerate(reply["bytes"])]


def phase_rates(reply: dict, started_unix: float, windows: list[PhaseWindow],
                settle_s: float = 1.0) -> list[PhaseRate]:
    """The rate each phase delivered: the bytes of the bins wholly inside
    [start + settle_s, end), over their time (bench.net.probe.stream's `reply`;
    `started_unix`: the schedule's t = 0 on the same clock). A phase with no whole bin
    inside its window is left out."""
    bins = _bin_times(reply, started_unix)
    out = []
    for w in windows:
        inside = [(a, z, n) for a, z, n in bins if a >= w.start_s + settle_s and z <= w.end_s]
        if not inside:
            continue
        seconds = sum(z - a for a, z, _ in inside)
        rate = sum(n for *_, n in inside) * 8 / seconds / 1e6
        out.append(PhaseRate(w.index, w.start_s, w.end_s, w.rate_mbit, rate, seconds))
    return out


def check_phases(rates: list[PhaseRate], tolerance: float) -> None:
    """Raise PhaseRateError naming each phase off its rate by more than `tolerance`
    (a share), or, down, carrying more than DOWN_SHARE of the phase before it."""
    bad = []
    before = None
    for r in rates:
        if r.rate_mbit_expected is None:
            limit = DOWN_SHARE * (before or 0.0)
            if r.rate_mbit_achieved > limit:
                bad.append(f"phase {r.index} ({r.start_s:g}-{r.end_s:g} s, down) carried "
                           f"{r.rate_mbit_achieved:.3f} Mbit/s, expected at most {limit:.3f}")
        elif abs(r.rate_mbit_achieved / r.rate_mbit_expected - 1) > tolerance:
            bad.append(f"phase {r.index} ({r.start_s:g}-{r.end_s:g} s) carried "
                       f"{r.rate_mbit_achieved:.2f} Mbit/s, expected {r.rate_mbit_expected:g} "
                       f"+- {tolerance:.0%}")
        before = r.rate_mbit_expected if r.rate_mbit_expected is not None else before
    if bad:
        raise PhaseRateError("; ".join(bad))


def resume_s(reply: dict, started_unix: float, up_at_s: float, min_bytes: int = 1) -> float | None:
    """Seconds from `up_at_s` (a link coming back) to the first bin at or after it that
    carries at least `min_bytes`; None when none does. The time an outage cost beyond
    its own length (TCP's retransmission back-off)."""
    for a, _, n in _bin_times(reply, started_unix):
        if a >= up_at_s and n >= min_bytes:
            return a - up_at_s
    return None
