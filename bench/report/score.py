"""`python -m bench score`: a time-to-target score, T = steps to a target held-out loss x the
steady step time, for each mode of a throughput sweep.

    python -m bench score results/paper --quality results/convergence-scratch --target 3.0
    python -m bench score results/paper --steps fp32=150 --steps aqsgd:2/4=175

The steady step of a throughput cell is ProtocolNanoGPT's: the median of three consecutive
10-step windows of its measured (not warm-up) steps whose mean step times agree within 1%
(`steady_step`); a cell with fewer than 30 measured steps, or whose windows never agree,
falls back to the median of its measured steps, and the table says so. A cell whose link
follows a schedule has no steady step: T then takes the run's own mean step over the whole
run, said as such. Steps to target come from a quality sweep's cells (bench.report.target:
the mean over the seeds that reached it, matched by the quality tables' spelling of the
mode, 'aqsgd:2/4') or are given per mode with --steps; the table names the source of each
factor.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table
from rich.text import Text

from bench.report.quality import eval_curves, series_name
from bench.report.target import steps_to_target, target_table
from bench.report.timeline import has_schedule
from bench.report.timetoquality import format_seconds
from bench.results.files import find_cells, load_records, load_results

__all__ = ["WINDOW", "WINDOWS", "AGREE_PCT", "Steady", "steady_step", "cell_steps",
           "score_rows", "register"]

WINDOW, WINDOWS, AGREE_PCT = 10, 3, 1.0  # ProtocolNanoGPT's steady-state rule


@dataclass(frozen=True)
class Steady:
    """A cell's steady step time and how it was found: `windows` (three agreeing 10-step
    windows from step `start` of the measured ones), `median` (fewer than 30 steps or no
    agreement: the median of all), `run` (a link that changes: the run's mean step)."""

    step_s: float
    how: str
    start: int | None = None

    def text(self) -> str:
        if self.how == "windows":
            return f"3 x {WINDOW} steps from measured step {self.start}"
        if self.how == "run":
            return "whole run (its link changes)"
        return "median of all steps (no 3 agreeing windows)"


def steady_step(step_s: Sequence[float]) -> Steady:
    """The steady step of one cell's measured step times, in order (module docstring)."""
    values = [float(v) for v in step_s]
    for start in range(len(values) - WINDOW * WINDOWS + 1):
        means = [statistics.fmean(values[start + k * WINDOW: start + (k + 1) * WINDOW])
                 for k in range(WINDOWS)]
        if max(means) <= min(means) * (1 + AGREE_PCT / 100):
            return Steady(statistics.median(means), "windows", start)
    return Steady(statistics.median(values), "median")


def cell_steps(metrics: pd.DataFrame, scheduled: set[str]) -> pd.DataFrame:
    """Per throughput cell: `series` (the quality tables' spelling, 'aqsgd:2/4'), `mode`,
    `scenario`, `stages`, `replicas`, `cell`,
    `steady` (a Steady); `scheduled`: the names of the cells whose links changed."""
    train = metrics[metrics["kind"] == "train"]
    rows = []
    for _, cell in train.groupby("cell_dir", sort=True):
        measured = cell[~cell["warmup"].astype(bool)]
        wall = pd.to_numeric(measured["step_time_s"]).groupby(measured["step"]).max()
        head = cell.iloc[0]
        steady = (Steady(float(wall.mean()), "run") if head["cell"] in scheduled
                  else steady_step(list(wall.sort_index())))
        rows.append({"series": series_name(head), "mode": head["mode"],
                     "scenario": head["scenario"], "stages": int(head["stages"]),
                     "replicas": int(head["replicas"]), "cell": head["cell"],
                     "steady": steady})
    return pd.DataFrame(rows)


def _targets(quality: Path | None, target: float | None,
             given: dict[str, int]) -> dict[str, tuple[float, str]]:
    """label -> (steps to target, where it came from)."""
    found: dict[str, tuple[float, str]] = {
        label: (float(n), "given (--steps)") for label, n in given.items()}
    if quality is None:
        return found
    table = target_table(steps_to_target(eval_curves(load_results([quality])), target))
    for _, row in table.iterrows():
        if row["reached"] and row["series"] not in found:
            bound = ">= " if row["censored"] else ""
            found[row["series"]] = (row["mean"], f"{bound}mean of {row['reached']} seed(s), "
                                                 f"{quality.name} at loss {target}")
    return found


def score_rows(cells: pd.DataFrame, targets: dict[str, tuple[float, str]]
               ) -> tuple[list[str], list[list[str]]]:
    """The table: one row per throughput cell whose mode has steps to target."""
    headers = ["mode", "scenario", "steps to target", "from", "steady step", "how", "T",
               "T vs fp32"]
    rows, ref = [], {}
    for _, c in cells.iterrows():
        if c["mode"] == "fp32" and c["series"] in targets:
            ref[c["scenario"]] = targets[c["series"]][0] * c["steady"].step_s
    for _, c in cells.iterrows():
        if c["series"] not in targets:
            continue
        steps, source = targets[c["series"]]
        t = steps * c["steady"].step_s
        vs = f"{ref[c['scenario']] / t:.2f}x" if c["scenario"] in ref else "-"
        rows.append([c["series"], c["scenario"], f"{steps:.0f}", source,
                     format_seconds(c["steady"].step_s), c["steady"].text(),
                     format_seconds(t), vs])
    return headers, rows


def _given(pairs: list[str]) -> dict[str, int]:
    out = {}
    for pair in pairs:
        label, sep, n = pair.rpartition("=")
        if not sep or not label or not n.isdigit() or int(n) < 1:
            raise ValueError(f"--steps: expected MODE=STEPS (e.g. aqsgd:2/4=175), got {pair!r}")
        out[label] = int(n)
    return out


def run_score(args: argparse.Namespace) -> int:
    given = _given(args.steps)
    if (args.quality is None) != (args.target is None):
        raise ValueError("--quality and --target go together: the quality cells and the "
                         "held-out loss to count steps to")
    if args.quality is None and not given:
        raise ValueError("no steps to target: give --quality DIR --target LOSS, or --steps "
                         "MODE=N per mode")
    for folder in (args.throughput, args.quality):
        if folder is not None and not (folder.is_dir() and find_cells([folder])):
            raise ValueError(f"{folder}: no result cells there")
    scheduled = {r.cell.name for r in load_records([args.throughput]) if has_schedule(r)}
    cells = cell_steps(load_results([args.throughput]), scheduled)
    headers, rows = score_rows(cells, _targets(args.quality, args.target, given))
    if not rows:
        raise ValueError(f"no throughput cell of {args.throughput} has a mode with steps to "
                         f"target (modes there: {', '.join(sorted(set(cells['series'])))})")
    table = Table(*headers, title="time to target: T = steps to target x steady step")
    for row in rows:
        table.add_row(*(Text(c) for c in row))
    Console(width=160).print(table)
    return 0


def register(sub) -> None:
    """Add `score` to the subparsers `sub` of `python -m bench`."""
    p = sub.add_parser("score", help="time to a target loss: steps to target x steady step",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("throughput", type=Path, help="throughput cells (their step times)")
    p.add_argument("--quality", type=Path,
                   help="quality cells evaluated at a fixed cadence (default: none; steps "
                        "from --steps)")
    p.add_argument("--target", type=float,
                   help="the held-out loss to count steps to (default: none; needed with "
                        "--quality)")
    p.add_argument("--steps", action="append", default=[], metavar="MODE=N",
                   help="steps to target of a mode, given (repeatable; wins over --quality; "
                        "default: none)")
    p.set_defaults(func=run_score)
