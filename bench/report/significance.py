"""Confidence intervals of a held-out loss gap over seeds, and the verdict words they give.

    iv = gap_interval({1: 3.03, 2: 3.05}, {1: 3.00, 2: 3.01}, scale=3.005)  # % of scale
    iv.lo, iv.hi, iv.method                 # 95% interval of the mean gap, 'paired'
    noninferior(iv)                         # 'within 1%' | 'beyond 1%' | 'cannot tell ...'
    equivalent(iv)                          # the two-sided words, for two compressed modes

Seeds that both series ran are paired (one-sample Student t on the per-seed differences:
the same seed gives every mode the same initial weights and data order); series without
two common seeds fall back to Welch's t (Welch-Satterthwaite degrees of freedom).
`t_quantile` is Student's t quantile for any real degrees of freedom, computed here
because scipy is not a dependency of the suite. Why paired, and what each verdict word
means exactly: docs/convergence.md, "Verdicts with their significance".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["LEVEL", "Interval", "t_cdf", "t_quantile", "mean_half_width", "paired_interval",
           "welch_interval", "gap_interval", "noninferior", "equivalent"]

LEVEL = 0.95  # two-sided confidence of every interval the reports print


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified
    Lentz); converges fast for x < (a + 1) / (a + b + 2)."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function, for 0 <= x <= 1."""
    if x <= 0.0 or x >= 1.0:
        return 0.0 if x <= 0.0 else 1.0
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` > 0 degrees of freedom."""
    if not df > 0:
        raise ValueError(f"t_cdf: df must be > 0, got {df}")
    tail = 0.5 * _betainc(df / 2, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p, by bisection on t_cdf to 1e-12 (t_quantile(0.975, 2)
    = 4.3027)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"t_quantile: p must be in (0, 1), got {p}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, 2.0 * hi
    while hi - lo > 1e-12 * max(1.0, hi):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
    return 0.5 * (lo + hi)


@dataclass(frozen=True)
class Interval:
    """A gap's estimate and its LEVEL confidence interval, in percent of a scale; lo and
    hi are NaN when there is no spread to build one from (fewer than two seeds)."""

    estimate: float
    lo: float
    hi: float
    n: int  # seeds behind it: pairs (paired), the smaller side (welch)
    method: str  # paired | welch | none
    df: float

    @property
    def known(self) -> bool:
        return not (math.isnan(self.lo) or math.isnan(self.hi))

    def text(self) -> str:
        """'+0.67% [-0.16, +1.49]' (95%, paired, 3 seeds is said by the caller)."""
        if math.isnan(self.estimate):
            return "-"
        own = f"{self.estimate:+.2f}%"
        return f"{own} [{self.lo:+.2f}, {self.hi:+.2f}]" if self.known else own


def _mean(v: list[float]) -> float:
    return sum(v) / len(v)


def _var(v: list[float]) -> float:
    m = _mean(v)
    return sum((x - m) ** 2 for x in v) / (len(v) - 1)


def mean_half_width(values: list[float], level: float = LEVEL) -> float:
    """Half the width of Student's t interval of the mean of `values` (two or more), on
    len(values) - 1 degrees of freedom."""
    n = len(values)
    return t_quantile(0.5 + level / 2, n - 1) * math.sqrt(_var(values) / n)


def paired_interval(diffs: list[float], scale: float, level: float = LEVEL) -> Interval:
    """The mean of per-seed differences over `scale`, in percent, with Student's t
    interval on len(diffs) - 1 degrees of freedom."""
    n = len(diffs)
    est = 100.0 * _mean(diffs) / scale if n else math.nan
    if n < 2:
        return Interval(est, math.nan, math.nan, n, "none", math.nan)
    half = mean_half_width(diffs, level)
    return Interval(est, est - 100.0 * half / scale, est + 100.0 * half / scale, n, "paired",
                    float(n - 1))


def welch_interval(mine: list[float], ref: list[float], scale: float,
                   level: float = LEVEL) -> Interval:
    """mean(mine) - mean(ref) over `scale`, in percent, with Welch's interval (unequal
    variances, Welch-Satterthwaite degrees of freedom)."""
    est = 100.0 * (_mean(mine) - _mean(ref)) / scale if mine and ref else math.nan
    n = min(len(mine), len(ref))
    if n < 2:
        return Interval(est, math.nan, math.nan, n, "none", math.nan)
    va, vb = _var(mine) / len(mine), _var(ref) / len(ref)
    se2 = va + vb
    if se2 == 0.0:  # both sides without spread: the difference is exact
        return Interval(est, est, est, n, "welch", math.inf)
    df = se2 ** 2 / (va ** 2 / (len(mine) - 1) + vb ** 2 / (len(ref) - 1))
    half = 100.0 * t_quantile(0.5 + level / 2, df) * math.sqrt(se2) / scale
    return Interval(est, est - half, est + half, n, "welch", df)


def gap_interval(mine: dict[int, float], ref: dict[int, float], scale: float,
                 level: float = LEVEL) -> Interval:
    """mine - ref (final held-out loss per seed) in percent of `scale`: paired on the
    seeds both ran when they share two or more, else Welch's over all of each."""
    common = sorted(set(mine) & set(ref))
    values = [*mine.values(), *ref.values()]
    if not values or not math.isfinite(scale) or any(not math.isfinite(v) for v in values):
        return Interval(math.nan, math.nan, math.nan, len(common), "none", math.nan)
    if len(common) >= 2:
        return paired_interval([mine[s] - ref[s] for s in common], scale, level)
    return welch_interval(list(mine.values()), list(ref.values()), scale, level)


def _cannot(iv: Interval) -> str:
    return f"cannot tell with {iv.n} seed{'s' if iv.n != 1 else ''}"


def noninferior(iv: Interval, tolerance_pct: float = 1.0) -> str:
    """A compressed mode against fp32: 'within 1%' when the interval's upper end is at most
    +tolerance (no worse than that, at the interval's confidence; better than fp32
    included), 'beyond 1%' when its lower end is above it, else 'cannot tell with N
    seeds'."""
    if iv.known and iv.hi <= tolerance_pct:
        return f"within {tolerance_pct:g}%"
    if iv.known and iv.lo > tolerance_pct:
        return f"beyond {tolerance_pct:g}%"
    return _cannot(iv)


def equivalent(iv: Interval, tolerance_pct: float = 1.0) -> str:
    """Two compressed modes against each other (the gap of the first over the second):
    'within 1%' when the whole interval lies inside +-tolerance, 'beyond 1%' when it lies
    wholly outside, on one side, else 'cannot tell with N seeds'."""
    if iv.known and -tolerance_pct <= iv.lo and iv.hi <= tolerance_pct:
        return f"within {tolerance_pct:g}%"
    if iv.known and (iv.lo > tolerance_pct or iv.hi < -tolerance_pct):
        return f"beyond {tolerance_pct:g}%"
    return _cannot(iv)
