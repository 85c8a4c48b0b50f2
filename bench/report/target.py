"""Steps to a target held-out loss: the quality measure of training from scratch.

    curves = eval_curves(load_results([Path("results/convergence-scratch")]))
    cells = steps_to_target(curves, target=3.0)   # per cell: first step at or below it
    table = target_table(cells)                   # per series: mean over seeds, interval

A run evaluates every `eval_every` optimizer steps (at least TARGET_EVAL_CADENCE, 25:
ProtocolNanoGPT's rule, so a method is not credited for evaluating more often). A cell's
steps to target are the optimizer steps done at its first evaluation whose held-out loss
is at or below the target. A cell that never gets there is censored (no step within its
run), and its series' mean is then a lower bound, said as such. The interval is Student's t at
LEVEL over the seeds that reached it (bench.report.significance); `ratio_to_fp32` is the
series' mean over fp32's of the same preset, stages, replicas and variant.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table
from rich.text import Text

from aqsgd.filecache import atomic_write_text
from aqsgd.train.settings import TARGET_EVAL_CADENCE
from bench.report.markdown import markdown_table
from bench.report.quality import LAYOUT, eval_curves
from bench.report.significance import LEVEL, mean_half_width
from bench.report.wire import bytes_a_token, bytes_text, with_bytes
from bench.results.files import find_cells, load_results

__all__ = ["steps_to_target", "target_table", "target_rows",
           "write_target_report"]

def steps_to_target(curves: pd.DataFrame, target: float) -> pd.DataFrame:
    """One row per cell of `curves` (bench.report.quality.eval_curves): its identity,
    `series`, `seed`, `steps` (the first evaluated step at or below `target`; NaN when
    none), `last_step` (its last evaluation), `best` (its lowest held-out loss) and
    `cadence` (the fewest steps between two of its evaluations; NaN with one)."""
    rows = []
    for cell_dir, group in curves.groupby("cell_dir", sort=False):
        group = group.sort_values("step")
        reached = group[group["eval_loss"] <= target]
        steps = group["step"].to_numpy(dtype=int)
        gaps = {int(b - a) for a, b in zip(steps[:-1], steps[1:], strict=True)}
        rows.append({**group.iloc[0][["series", "seed", *LAYOUT, "mode"]].to_dict(),
                     "cell_dir": cell_dir,
                     "steps": float(reached["step"].iloc[0]) if len(reached) else math.nan,
                     "last_step": int(steps[-1]), "best": float(group["eval_loss"].min()),
                     "cadence": float(min(gaps)) if gaps else math.nan})
    return pd.DataFrame(rows)


def _interval(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return math.nan, math.nan
    mean, half = sum(values) / len(values), mean_half_width(values)
    return mean - half, mean + half


def target_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Per series (in the order of `cells`): `n_seeds`, `reached` (seeds that got to the
    target), `steps` ({seed: steps or None}), `mean` (over the seeds that reached it),
    `lo`/`hi` (its LEVEL interval; NaN with fewer than two), `censored` (a seed did not
    reach it: the mean is a lower bound), `last_step`, `best` (lowest loss of any seed),
    `ratio_to_fp32` (mean over fp32's mean of the same layout)."""
    rows = []
    for series, group in cells.groupby("series", sort=False):
        reached = group.dropna(subset=["steps"])
        values = [float(v) for v in reached["steps"]]
        lo, hi = _interval(values)
        rows.append({"series": series, **group.iloc[0][[*LAYOUT, "mode"]].to_dict(),
                     "n_seeds": len(group), "reached": len(values),
                     "steps": {int(s): (None if math.isnan(v) else int(v))
                               for s, v in zip(group["seed"], group["steps"], strict=True)},
                     "mean": sum(values) / len(values) if values else math.nan,
                     "lo": lo, "hi": hi, "censored": len(values) < len(group),
                     "last_step": int(group["last_step"].max()),
                     "best": float(group["best"].min())})
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    fp32 = table[table["mode"] == "fp32"].set_index(list(LAYOUT))["mean"]
    ref = fp32.reindex(pd.MultiIndex.from_frame(table[list(LAYOUT)])).to_numpy(dtype=float)
    table["ratio_to_fp32"] = table["mean"] / ref
    return table


def _steps_text(row) -> str:
    if row["reached"] == 0:
        return f"not reached in {row['last_step']}"
    bound = ">= " if row["censored"] else ""
    own = f"{bound}{row['mean']:.0f}"
    if not math.isnan(row["lo"]):
        own += f" [{row['lo']:.0f}, {row['hi']:.0f}]"
    return own


def target_rows(table: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """The report's table: series, layout, bytes a token each way (bench.report.wire),
    seeds at target, steps (mean and interval),
    per seed, ratio to fp32, lowest loss."""
    headers = ["series", "preset", "stages", "bytes a token fw / bw", "seeds at target",
               f"steps to target (mean [{LEVEL:.0%}])", "per seed", "vs fp32", "lowest loss"]
    rows = []
    for _, r in table.iterrows():
        per_seed = ", ".join(f"s{s}: {'-' if v is None else v}" for s, v in r["steps"].items())
        ratio = "-" if math.isnan(r["ratio_to_fp32"]) else f"{r['ratio_to_fp32']:.2f}x"
        if r["censored"] and r["reached"]:
            ratio = f">= {ratio}" if ratio != "-" else ratio
        rows.append([r["series"], str(r["preset"]), str(r["stages"]), bytes_text(r),
                     f"{r['reached']}/{r['n_seeds']}", _steps_text(r), per_seed, ratio,
                     f"{r['best']:.4f}"])
    return headers, rows


def write_target_report(conv_dir: Path, target: float, out_dir: Path, *,
                        quiet: bool = False, also: tuple[Path, ...] = ()) -> Path:
    """Write `out_dir/target.md` (steps to `target` of the cells under `conv_dir`) and
    print the table (unless quiet); returns the report's path. `also`: more folders of
    cells read with conv_dir (one sweep run in several parts). A ValueError naming the
    cell when a cell evaluated closer than TARGET_EVAL_CADENCE steps."""
    conv_dir, out_dir = Path(conv_dir), Path(out_dir)
    found = [d for d in (conv_dir, *map(Path, also)) if d.is_dir() and find_cells([d])]
    metrics = load_results(found) if found else pd.DataFrame()
    curves = eval_curves(metrics) if found else pd.DataFrame()
    lines = [f"# Steps to a held-out loss of {target}", ""]
    if curves.empty:
        lines += [f"No cells with evaluations under `{conv_dir}`.", ""]
        headers, rows = [], []
    else:
        cells = steps_to_target(curves, target)
        close = cells[cells["cadence"] < TARGET_EVAL_CADENCE]
        if len(close):
            raise ValueError(f"{close['cell_dir'].iloc[0]}: evaluated every "
                             f"{close['cadence'].iloc[0]:.0f} steps; steps to target need "
                             f"evaluations at least {TARGET_EVAL_CADENCE} steps apart")
        table = with_bytes(target_table(cells), cells, bytes_a_token(metrics))
        headers, rows = target_rows(table)
        where = ", ".join(f"`{d}`" for d in found)
        lines += [f"Cells under {where}, evaluated every {cells['cadence'].min():.0f} "
                  f"steps; the first evaluation at or below {target} counts. A `>=` mean "
                  f"has a seed that never reached the target (a lower bound); intervals are "
                  f"Student's t over the seeds that reached it.", "",
                  markdown_table(headers, rows), ""]
    if not quiet and rows:
        console = Console(width=max(140, os.get_terminal_size().columns if os.isatty(1)
                                    else 140))
        table = Table(*headers, title=f"steps to held-out loss {target}")
        for row in rows:
            table.add_row(*(Text(c) for c in row))
        console.print(table)
    return atomic_write_text(out_dir / "target.md", "\n".join(lines) + "\n")
