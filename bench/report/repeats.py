"""Repeated cells as one row: the median over repeats with its min..max band, and whether
the link or this machine's compute limited the cell. Made from result files only.

    summary = summarize(["results/paper"])
    rows = over_repeats(summary, link_shares(load_metas(["results/paper"]), summary))

A sweep's `repeats` runs every cell several times, interleaved (bench.harness.sweep); the
summary keeps one row per measurement (`repeat` 0, 1, ...) and pairs each repeat's
speed-up with the reference measured in the same pass. Here the rows that differ only by
`repeat` (and their cell names) become one: for each number of REPEATED its median over
repeats, and `<number>_lo`, `<number>_hi` the smallest and largest (with three repeats a
band of +-1 sd would claim a precision the data does not have), `n_repeats`.

Compute-bound: `link_share` is the measured samples/s over the link's schedule bound
(bench.report.linkbound: what the shaped links allow when compute takes no time), median
over repeats. Below COMPUTE_BOUND_SHARE the link could carry at least twice what the cell
did: its throughput says how fast this machine computes, not what the link costs, and
`compute_bound` marks it (NaN share, unshaped links: also compute-bound). Speed-ups
between compute-bound cells are this machine's noise and compute, not compression.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from bench.report.linkbound import cell_bound

__all__ = ["REPEATED", "COMPUTE_BOUND_SHARE", "link_shares", "over_repeats"]

# the numbers a repeated row shows as median and band
REPEATED = ("throughput_samples_s", "throughput_e2e_samples_s", "step_time_s",
            "speedup_vs_fp32", "speedup_e2e_vs_fp32", "speedup_vs_bf16",
            "speedup_e2e_vs_bf16", "speedup_vs_unshaped_fp32", "bytes_per_step",
            "final_eval_loss", "link_share")
COMPUTE_BOUND_SHARE = 0.5

# what names a repeated row: every identity column of the summary but the cell's name
# and its repeat
_IDENTITY = ("sweep", "scenario", "mode", "label", "fw_bits", "bw_bits", "grad_mode",
             "stages", "replicas", "seed", "variant", "dropout", "dropout_masks", "launcher",
             "shaped", "rate_mbit", "delay_ms")


def link_shares(metas: list[dict], summary: pd.DataFrame) -> pd.Series:
    """Per cell name: measured samples/s over its links' schedule bound (NaN for a cell
    without a shaped used link, or not finished)."""
    by_cell = summary.set_index("cell")
    shares = {}
    for meta in metas:
        name = meta["cell"]["name"]
        if meta["status"] != "ok" or name not in by_cell.index:
            continue
        row = by_cell.loc[name]
        measured = float(row["throughput_samples_s"])
        if not np.isfinite(measured):
            continue
        bound = cell_bound(meta, measured * float(row["step_time_s"]), measured)
        if bound is not None:
            shares[name] = measured / bound.schedule_samples_s
    return pd.Series(shares, dtype=float, name="link_share")


def over_repeats(summary: pd.DataFrame, shares: pd.Series) -> pd.DataFrame:
    """One row per finished cell and its repeats, in the summary's order: the identity,
    `cells` (their names, comma-separated), `n_repeats`, each of REPEATED as median,
    `_lo`, `_hi`, and `compute_bound`."""
    ok = summary[summary["status"] == "ok"].copy()
    ok["link_share"] = ok["cell"].map(shares).astype(float)
    columns = [*_IDENTITY, "cells", "n_repeats",
               *(f"{n}{s}" for n in REPEATED for s in ("", "_lo", "_hi")), "compute_bound"]
    if ok.empty:
        return pd.DataFrame(columns=columns)
    ok["_order"] = range(len(ok))
    rows = []
    for _, group in ok.groupby(list(_IDENTITY), dropna=False, sort=False):
        group = group.sort_values("repeat")
        row = {k: group[k].iloc[0] for k in _IDENTITY}
        row["cells"] = ", ".join(group["cell"])
        row["n_repeats"] = len(group)
        row["_order"] = int(group["_order"].min())
        for name in REPEATED:
            values = pd.to_numeric(group[name], errors="coerce").dropna()
            row[name] = float(values.median()) if len(values) else np.nan
            row[f"{name}_lo"] = float(values.min()) if len(values) else np.nan
            row[f"{name}_hi"] = float(values.max()) if len(values) else np.nan
        share = row["link_share"]
        row["compute_bound"] = bool(np.isnan(share) or share < COMPUTE_BOUND_SHARE)
        rows.append(row)
    table = pd.DataFrame(rows).sort_values("_order", kind="stable")
    return table.drop(columns="_order").reset_index(drop=True)[columns]
