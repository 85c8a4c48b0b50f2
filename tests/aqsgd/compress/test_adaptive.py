"""The width chooser of aqsgd.compress.adaptive: rates -> widths, the hysteresis, the hold."""

import pytest

from aqsgd.compress import adaptive
from aqsgd.compress.adaptive import WidthChooser, ladder, transfer_s, widest_fitting

KB = 1000


def nbytes(bits: int) -> int:
    return 16 * KB * bits  # a message of 16 kB per bit of width


def test_ladders_are_capped_at_the_top_width_and_refuse_an_empty_one():
    assert ladder("forward", 8) == (2, 3, 4, 8)
    assert ladder("forward", 4) == (2, 3, 4)
    assert ladder("backward", 8) == (4, 6, 8)
    with pytest.raises(ValueError, match="at least 4"):
        ladder("backward", 3)


def test_transfer_is_the_performance_models_bytes_over_rate():
    assert transfer_s(1_000_000, 125_000) == 8.0  # 1 MB over 1 Mbit/s


@pytest.mark.parametrize(("rate_bytes_s", "expected"), [
    (1e9, 8),  # a fast link carries every width under the budget
    (16 * KB * 4 / 0.1, 4),  # 4 bits take exactly the budget
    (16 * KB * 3 / 0.1, 3),
    (1.0, 2),  # nothing fits: the narrowest
])
def test_widest_fitting_takes_the_most_bits_the_link_hides(rate_bytes_s, expected):
    assert widest_fitting((2, 3, 4, 8), nbytes, rate_bytes_s, budget_s=0.1) == expected


def test_chooser_keeps_its_start_until_it_has_a_rate_and_a_budget():
    c = WidthChooser((2, 3, 4, 8), nbytes, start=8)
    assert c.update(0, 0.0, 0.1) == 8  # nothing sent yet
    assert c.update(100 * KB, 1.0, float("inf")) == 8  # no compute measured yet
    assert c.state(0.1).rate_mbit == pytest.approx(0.8)


def test_chooser_falls_to_fewer_bits_on_a_slow_link_and_climbs_back_on_a_fast_one():
    c = WidthChooser((2, 3, 4, 8), nbytes, start=8)
    # 1 MB/s: 8 bits take 0.128 s, 3 bits 0.048 s; budget 0.05 s -> 3 bits
    assert c.update(1_000_000, 1.0, 0.05) == 3
    fast = [c.update(100_000_000, 1.0, 0.05) for _ in range(adaptive.HOLD_STEPS + 1)]
    assert fast[-1] == 8  # back up once the hold has passed
    assert fast[0] == 3  # not in the step right after the fall


def test_hysteresis_keeps_a_width_that_misses_the_budget_by_less_than_its_band():
    c = WidthChooser((2, 3, 4, 8), nbytes, start=4)
    budget = 0.1
    rate = 16 * KB * 4 / (budget * (1 + adaptive.HYSTERESIS / 2))  # 4 bits 10% over
    for _ in range(5):
        assert c.update(int(rate), 1.0, budget) == 4
    # and does not climb to a width that fits by less than the band
    c = WidthChooser((2, 3, 4, 8), nbytes, start=3)
    rate = 16 * KB * 4 / (budget * (1 - adaptive.HYSTERESIS / 2))  # 4 bits 10% under
    for _ in range(5):
        assert c.update(int(rate), 1.0, budget) == 3


def test_a_slower_step_replaces_the_rate_a_faster_one_is_averaged():
    c = WidthChooser((2, 3, 4, 8), nbytes, start=8)
    c.observe(1000, 1.0)
    c.observe(3000, 1.0)
    assert c.rate_bytes_s == pytest.approx(1000 + adaptive.SMOOTHING * 2000)
    c.observe(10, 1.0)
    assert c.rate_bytes_s == 10


def test_a_width_that_fails_right_after_its_probe_is_retried_later_each_time():
    """A link whose sends look fast while they fit in the socket's buffer and slow once
    they do not: the chooser probes up, falls back, and waits twice as long each time."""
    c = WidthChooser((2, 8), nbytes, start=2)
    budget, probes = 0.1, []
    for step in range(60):
        bits = c.bits
        rate = 1e9 if bits == 2 else 16 * KB * 2 / budget  # 8 bits never fits
        c.update(int(rate), 1.0, budget)
        if bits == 2 and c.bits == 8:
            probes.append(step)
    gaps = [b - a for a, b in zip(probes, probes[1:], strict=False)]
    assert len(probes) >= 3
    assert all(later > earlier for earlier, later in zip(gaps, gaps[1:], strict=False))


def test_start_must_be_a_width():
    with pytest.raises(ValueError, match="start width 5"):
        WidthChooser((2, 3, 4, 8), nbytes, start=5)
