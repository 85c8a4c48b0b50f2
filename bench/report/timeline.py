"""Cells whose links followed a schedule: every step placed in the link phase it ran
under, throughput per phase, and a timeline figure of step times above the scheduled
rates. Made from result files only (docs/results-schema.md).

    phases = phase_spans(record)             # one row per applied phase of each link
    events = event_spans(record)             # links held still: one row per stretch
    steps = step_times(frame, record)        # per train step: start, end, wall time, samples
    table = phase_table(steps, phases)       # per phase: steps, median step, samples/s
    loop, timed = phase_step_times(record, table)  # (duration, median step) per phase
    plot_timeline(steps, phases, "timeline.png", title=...)
    time_under_schedule(12, [(3.0, 0.2), (3.0, 0.6), (1.5, math.inf)], loop=True)
    lines = timeline_section(records, out_dir, report_dir)  # report.md's section

`record` is a cell's meta.json as bench.results.record.read_record gives it.

The clock (t = 0 is the schedule runner's start), which phase a step belongs to and the
stretches of competing flows and stragglers: docs/changing-links.md, "What a scheduled cell's
report shows".
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from bench.report.markdown import markdown_table
from bench.results.files import load_results
from bench.results.record import CellRecord
from bench.results.record_links import CompetingFlow, ScheduleRun

__all__ = ["has_schedule", "has_events", "links_change", "scheduled_rates", "phase_spans",
           "event_spans", "step_times", "phase_table", "phase_step_times", "phases_visited",
           "plot_timeline", "time_under_schedule", "timeline_section"]

PHASE_COLUMNS = ("src", "dst", "phase", "lap", "start_s", "end_s", "rate_mbit", "down")


def _run(record: CellRecord) -> ScheduleRun | None:
    """The schedule runner's record of the cell (None: no schedule, or never started)."""
    return None if record.link_schedule is None else record.link_schedule.run


def _stop_s(run: ScheduleRun) -> float:
    return run.stopped_unix - run.started_unix if run.stopped_unix else math.inf


def has_schedule(record: CellRecord) -> bool:
    """True when the cell ran with link schedules (meta.json has its `schedule` block
    only then) and applied at least one change."""
    run = _run(record)
    return record.outages is not None and run is not None and bool(run.link_changes)


def phase_spans(record: CellRecord) -> pd.DataFrame:
    """One row per applied phase of each scheduled link: `src, dst, phase, lap`,
    `start_s` (when its change was applied, on the schedule's clock), `end_s` (the next
    change of that link, or the run's stop), `rate_mbit` (the phase's, or the link's
    own when the phase leaves it), `down`. The restoring change (phase -1) ends the last."""
    run = _run(record)
    assert run is not None and record.scenario is not None, "phase_spans of a static cell"
    stop_s = _stop_s(run)
    own_rate = record.scenario.link_rate_mbit
    rows = []
    changes = sorted(run.link_changes, key=lambda c: (c.src, c.dst, c.applied_s))
    for k, change in enumerate(changes):
        if change.phase < 0:
            continue
        nxt = changes[k + 1] if k + 1 < len(changes) else None
        same_link = nxt is not None and (nxt.src, nxt.dst) == (change.src, change.dst)
        rate = own_rate if change.rate_mbit is None else change.rate_mbit
        rows.append({"src": change.src, "dst": change.dst, "phase": change.phase,
                     "lap": change.lap, "start_s": change.applied_s,
                     "end_s": nxt.applied_s if same_link else stop_s,
                     "rate_mbit": float(rate), "down": change.down})
    return pd.DataFrame(rows, columns=list(PHASE_COLUMNS)).sort_values(
        ["start_s", "src", "dst"], kind="stable").reset_index(drop=True)


def links_change(record: CellRecord) -> bool:
    """True when the cell's links did not hold still: a schedule applied a change, or
    competing flows or a straggler ran (its throughput is then samples over time)."""
    return has_schedule(record) or has_events(record)


def scheduled_rates(record: CellRecord) -> dict[tuple[int, int], tuple[float, float]]:
    """Per scheduled link (src, dst): (the rate averaged over the time the run spent in
    each phase, a down phase counted at 0; the slowest phase's rate that was not down),
    in Mbit/s. Empty for a cell without a schedule."""
    if not has_schedule(record):
        return {}
    spans = phase_spans(record)
    spans = spans[np.isfinite(spans["end_s"]) & (spans["end_s"] > spans["start_s"])]
    out = {}
    for (src, dst), link in spans.groupby(["src", "dst"], sort=True):
        seconds = link["end_s"] - link["start_s"]
        rate = link["rate_mbit"].where(~link["down"].astype(bool), 0.0)
        up = link.loc[~link["down"].astype(bool), "rate_mbit"]
        out[(int(src), int(dst))] = (float((rate * seconds).sum() / seconds.sum()),
                                     float(up.min()) if len(up) else 0.0)
    return out


def has_events(record: CellRecord) -> bool:
    """True when the cell's links held still but competing flows or a straggler ran on
    the schedule's clock (the scenario has them and the run applied at least one)."""
    scenario, run = record.scenario, _run(record)
    if scenario is None or not (scenario.competing or scenario.stragglers) or run is None:
        return False
    return not run.link_changes and any(e.kind in EVENT_KINDS for e in run.events)


EVENT_KINDS = ("flow_start", "flow_stop", "cpu")


def _what(flows: set[int], caps: dict[int, float], competing: Sequence[CompetingFlow]) -> str:
    said = []
    if flows:
        links = dict.fromkeys(f"{competing[k].src} -> {competing[k].dst}" for k in sorted(flows))
        said.append(f"{len(flows)} competing flow{'s' if len(flows) > 1 else ''} on "
                    f"{', '.join(links)}")
    said += [f"host {h} {f:g}x slower" for h, f in sorted(caps.items())]
    return "; ".join(said) or "training alone"


def event_spans(record: CellRecord) -> pd.DataFrame:
    """For a cell with competing flows or stragglers (has_events): one row per stretch
    between their changes, in phase_spans' columns (`phase` the stretch's index, `lap` 0,
    the links' own rate, never down; src/dst the first flow's link, else 0 -> 1) plus
    `from_s` (the stretch's scheduled start) and `what` (what ran in it)."""
    run, scenario = _run(record), record.scenario
    assert run is not None and scenario is not None, "event_spans of a cell without events"
    stop_s = _stop_s(run)
    competing = scenario.competing
    # the scenario's own times: not the stops and lifts the launcher applies at the end
    scheduled = {t for e in [*competing, *scenario.stragglers]
                 for t in (e.start_s, e.start_s + e.duration_s)}
    events = sorted((e for e in run.events if e.kind in EVENT_KINDS and not e.failed
                     and e.t_s in scheduled), key=lambda e: (e.t_s, e.applied_s))
    src, dst = (competing[0].src, competing[0].dst) if competing else (0, 1)
    rate = float(scenario.link_rate_mbit)
    flows: set[int] = set()
    caps: dict[int, float] = {}
    bounds = [(0.0, 0.0, _what(flows, caps, competing))]  # (scheduled, applied, what then)
    for t_s in dict.fromkeys(e.t_s for e in events):
        at = [e for e in events if e.t_s == t_s]
        for e in at:
            if e.kind == "flow_start":
                flows.add(e.flow)
            elif e.kind == "flow_stop":
                flows.discard(e.flow)
            elif e.factor is None:
                caps.pop(e.host, None)
            else:
                caps[e.host] = e.factor
        applied = max(e.applied_s for e in at)
        if t_s == 0.0:
            bounds[0] = (0.0, 0.0, _what(flows, caps, competing))
        else:
            bounds.append((t_s, applied, _what(flows, caps, competing)))
    rows = []
    for k, (from_s, start_s, what) in enumerate(bounds):
        end_s = bounds[k + 1][1] if k + 1 < len(bounds) else stop_s
        if end_s <= start_s:
            continue
        rows.append({"src": src, "dst": dst, "phase": len(rows), "lap": 0, "start_s": start_s,
                     "end_s": end_s, "rate_mbit": rate, "down": False, "from_s": from_s,
                     "what": what})
    return pd.DataFrame(rows, columns=[*PHASE_COLUMNS, "from_s", "what"])


def step_times(frame: pd.DataFrame, record: CellRecord) -> pd.DataFrame:
    """Per train step of one cell's tidy metrics: `step`, `warmup`, `end_s` and
    `start_s` on the schedule's clock, `wall_s` (slowest rank's step time), `samples`
    (summed over the stage-0 rank of every replica)."""
    run = _run(record)
    assert run is not None, "step_times of a cell without a schedule run"
    started = run.started_unix
    train = frame[frame["kind"] == "train"].copy()
    for col in ("end_unix", "step_time_s", "samples", "stage"):
        train[col] = pd.to_numeric(train[col], errors="coerce")
    if train["end_unix"].isna().any():
        raise ValueError(f"cell {record.name}: its metrics have no end_unix "
                         f"(written before the workers stamped their steps): measure it "
                         f"again for a timeline")
    by_step = train.groupby("step")
    out = pd.DataFrame({
        "warmup": by_step["warmup"].agg(lambda v: bool(v.astype(bool).any())),
        "end_s": by_step["end_unix"].max() - started,
        "wall_s": by_step["step_time_s"].max(),
        "samples": train[train["stage"] == 0].groupby("step")["samples"].sum(),
    }).reset_index()
    out["start_s"] = out["end_s"] - out["wall_s"]
    return out[["step", "warmup", "start_s", "end_s", "wall_s", "samples"]]


def _first_link(phases: pd.DataFrame) -> pd.DataFrame:
    src, dst = min(zip(phases["src"], phases["dst"], strict=True))
    return phases[(phases["src"] == src) & (phases["dst"] == dst)]


def phase_of(t_s: np.ndarray, phases: pd.DataFrame) -> np.ndarray:
    """The first scheduled link's phase index at each time of `t_s` (-1 before its
    first change and after its last)."""
    link = _first_link(phases)
    out = np.full(len(t_s), -1, dtype=int)
    for row in link.itertuples():
        out[(t_s >= row.start_s) & (t_s < row.end_s)] = row.phase
    return out


def phase_table(steps: pd.DataFrame, phases: pd.DataFrame) -> pd.DataFrame:
    """Per phase of the first scheduled link (in schedule order): `phase`,
    `rate_mbit`, `down`, `time_s` (how long the run spent in it, all laps), `steps`
    (measured steps whose midpoint fell in it), `step_time_s` (their median wall time),
    `samples_s` (median samples per step over that; NaN without a step). Warm-up steps
    are left out, as in every throughput."""
    link = _first_link(phases)
    measured = steps[~steps["warmup"]]
    mid = ((measured["start_s"] + measured["end_s"]) / 2).to_numpy(dtype=float)
    in_phase = phase_of(mid, phases)
    rows = []
    for phase, spans in link.groupby("phase", sort=True):
        mine = measured[in_phase == phase]
        finite = spans["end_s"].where(np.isfinite(spans["end_s"]), spans["start_s"])
        median = float(mine["wall_s"].median()) if len(mine) else math.nan
        rows.append({"phase": int(phase), "rate_mbit": float(spans["rate_mbit"].iloc[0]),
                     "down": bool(spans["down"].iloc[0]),
                     "time_s": float((finite - spans["start_s"]).sum()),
                     "steps": len(mine), "step_time_s": median,
                     "samples_s": float(mine["samples"].median()) / median
                     if len(mine) and median > 0 else math.nan})
    return pd.DataFrame(rows, columns=["phase", "rate_mbit", "down", "time_s", "steps",
                                       "step_time_s", "samples_s"])


def phase_step_times(record: CellRecord,
                     table: pd.DataFrame) -> tuple[bool, list[tuple[float, float]]]:
    """The first scheduled link's schedule as time_under_schedule takes it: whether it
    loops, and per phase of its phase list (duration_s from meta.json's schedule, the
    median measured step time from `table`, phase_table's): inf for a down phase, NaN
    for one no measured step fell in."""
    assert record.link_schedule is not None, "phase_step_times of a cell without a schedule"
    first = min(record.link_schedule.links, key=lambda link: (link.src, link.dst))
    step_s = dict(zip(table["phase"], table["step_time_s"], strict=True))
    out = []
    for k, phase in enumerate(first.phases):
        own = math.inf if phase.down else float(step_s.get(k, math.nan))
        out.append((phase.duration_s, own))
    return first.loop, out


def phases_visited(phases: Sequence[tuple[float, float]], loop: bool, t0: float,
                   t1: float) -> set[int]:
    """The indices of `phases` ((duration_s, ...) each) the schedule's clock passes
    through from t0 to t1 (after the last phase of a schedule that does not loop: the
    last)."""
    ends = np.cumsum([d for d, *_ in phases]).tolist()
    lap_s = ends[-1]
    if loop and t1 - t0 >= lap_s:
        return set(range(len(phases)))
    out = set()
    for lap in range(int(t0 // lap_s), int(t1 // lap_s) + 1) if loop else (0,):
        for k, end in enumerate(ends):
            start = lap * lap_s + (ends[k - 1] if k else 0.0)
            if start < t1 and lap * lap_s + end > t0:
                out.add(k)
    if not loop and t1 > lap_s:
        out.add(len(phases) - 1)
    return out


def time_under_schedule(steps_needed: float, phases: Sequence[tuple[float, float]],
                        loop: bool, start_s: float = 0.0) -> float:
    """The time on the schedule's clock when `steps_needed` steps begun at `start_s` are
    done, the link running through `phases` ((duration_s, step_s) each: the phase's
    length and the measured step time in it; an infinite step time for a phase where no
    step finishes, a link that is down) from t = 0, lapping when `loop` (after the last
    phase a schedule that does not loop stays in its last phase). Steps are fluid: a
    phase does duration / step_s of them. inf when they are never done."""
    if not phases:
        raise ValueError("time_under_schedule: no phases")
    if steps_needed <= 0:
        return float(start_s)
    rates = [1.0 / s if math.isfinite(s) and s > 0 else 0.0 for _, s in phases]
    ends = np.cumsum([d for d, _ in phases]).tolist()
    lap_s, per_lap = ends[-1], sum(d * r for (d, _), r in zip(phases, rates, strict=True))
    t, left = float(start_s), float(steps_needed)
    if not loop and t >= lap_s:  # already in the last phase, which lasts on
        return t + left / rates[-1] if rates[-1] else math.inf
    lap0 = math.floor(t / lap_s) * lap_s if loop else 0.0
    while True:
        for k, rate in enumerate(rates):
            end = lap0 + ends[k]
            if end <= t:  # a phase the clock has passed
                continue
            span = end - t
            if rate and left <= span * rate:
                return t + left / rate
            t, left = end, left - span * rate
        if not loop:  # the last phase lasts from then on
            return t + left / rates[-1] if rates[-1] else math.inf
        if per_lap == 0:
            return math.inf
        lap0 = t
        if left > per_lap:  # whole laps at once, the last one walked
            laps = math.ceil(left / per_lap) - 1
            t, lap0, left = t + laps * lap_s, lap0 + laps * lap_s, left - laps * per_lap


def plot_timeline(steps: pd.DataFrame, phases: pd.DataFrame, path: str | Path, *,
                  title: str) -> Path:
    """Two panels on the schedule's clock: each step's wall time at its end (warm-up
    steps hollow), and beneath it every scheduled link's rate, down phases shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(8, 5),
                                      gridspec_kw={"height_ratios": [3, 2]})
    warm = steps[steps["warmup"]]
    measured = steps[~steps["warmup"]]
    top.plot(measured["end_s"], measured["wall_s"], "o-", ms=3, lw=1, label="measured step")
    if len(warm):
        top.plot(warm["end_s"], warm["wall_s"], "o", ms=3, mfc="none", label="warm-up step")
    top.set_ylabel("step wall time (s)")
    top.set_title(title)
    top.legend(loc="upper left", fontsize=8, frameon=False)
    top.grid(alpha=0.3)
    for (src, dst), link in phases.groupby(["src", "dst"], sort=True):
        ends = link["end_s"].where(np.isfinite(link["end_s"]), steps["end_s"].max())
        xs = np.column_stack([link["start_s"], ends]).ravel()
        rates = np.where(link["down"], 0.0, link["rate_mbit"])
        ys = np.repeat(rates, 2)
        bottom.plot(xs, ys, lw=1.2, label=f"{src} -> {dst}")
    for row in _first_link(phases).itertuples():
        if row.down:
            end = row.end_s if math.isfinite(row.end_s) else steps["end_s"].max()
            for ax in (top, bottom):
                ax.axvspan(row.start_s, end, color="tab:red", alpha=0.12, lw=0)
    bottom.set_ylabel("scheduled rate (Mbit/s)")
    bottom.set_xlabel("time since the workers started (s); red: link down")
    bottom.set_ylim(bottom=0)
    bottom.grid(alpha=0.3)
    if phases[["src", "dst"]].drop_duplicates().shape[0] <= 6:
        bottom.legend(loc="upper right", fontsize=7, frameon=False, ncol=3)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _fmt(value: float, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) \
        else format(value, spec)


def _outage_lines(record: CellRecord) -> list[str]:
    """What the cell's outages cost (meta.json's `schedule` block): [] without any."""
    block = record.outages
    if not has_schedule(record) or block is None or not block.outages:
        return []
    outages = block.outages
    down = sum(o.up_s - o.down_s for o in outages if o.up_s is not None)
    lost = block.time_lost_s
    links = ", ".join(dict.fromkeys(f"{o.src} -> {o.dst}" for o in outages))
    return [f"Outages: {len(outages)} ({down:.1f} s down in all, links {links}); "
            f"the measured steps took {'-' if lost is None else f'{lost:.1f}'} s beyond the "
            f"median step in all (the time the outages and any other slow step cost); the "
            f"workers' process-group timeout of {block.dist_timeout_s:g} s survives "
            f"outages up to {block.survivable_outage_s:g} s.", ""]


def _shares(record: CellRecord) -> dict[float, float]:
    """The training's share of the competing flows' link per interval, by its scheduled
    start (the launcher record's `competing` block; {} without flows)."""
    schedule = record.link_schedule
    return {} if schedule is None else {
        iv.start_s: iv.training_share for iv in schedule.intervals
        if iv.training_share is not None}


def timeline_section(records: list[CellRecord], out_dir: str | Path,
                     report_dir: str | Path) -> list[str]:
    """report.md's "Links that change" section for the ok cells of `records` that ran on a
    schedule: per cell its timeline figure (written to `out_dir/timeline_<cell>.png`,
    linked relative to `report_dir`, where the report lies) and
    its per-phase table beside its overall throughput (samples over summed step wall
    time, measured steps). [] when no cell ran on a schedule."""
    cells = [r for r in records if r.ok and links_change(r)]
    if not cells:
        return []
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = ["## Links that change", "",
             "Each step is placed in the phase of the first scheduled link its midpoint "
             "fell in (the schedule's clock starts when the workers are spawned); warm-up "
             "steps are left out. samples/s of a phase: median samples per step over the "
             "median step wall time in it; overall: measured samples over their summed "
             "step time. A cell whose links held still but shared them with competing "
             "flows or ran a straggler has stretches instead: from one start or stop of a "
             "flow or CPU cap to the next, with the training's share of the link (bytes "
             "of the link's class that were not the flows') where flows ran.", ""]
    for record in cells:
        name = record.name
        steps = step_times(load_results([record.cell_dir]), record)
        phases = phase_spans(record) if has_schedule(record) else event_spans(record)
        table = phase_table(steps, phases)
        png = plot_timeline(steps, phases, out_dir / f"timeline_{name}.png",
                            title=f"{name}: step times on the scheduled links")
        measured = steps[~steps["warmup"]]
        overall = float(measured["samples"].sum()) / float(measured["wall_s"].sum()) \
            if len(measured) and measured["wall_s"].sum() > 0 else math.nan
        total = ["all", "", _fmt(float(steps["end_s"].max()), ".1f"), str(len(measured)),
                 _fmt(float(measured["wall_s"].median()), ".3f") if len(measured) else "-",
                 _fmt(overall, ".1f")]
        if has_schedule(record):
            rows = [[str(r.phase), "down" if r.down else _fmt(r.rate_mbit, "g"),
                     _fmt(r.time_s, ".1f"), str(r.steps), _fmt(r.step_time_s, ".3f"),
                     _fmt(r.samples_s, ".1f")] for r in table.itertuples()]
            rows.append(total)
            header = ["phase", "Mbit/s", "time in phase (s)", "steps", "median step (s)",
                      "samples/s"]
        else:
            shares = _shares(record)
            rows = [[f"from {span.from_s:g} s", span.what, _fmt(r.time_s, ".1f"), str(r.steps),
                     _fmt(r.step_time_s, ".3f"), _fmt(r.samples_s, ".1f"),
                     _fmt(shares.get(span.from_s), ".2f")]
                    for r, span in zip(table.itertuples(), phases.itertuples(), strict=True)]
            rows.append([*total, ""])
            header = ["stretch", "what ran", "time (s)", "steps", "median step (s)",
                      "samples/s", "training's share"]
        rel = os.path.relpath(png, report_dir)
        lines += [f"### {name}", "", f"![timeline_{name}]({rel})", "",
                  *_outage_lines(record),
                  markdown_table(header, rows), ""]
    return lines
