"""Repeated cells as one row: the median over repeats with its min..max band, and whether
the link or this machine's compute limited the cell. Made from result files only.

    rows = over_repeats(summarize(["results/paper"]))

The rows that differ only by `repeat` (and their cell names) become one: for each number
of REPEATED its median, `<number>_lo` / `<number>_hi` the smallest and largest, and
`n_repeats` (a band of +-1 sd over three repeats would claim a precision the data does
not have). A shaped row whose median `link_share` is below COMPUTE_BOUND_SHARE is
compute-bound. docs/results-schema.md, "Summary" (`repeat`, `compute_bound`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from bench.report.summary import COMPUTE_BOUND_SHARE

__all__ = ["REPEATED", "over_repeats"]

# the numbers a repeated row shows as median and band
REPEATED = ("throughput_samples_s", "throughput_tokens_s", "throughput_e2e_samples_s",
            "step_time_s", "speedup_vs_fp32", "speedup_e2e_vs_fp32", "speedup_vs_bf16",
            "speedup_e2e_vs_bf16", "speedup_vs_unshaped_fp32", "bytes_per_step",
            "final_eval_loss", "comm_compute_ratio", "link_share")

# what names a repeated row: every identity column of the summary but the cell's name
# and its repeat (and its rate: under a schedule each repeat's mean rate differs a little)
_IDENTITY = ("sweep", "scenario", "mode", "label", "fw_bits", "bw_bits", "grad_mode",
             "stages", "replicas", "seed", "variant", "dropout", "dropout_masks", "launcher",
             "shaping", "launcher_label", "shaped", "delay_ms", "eval_windows",
             "throughput_statistic")


def over_repeats(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per finished cell and its repeats, in the summary's order: the identity,
    `cells` (their names, comma-separated), `n_repeats`, each of REPEATED as median,
    `_lo`, `_hi`, `host_limited` (any repeat's links), `status` ("ok") and
    `compute_bound` (from the median link share)."""
    ok = summary[summary["status"] == "ok"].copy()
    columns = [*_IDENTITY, "rate_mbit", "rate_mbit_slowest_phase", "cells", "n_repeats",
               *(f"{n}{s}" for n in REPEATED for s in ("", "_lo", "_hi")), "host_limited",
               "rate_mbit_achieved", "status", "compute_bound"]
    if ok.empty:
        return pd.DataFrame(columns=columns)
    ok["_order"] = range(len(ok))
    rows = []
    for _, group in ok.groupby(list(_IDENTITY), dropna=False, sort=False):
        group = group.sort_values("repeat")
        row = {k: group[k].iloc[0] for k in _IDENTITY}
        for name in ("rate_mbit", "rate_mbit_slowest_phase"):
            row[name] = pd.to_numeric(group[name], errors="coerce").median()
        row["cells"] = ", ".join(group["cell"])
        row["n_repeats"] = len(group)
        row["_order"] = int(group["_order"].min())
        for name in REPEATED:
            values = pd.to_numeric(group[name], errors="coerce").dropna()
            row[name] = float(values.median()) if len(values) else np.nan
            row[f"{name}_lo"] = float(values.min()) if len(values) else np.nan
            row[f"{name}_hi"] = float(values.max()) if len(values) else np.nan
        row["host_limited"] = bool(group["host_limited"].astype(bool).any())
        row["rate_mbit_achieved"] = pd.to_numeric(group["rate_mbit_achieved"],
                                                  errors="coerce").min()
        row["status"] = "ok"
        row["compute_bound"] = bool(row["shaped"]) and bool(
            row["link_share"] < COMPUTE_BOUND_SHARE)
        rows.append(row)
    table = pd.DataFrame(rows).sort_values("_order", kind="stable")
    return table.drop(columns="_order").reset_index(drop=True)[columns]
