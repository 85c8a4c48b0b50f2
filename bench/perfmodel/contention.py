"""The contention term of a CPU profile, fitted from measured cells.

    contention = fit_contention(cells, profile, "13 cells of results/bench-100mbps, load 2-8")
    profile = profile.replace(contention=contention)

A profile times each stage alone on one thread. A cell's ranks compute together on the
profile's `cores`, beside the coding, the transport's threads and the shaping; the
simulation shares the cores among the ranks that compute at once, and what that leaves
out (caches and memory shared, the runtime's threads, Python between actions) makes
every compute longer by a factor that grows with the ranks of the cell:
`factor(n) = 1 + base + per_rank * (n - 1)` (profile.ContentionProfile).

The fit: for each cell (real compute only), the prediction from the profile alone with
its compute and coding times `k` times longer, on a grid of `k`; then the `base` and
`per_rank` whose factor minimises the mean squared relative error of those predictions
over the cells. Cells of one rank count cannot tell `base` from `per_rank`: the fit then
holds `base` at 0 (one rank alone computes as profiled) and fits `per_rank`.
docs/performance-model.md, "Contention", has what it was fitted on and
how well it predicts cells it was not fitted on.
"""

from __future__ import annotations

import numpy as np

from bench.perfmodel.predict import contended, predict
from bench.perfmodel.profile import ContentionProfile, Profile
from bench.perfmodel.validate import MeasuredCell, compute_source, step_workload_of

__all__ = ["FACTOR_GRID", "BASE_GRID", "PER_RANK_GRID", "fit_contention"]

FACTOR_GRID = np.round(np.arange(0.8, 6.001, 0.02), 4)
BASE_GRID = np.round(np.arange(-0.2, 2.001, 0.01), 4)
PER_RANK_GRID = np.round(np.arange(0.0, 1.001, 0.005), 4)


def _curves(cells: list[MeasuredCell], profile: Profile) -> tuple[np.ndarray, np.ndarray]:
    """(ranks per cell, relative error per cell and FACTOR_GRID entry)."""
    plain = profile.replace(contention=None)
    ranks, errors = [], []
    for cell in cells:
        work = step_workload_of(cell, plain)
        ranks.append(work.stages * work.replicas)
        errors.append([predict(contended(work, k), plain, cores=True).step_s / cell.step_s
                       - 1.0 for k in FACTOR_GRID])
    return np.asarray(ranks), np.asarray(errors)


def fit_contention(cells: list[MeasuredCell], profile: Profile,
                   fitted_on: str) -> ContentionProfile:
    """The contention term that best predicts `cells` from `profile` alone (module
    docstring); a ValueError when none of them computes for real or the profile has no
    shared cores."""
    if profile.cores is None:
        raise ValueError(f"profile {profile.name!r}: cores null (a device per rank): the "
                         f"contention term is for CPU profiles, whose ranks share cores")
    real = [c for c in cells if compute_source(c) == "real"]
    if not real:
        raise ValueError("no cell with real compute to fit the contention term on (replayed "
                         "cells wait their times: nothing contends)")
    ranks, errors = _curves(real, profile)
    best = None
    for base in BASE_GRID if len(set(ranks)) > 1 else [0.0]:
        for per_rank in PER_RANK_GRID:
            k = 1.0 + base + per_rank * (ranks - 1)
            if k.min() < FACTOR_GRID[0] or k.max() > FACTOR_GRID[-1]:
                continue
            err = np.array([np.interp(kc, FACTOR_GRID, row) for kc, row in zip(k, errors,
                                                                                strict=True)])
            score = float(np.mean(err ** 2))
            if best is None or score < best[0]:
                best = (score, float(base), float(per_rank))
    assert best is not None, "the grid holds factor 1 (base 0, per_rank 0)"
    return ContentionProfile(best[1], best[2], fitted_on)
