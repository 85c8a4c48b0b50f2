"""Held-out loss against wall-clock time on a given link, and the time each mode needs to
reach fp32's quality on every link of the paper sweep: quality from the convergence
cells (run unshaped), time from the same mode's measured step times in the throughput
cells of that scenario.

    times = step_times(load_results(["results/paper"]))
    timed = timed_bands(bands, facts, times, "100mbps")     # bands with `time_s`
    ttq = time_to_quality(quality, bands, facts, times)     # series x scenario
    dyn = schedule_cells(load_records(["results/dynamic"]))   # cells whose links changed
    sched = time_to_quality_under_schedule(quality, bands, facts, dyn)  # x dynamic scenario

Which throughput cell serves a series, the elapsed time after s steps, time to quality
and its walk under a schedule are defined in docs/convergence.md, "How to read the
report" and "Time to quality: definitions".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from bench.report.quality import TOLERANCE_PCT
from bench.report.timeline import (
    has_schedule,
    phase_spans,
    phase_step_times,
    phase_table,
    phases_visited,
    time_under_schedule,
)
from bench.report.timeline import step_times as schedule_step_times
from bench.results.files import load_results
from bench.results.record import CellRecord

__all__ = ["format_seconds", "step_times", "series_facts", "elapsed_s", "match_step_time",
           "timed_bands", "time_to_quality", "ScheduleCell", "schedule_cells",
           "time_to_quality_under_schedule"]


def format_seconds(value: float) -> str:
    """'0.42 s', '37.5 s', '412 s', '1.9 h': enough digits to compare modes."""
    if value < 10:
        return f"{value:.2f} s"
    if value < 100:
        return f"{value:.1f} s"
    return f"{value:.0f} s" if value < 3600 else f"{value / 3600:.1f} h"


def _num(series: pd.Series) -> pd.Series:
    return pd.to_numeric(series, errors="coerce")


def _per_cell(metrics: pd.DataFrame) -> pd.DataFrame:
    """Per cell_dir: samples per step (stage-0 ranks summed, median over steps) and the
    number of train steps the worker flagged warm-up."""
    train = metrics[metrics["kind"] == "train"]
    rows = []
    for cell_dir, cell in train.groupby("cell_dir", sort=True):
        first = cell[_num(cell["stage"]) == 0]
        samples = _num(first["samples"]).groupby(first["step"]).sum()
        warm = cell[cell["warmup"].astype(bool)]["step"].nunique()
        rows.append({"cell_dir": cell_dir, "samples_per_step": float(samples.median()),
                     "warmup_steps": int(warm)})
    return pd.DataFrame(rows, columns=["cell_dir", "samples_per_step", "warmup_steps"])


def step_times(metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per throughput cell (bench.results.files.load_results of its sweep):
    identity, `samples_per_step`, `warm_step_s` (NaN without warm-up steps),
    `steady_step_s`, `warmup_steps`, `cell` (its name)."""
    train = metrics[metrics["kind"] == "train"]
    per_cell = _per_cell(metrics).set_index("cell_dir")
    rows = []
    for cell_dir, cell in train.groupby("cell_dir", sort=True):
        wall = _num(cell["step_time_s"]).groupby(cell["step"]).max()
        warm_steps = cell.groupby("step")["warmup"].agg(lambda v: bool(v.astype(bool).any()))
        head = cell.iloc[0]
        rows.append({"cell_dir": cell_dir, "cell": head["cell"], "scenario": head["scenario"],
                     "rate_mbit": head["rate_mbit"], "shaped": bool(head["shaped"]),
                     "host_limited": bool(head["host_limited"]), "label": head["label"],
                     "mode": head["mode"], "stages": int(head["stages"]),
                     "replicas": int(head["replicas"]),
                     "samples_per_step": per_cell.loc[cell_dir, "samples_per_step"],
                     "warmup_steps": per_cell.loc[cell_dir, "warmup_steps"],
                     "warm_step_s": float(wall[warm_steps].median()) if warm_steps.any()
                     else math.nan,
                     "steady_step_s": float(wall[~warm_steps].median())})
    return pd.DataFrame(rows)


def series_facts(metrics: pd.DataFrame, curves: pd.DataFrame) -> pd.DataFrame:
    """Per series of the convergence cells: `label`, `stages`, `replicas`,
    `samples_per_step`, `warmup_steps` (of its first cell: the seeds share them)."""
    per_cell = _per_cell(metrics)
    cells = curves.drop_duplicates("cell_dir")[["cell_dir", "series", "label", "stages",
                                                "replicas"]]
    facts = cells.merge(per_cell, on="cell_dir", how="left")
    return facts.drop_duplicates("series").drop(columns="cell_dir").set_index("series")


def elapsed_s(steps, warmup_steps: int, warm_step_s: float, steady_step_s: float):
    """Training time after `steps` optimizer steps (array or scalar): warm-up steps at
    their own measured time, the rest at the steady one."""
    steps = np.asarray(steps, dtype=float)
    warm = np.minimum(steps, warmup_steps)
    # a throughput cell without warm-up steps has no warm-up time: use the steady one
    warm_s = steady_step_s if math.isnan(warm_step_s) else warm_step_s
    return warm * warm_s + (steps - warm) * steady_step_s


def match_step_time(fact: pd.Series, times: pd.DataFrame, scenario: str) -> pd.Series | None:
    """The throughput cell of `scenario` that serves the series of `fact` (same label,
    stages, replicas and samples per step), None when there is none. A cell measured
    several times (a sweep's repeats) serves with the median of its step times, and
    `cell` names every repeat."""
    if times.empty:
        return None
    hit = times[(times["scenario"] == scenario) & (times["label"] == fact["label"])
                & (times["stages"] == fact["stages"]) & (times["replicas"] == fact["replicas"])
                & (times["samples_per_step"] == fact["samples_per_step"])]
    if hit.empty:
        return None
    row = hit.iloc[0].copy()
    if len(hit) > 1:
        row["warm_step_s"] = float(hit["warm_step_s"].median())
        row["steady_step_s"] = float(hit["steady_step_s"].median())
        row["cell"] = ", ".join(hit["cell"])
    return row


def timed_bands(bands: pd.DataFrame, facts: pd.DataFrame, times: pd.DataFrame,
                scenario: str) -> pd.DataFrame:
    """`bands` (quality.seed_bands) of the series that have a throughput cell in
    `scenario`, with `time_s` (elapsed training time at that eval step), `source`
    (the throughput cell's name), `warm_step_s`, `steady_step_s`."""
    out = []
    for series, rows in bands.groupby("series", sort=False):
        src = match_step_time(facts.loc[series], times, scenario)
        if src is None:
            continue
        rows = rows.sort_values("step").copy()
        rows["time_s"] = elapsed_s(rows["step"], int(facts.loc[series, "warmup_steps"]),
                                   src["warm_step_s"], src["steady_step_s"])
        rows["source"] = src["cell"]
        rows["warm_step_s"], rows["steady_step_s"] = src["warm_step_s"], src["steady_step_s"]
        out.append(rows)
    return pd.concat(out, ignore_index=True) if out else bands.iloc[0:0].assign(
        time_s=[], source=[], warm_step_s=[], steady_step_s=[])


def _reached(q: pd.Series, bands: pd.DataFrame, tolerance_pct: float
             ) -> tuple[float, int | None]:
    """A quality row's target (fp32's final mean x (1 + tolerance)) and the step of its
    series' first evaluation at or below it (None: none is)."""
    target = q["fp32_mean"] * (1 + tolerance_pct / 100)
    mine = bands[bands["series"] == q["series"]].sort_values("step")
    hit = mine[mine["mean"] <= target]
    return target, int(hit["step"].iloc[0]) if not hit.empty else None


def time_to_quality(quality: pd.DataFrame, bands: pd.DataFrame, facts: pd.DataFrame,
                    times: pd.DataFrame, tolerance_pct: float = TOLERANCE_PCT) -> pd.DataFrame:
    """One row per series of the default variant and scenario of `times` (shaped links,
    fastest first): `target` (fp32's final mean x (1 + tolerance)), `reached_step`,
    `time_s`, `status` (reached | not reached | no throughput cell | no fp32 reference),
    `source` (the throughput cell), `rate_mbit`, `host_limited`, and the series' `mode`,
    `stages`, `replicas`."""
    shaped = times[times["shaped"]] if not times.empty else times
    links = (shaped.drop_duplicates("scenario").sort_values("rate_mbit", ascending=False)
             if not shaped.empty else shaped)
    rows = []
    for _, q in quality[quality["variant"] == ""].iterrows():
        target, reached_step = _reached(q, bands, tolerance_pct)
        for _, link in links.iterrows():
            scenario = link["scenario"]
            src = match_step_time(facts.loc[q["series"]], times, scenario)
            row = {"series": q["series"], "mode": q["mode"], "stages": q["stages"],
                   "replicas": q["replicas"], "scenario": scenario, "rate_mbit": link["rate_mbit"],
                   "host_limited": bool(link["host_limited"]), "target": target,
                   "reached_step": reached_step, "time_s": math.nan,
                   "source": None if src is None else src["cell"]}
            if math.isnan(target):
                row["status"] = "no fp32 reference"
            elif src is None:
                row["status"] = "no throughput cell"
            elif reached_step is None:
                row["status"] = "not reached"
            else:
                row["status"] = "reached"
                row["time_s"] = float(elapsed_s(reached_step,
                                                int(facts.loc[q["series"], "warmup_steps"]),
                                                src["warm_step_s"], src["steady_step_s"]))
            rows.append(row)
    return pd.DataFrame(rows, columns=["series", "mode", "stages", "replicas", "scenario",
                                       "rate_mbit", "host_limited", "target", "reached_step",
                                       "time_s", "status", "source"])


# --------------------------------------------------------------- links that change
@dataclass(frozen=True)
class ScheduleCell:
    """One finished cell that ran on a schedule: its identity as a series matches it
    (`label`, `stages`, `replicas`, `samples_per_step`) and its schedule's phases with
    the median step time it measured in each (bench.report.timeline.phase_step_times)."""

    cell: str
    scenario: str
    label: str
    stages: int
    replicas: int
    samples_per_step: float
    loop: bool
    phases: tuple[tuple[float, float], ...]


def schedule_cells(records: list[CellRecord]) -> list[ScheduleCell]:
    """The ok cells of `records` (bench.results.files.load_records) that ran on a
    schedule."""
    out = []
    for record in records:
        if not record.ok or not has_schedule(record):
            continue
        frame = load_results([record.cell_dir])
        steps = schedule_step_times(frame, record)
        loop, phases = phase_step_times(record, phase_table(steps, phase_spans(record)))
        head = frame.iloc[0]
        out.append(ScheduleCell(
            cell=record.name, scenario=str(head["scenario"]), label=str(head["label"]),
            stages=int(head["stages"]), replicas=int(head["replicas"]),
            samples_per_step=float(steps.loc[~steps["warmup"], "samples"].median()),
            loop=loop, phases=tuple(phases)))
    return out


def _serving(cells: list[ScheduleCell], scenario: str, label: str, stages: int,
             replicas: int, samples_per_step: float) -> ScheduleCell | None:
    hits = [c for c in cells if (c.scenario, c.label, c.stages, c.replicas,
                                 c.samples_per_step) == (scenario, label, stages, replicas,
                                                         samples_per_step)]
    return hits[0] if hits else None


def _walk(steps: int, cell: ScheduleCell, start_s: float) -> tuple[float, set[int]]:
    """When `steps` steps begun at start_s end under cell's phases, and the phases
    without a measured step time the walk passed through (empty: the time is known)."""
    known = [(d, math.inf if math.isnan(s) else s) for d, s in cell.phases]
    end = time_under_schedule(steps, known, cell.loop, start_s=start_s)
    if not math.isfinite(end):
        return end, set()
    unknown = {k for k in phases_visited(cell.phases, cell.loop, start_s, end)
               if math.isnan(cell.phases[k][1])}
    return end, unknown


def _schedule_time(reached: int | None, warm: int, own: ScheduleCell | None,
                   fp32: ScheduleCell | None) -> tuple[str, float]:
    """(status, time_s) of one series on one dynamic scenario (module doc)."""
    if own is None:
        return "no dynamic cell", math.nan
    if warm and fp32 is None:
        return "no fp32 cell", math.nan
    if reached is None:
        return "not reached", math.nan
    end, unknown = _walk(min(warm, reached), fp32, 0.0) if warm else (0.0, set())
    if not unknown and math.isfinite(end):
        end, more = _walk(max(0, reached - warm), own, end)
        unknown |= more
    if unknown:
        return f"phase {min(unknown)} not measured", math.nan
    return ("reached", end) if math.isfinite(end) else ("never", math.nan)


def time_to_quality_under_schedule(quality: pd.DataFrame, bands: pd.DataFrame,
                                   facts: pd.DataFrame, cells: list[ScheduleCell],
                                   tolerance_pct: float = TOLERANCE_PCT) -> pd.DataFrame:
    """One row per series of the default variant and scenario of `cells`: `reached_step`
    (as in time_to_quality), `time_s` under the schedule (module doc), `fp32_time_s`
    (fp32's of the same layout there), `status` (reached | not reached | no dynamic
    cell | no fp32 cell | phase N not measured | never: a link that stays down), `source`
    (the series' dynamic cell)."""
    columns = ["series", "mode", "stages", "replicas", "scenario", "reached_step",
               "time_s", "fp32_time_s", "status", "source"]
    if quality.empty or not cells:
        return pd.DataFrame(columns=columns)
    default = quality[quality["variant"] == ""]
    rows = []
    for scenario in dict.fromkeys(c.scenario for c in cells):
        for _, q in default.iterrows():
            fact = facts.loc[q["series"]]
            layout = (int(q["stages"]), int(q["replicas"]), float(fact["samples_per_step"]))
            own = _serving(cells, scenario, fact["label"], *layout)
            target, reached = _reached(q, bands, tolerance_pct)
            status, time_s = _schedule_time(None if math.isnan(target) else reached,
                                            int(fact["warmup_steps"]), own,
                                            _serving(cells, scenario, "fp32", *layout))
            rows.append({"series": q["series"], "mode": q["mode"], "stages": q["stages"],
                         "replicas": q["replicas"], "scenario": scenario,
                         "reached_step": reached, "time_s": time_s, "status": status,
                         "source": None if own is None else own.cell})
    out = pd.DataFrame(rows, columns=[c for c in columns if c != "fp32_time_s"])
    fp32 = out[out["mode"] == "fp32"].set_index(["scenario", "stages", "replicas"])["time_s"]
    out["fp32_time_s"] = fp32.reindex(pd.MultiIndex.from_frame(
        out[["scenario", "stages", "replicas"]])).to_numpy(dtype=float)
    return out[columns]
