"""bench.micro.timing: warm-up rounds left out, phases on every clock, the statistics of
what was timed (on fake clocks, so every figure is exact)."""

from __future__ import annotations

import statistics

import pytest

from bench.micro import timing
from bench.micro.timing import Samples, Timer, time_call


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clocks(monkeypatch):
    wall, cpu = FakeClock(), FakeClock()
    monkeypatch.setitem(timing.CLOCKS, "wall", wall)
    monkeypatch.setitem(timing.CLOCKS, "cpu", cpu)
    return wall, cpu


def test_warmup_rounds_are_left_out_and_each_phase_keeps_its_own_times(clocks):
    wall, cpu = clocks
    timer = Timer("wall", "cpu")
    seen = []
    for i in timer.rounds(repeats=3, warmup=2):
        seen.append(i)
        with timer.phase("forward"):
            wall.now += 10.0 + i  # 10, 11 in warm-up; 12, 13, 14 timed
            cpu.now += 1.0
        wall.now += 100.0  # between phases: not timed
        with timer.phase("backward"):
            wall.now += 2.0
            cpu.now += 0.5 * i
    assert seen == [0, 1, 2, 3, 4]
    assert timer.samples("forward").seconds == (12.0, 13.0, 14.0)  # the first clock
    assert timer.samples("forward", "cpu").seconds == (1.0, 1.0, 1.0)
    assert timer.samples("backward", "wall").seconds == (2.0, 2.0, 2.0)
    assert timer.samples("backward", "cpu").seconds == (1.0, 1.5, 2.0)


def test_a_phase_that_raises_is_not_kept_and_phases_need_rounds(clocks):
    wall, _ = clocks
    timer = Timer()
    with pytest.raises(RuntimeError, match=r"Timer.phase\('call'\): expected inside"):
        timer.phase("call")
    for i in timer.rounds(repeats=2, warmup=0):
        try:
            with timer.phase("call"):
                wall.now += 1.0 + i
                if i == 0:
                    raise ZeroDivisionError
        except ZeroDivisionError:
            pass
    assert timer.samples("call").seconds == (2.0,)
    with pytest.raises(RuntimeError, match="expected inside"):
        timer.phase("call")  # the rounds are over
    with pytest.raises(KeyError, match=r"phase 'other' on clock 'wall'; timed phases \['call'\]"):
        timer.samples("other")


def test_timer_and_rounds_refuse_what_they_cannot_time():
    with pytest.raises(ValueError, match=r"distinct clocks among \['cpu', 'wall'\], got "
                                         r"\['gpu'\]"):
        Timer("gpu")
    with pytest.raises(ValueError, match="distinct clocks"):
        Timer("wall", "wall")
    with pytest.raises(ValueError, match="repeats >= 1 and warmup >= 0, got repeats=0"):
        list(Timer().rounds(0))
    with pytest.raises(ValueError, match="warmup=-1"):
        list(Timer().rounds(1, warmup=-1))


def test_time_call_warms_up_then_times_each_call(clocks):
    wall, cpu = clocks
    calls = []

    def fn():
        calls.append(1)
        cpu.now += len(calls)

    samples = time_call(fn, repeats=4, clock="cpu")
    assert len(calls) == 5  # one untimed call first
    assert samples.seconds == (2.0, 3.0, 4.0, 5.0)
    assert samples.median_s == 3.5
    calls.clear()
    assert time_call(fn, repeats=2, warmup=0, clock="cpu").seconds == (1.0, 2.0)


def test_samples_statistics():
    s = Samples(tuple(float(v) for v in (7, 1, 3, 9, 5, 11, 2, 4, 6, 8, 10)))  # 1..11
    assert s.median_s == 6.0
    # rank floor(q * n) of the sorted samples: 0.1 of 11 -> the 2nd, 0.9 -> the 10th
    assert (s.quantile_s(0.1), s.quantile_s(0.9)) == (2.0, 10.0)
    assert (s.quantile_s(0.0), s.quantile_s(1.0)) == (1.0, 11.0)
    q = statistics.quantiles(s.seconds, n=4)
    assert s.iqr_s == q[2] - q[0] == 6.0
    with pytest.raises(ValueError, match=r"0 <= q <= 1, got 1.5"):
        s.quantile_s(1.5)
    with pytest.raises(ValueError, match="two samples or more, got 1"):
        _ = Samples((1.0,)).iqr_s
    with pytest.raises(ValueError, match="at least one timed round"):
        Samples(())
