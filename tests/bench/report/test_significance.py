"""Student's t quantile against published table values and closed forms, the gap's
intervals worked out by hand (paired and Welch's), and the verdict words at their edges."""

from __future__ import annotations

import math

import pytest

from bench.report.significance import (
    Interval,
    equivalent,
    gap_interval,
    noninferior,
    paired_interval,
    t_cdf,
    t_quantile,
    welch_interval,
)


@pytest.mark.parametrize(("p", "df", "expected"), [
    (0.975, 1, 12.706204736174707),   # tan(0.475 pi)
    (0.975, 2, 4.302652729749464),    # 0.95 / sqrt(2 * 0.975 * 0.025)
    (0.975, 4, 2.7764451051977987),   # tables of Student's t
    (0.975, 10, 2.2281388519649385),
    (0.95, 3, 2.3533634348018264),
])
def test_t_quantile_matches_the_tables(p, df, expected):
    assert t_quantile(p, df) == pytest.approx(expected, rel=1e-9)


def test_t_quantile_tends_to_the_normal_one():
    # 1.959964 + (z^3 + z) / (4 df) at df = 1e7: the normal quantile within 2.5e-7
    assert t_quantile(0.975, 1e7) == pytest.approx(1.959963984540054, abs=3e-7)


@pytest.mark.parametrize("p", [0.6, 0.9, 0.99, 0.999])
def test_t_quantile_matches_the_closed_forms_of_one_and_two_degrees(p):
    assert t_quantile(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-9)
    assert t_quantile(p, 2) == pytest.approx((2 * p - 1) / math.sqrt(2 * p * (1 - p)),
                                             rel=1e-9)


def test_t_quantile_is_symmetric_and_inverts_the_cdf_at_fractional_degrees():
    assert t_quantile(0.025, 3.5) == pytest.approx(-t_quantile(0.975, 3.5))
    assert t_cdf(t_quantile(0.975, 2.5), 2.5) == pytest.approx(0.975, abs=1e-12)
    # between the quantiles of its integer neighbours
    assert t_quantile(0.975, 3) > t_quantile(0.975, 3.5) > t_quantile(0.975, 4)


def test_t_functions_name_the_bad_argument():
    with pytest.raises(ValueError, match="t_quantile: p must be in \\(0, 1\\), got 1.0"):
        t_quantile(1.0, 3)
    with pytest.raises(ValueError, match="t_cdf: df must be > 0, got 0"):
        t_cdf(1.0, 0)


def test_paired_interval_by_hand():
    # differences 0.01, 0.03, 0.02: mean 0.02, sd 0.01, se 0.01 / sqrt(3); t(0.975, 2)
    # = 4.302653: half width 0.024841, over a scale of 3.0 in percent
    iv = paired_interval([0.01, 0.03, 0.02], 3.0)
    assert (iv.estimate, iv.lo, iv.hi) == pytest.approx((0.666667, -0.161379, 1.494713),
                                                        abs=1e-6)
    assert (iv.n, iv.method, iv.df) == (3, "paired", 2.0)
    assert iv.text() == "+0.67% [-0.16, +1.49]"


def test_welch_interval_by_hand():
    # equal variances (0.01) and sizes (3): Welch-Satterthwaite gives 2 (n - 1) = 4
    # degrees; se = sqrt(0.02 / 3) = 0.0816497, t(0.975, 4) = 2.776445: half width
    # 0.226696: 7.312768% of a scale of 3.1
    iv = welch_interval([3.1, 3.2, 3.3], [3.0, 3.1, 3.2], 3.1)
    assert iv.df == pytest.approx(4.0)
    assert (iv.estimate, iv.lo, iv.hi) == pytest.approx((3.225806, -4.086961, 10.538574),
                                                        abs=1e-5)


def test_seeds_both_ran_are_paired_and_others_fall_back_to_welch():
    paired = gap_interval({1: 3.01, 2: 3.03, 3: 3.0}, {1: 3.0, 2: 3.0, 3: 2.98}, 3.0)
    assert paired.method == "paired" and paired.n == 3
    welch = gap_interval({1: 3.1, 2: 3.2, 3: 3.3}, {4: 3.0, 5: 3.1, 6: 3.2}, 3.1)
    assert welch.method == "welch" and welch.df == pytest.approx(4.0)
    one = gap_interval({1: 3.05}, {1: 3.0}, 3.0)
    assert one.method == "none" and one.estimate == pytest.approx(5 / 3)
    assert not one.known and one.text() == "+1.67%"
    assert not gap_interval({1: math.nan, 2: 3.0}, {1: 3.0, 2: 3.0}, 3.0).known


def _iv(lo, hi, n=3):
    return Interval((lo + hi) / 2, lo, hi, n, "paired", n - 1.0)


@pytest.mark.parametrize(("iv", "against_fp32", "two_modes"), [
    (_iv(0.2, 1.0), "within 1%", "within 1%"),       # upper end on the line: within
    (_iv(-3.0, -0.5), "within 1%", "cannot tell with 3 seeds"),  # better than fp32
    (_iv(-3.0, -1.5), "within 1%", "beyond 1%"),     # the first is lower by over 1%
    (_iv(0.5, 1.4), "cannot tell with 3 seeds", "cannot tell with 3 seeds"),
    (_iv(1.01, 2.0), "beyond 1%", "beyond 1%"),
    (Interval(1.5, math.nan, math.nan, 1, "none", math.nan),
     "cannot tell with 1 seed", "cannot tell with 1 seed"),
])
def test_verdict_words(iv, against_fp32, two_modes):
    assert noninferior(iv) == against_fp32
    assert equivalent(iv) == two_modes
