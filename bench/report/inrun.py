"""Time to fp32's quality measured within one run: cells that ran on a shaped link (or a
link that changes) with the held-out loss evaluated after every epoch give the loss curve
and the wall clock of the same steps, beside the convergence report's joined estimate
(losses of the unshaped convergence cells x step times of the throughput cells).

    curves = inrun_curves(load_results(["results/convergence-inrun"]))  # + elapsed_s
    ttq = inrun_time_to_quality(curves)           # series x scenario of those cells
    both = beside_joined(ttq, conv.ttq, conv.schedule_ttq)   # with the joined estimate

A cell's elapsed time after s steps is the sum of its first s steps' wall time (the
slowest rank's step_time_s: training time, no evaluation or start-up, as the joined
estimate counts it). The target is fp32's final held-out loss of the same run sweep,
scenario and layout (mean over its seeds) plus TOLERANCE_PCT; docs/convergence-ladders.md,
"Time to quality within one run".
"""

from __future__ import annotations

import math

import pandas as pd

from bench.report.quality import LAYOUT, TOLERANCE_PCT, eval_curves
from bench.report.timetoquality import format_seconds

__all__ = ["inrun_curves", "inrun_time_to_quality", "beside_joined", "inrun_rows"]


def _elapsed_at(train: pd.DataFrame, steps: pd.Series) -> list[float]:
    """One cell's training time (s) after each of `steps` steps: the wall time of the
    steps before, each the slowest rank's."""
    wall = pd.to_numeric(train["step_time_s"]).groupby(train["step"]).max()
    return [float(wall[wall.index < s].sum()) for s in steps]


def inrun_curves(metrics: pd.DataFrame) -> pd.DataFrame:
    """quality.eval_curves of the cells with `scenario` and `elapsed_s` (training time
    when the evaluation ran: after `step` steps) on every row."""
    curves = eval_curves(metrics)
    if curves.empty:
        return curves.assign(scenario=[], elapsed_s=[])
    train = metrics[metrics["kind"] == "train"]
    elapsed = pd.Series(math.nan, index=curves.index)
    for cell_dir, rows in curves.groupby("cell_dir", sort=False):
        elapsed[rows.index] = _elapsed_at(train[train["cell_dir"] == cell_dir], rows["step"])
    scenario = metrics.groupby("cell_dir")["scenario"].first()
    return curves.assign(scenario=curves["cell_dir"].map(scenario), elapsed_s=elapsed)


def inrun_time_to_quality(curves: pd.DataFrame,
                          tolerance_pct: float = TOLERANCE_PCT) -> pd.DataFrame:
    """Per series and scenario of inrun_curves: `target` (fp32's final held-out loss of
    the same scenario and layout, mean over seeds, x (1 + tolerance)), `reached_step` (the
    first evaluation whose mean over seeds is at or below it), `time_s` (mean over seeds
    of the elapsed time there), `n_seeds`, `status` (reached | not reached | no fp32
    reference)."""
    columns = ["series", "mode", "scenario", *LAYOUT, "n_seeds", "target", "reached_step",
               "time_s", "status"]
    if curves.empty:
        return pd.DataFrame(columns=columns)
    keys = ["scenario", "series"]
    mean = curves.groupby([*keys, "step"], sort=False).agg(
        loss=("eval_loss", "mean"), elapsed_s=("elapsed_s", "mean"),
        n_seeds=("seed", "nunique"), mode=("mode", "first"),
        **{k: (k, "first") for k in LAYOUT}).reset_index()
    final = mean.sort_values("step").groupby(keys, sort=False).last().reset_index()
    fp32 = final[final["mode"] == "fp32"].set_index(["scenario", *LAYOUT])["loss"]
    rows = []
    for _, f in final.iterrows():
        ref = fp32.get(tuple(f[k] for k in ["scenario", *LAYOUT]), math.nan)
        target = ref * (1 + tolerance_pct / 100)
        mine = mean[(mean["scenario"] == f["scenario"]) & (mean["series"] == f["series"])]
        hit = mine[mine["loss"] <= target].sort_values("step")
        status = ("no fp32 reference" if math.isnan(target) else
                  "reached" if not hit.empty else "not reached")
        rows.append({"series": f["series"], "mode": f["mode"], "scenario": f["scenario"],
                     **{k: f[k] for k in LAYOUT}, "n_seeds": int(f["n_seeds"]),
                     "target": target,
                     "reached_step": int(hit["step"].iloc[0]) if not hit.empty else None,
                     "time_s": float(hit["elapsed_s"].iloc[0]) if not hit.empty else math.nan,
                     "status": status})
    return pd.DataFrame(rows, columns=columns)


def beside_joined(inrun: pd.DataFrame, joined: pd.DataFrame,
                  schedule: pd.DataFrame) -> pd.DataFrame:
    """`inrun` with the joined estimate of the same series and scenario: `joined_time_s`,
    `joined_step`, `joined_status` from the convergence report's time_to_quality (a fixed
    link) or time_to_quality_under_schedule (a link that changes); 'no joined estimate'
    when neither has the pair."""
    est = pd.concat([f[["series", "scenario", "time_s", "reached_step", "status"]]
                     for f in (joined, schedule) if not f.empty] or
                    [pd.DataFrame(columns=["series", "scenario", "time_s", "reached_step",
                                           "status"])])
    est = est.drop_duplicates(["series", "scenario"]).rename(columns={
        "time_s": "joined_time_s", "reached_step": "joined_step", "status": "joined_status"})
    out = inrun.merge(est, on=["series", "scenario"], how="left")
    out["joined_status"] = out["joined_status"].fillna("no joined estimate")
    return out


def _time(status: str, time_s: float, step) -> str:
    if status != "reached":
        return status
    return f"{format_seconds(time_s)} (step {int(step)})"


def inrun_rows(both: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """beside_joined as (headers, rows): the in-run time and step, the joined estimate's,
    and the in-run time over the joined one."""
    headers = ["mode", "link", "seeds", "target (fp32 in run +1%)", "in one run",
               "joined estimate", "in run / joined"]
    rows = []
    for _, r in both.iterrows():
        ratio = (r["time_s"] / r["joined_time_s"] if r["status"] == "reached"
                 and r["joined_status"] == "reached" and r["joined_time_s"] > 0 else math.nan)
        rows.append([r["series"], r["scenario"], str(r["n_seeds"]),
                     "-" if math.isnan(r["target"]) else f"{r['target']:.4f}",
                     _time(r["status"], r["time_s"], r["reached_step"]),
                     _time(r["joined_status"], r["joined_time_s"], r["joined_step"]),
                     "-" if math.isnan(ratio) else f"{ratio:.2f}"])
    return headers, rows
