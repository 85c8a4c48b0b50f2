"""`python -m bench compare A B`: the cells two result folders share, matched by identity,
and one metric's ratio B / A per cell with each side's spread over its repeats.

    python -m bench compare results/before results/after                  # samples/s, 5 %
    python -m bench compare results/before results/after --metric bytes --threshold 0
    result = compare_results("results/before", "results/after", metric="loss")
    result.rows                   # one row per matched cell (COMPARE_COLUMNS)

Cells match when meta.json's identity agrees in all but the machine and the commit
(`comparison_key`; a field only one side's cells have is left out and named), so two
runs of one grid on two commits pair up; a cell's repeats are one number (their median,
min..max beside it). Exit codes: 0 no cell regressed past the threshold, 1 one did
(lower samples/s, higher loss or bytes), 2 bad input (a folder without cells, no cell in
common). Cells of one side only are listed, never dropped silently. The figure goes
beside --out, else into B/figures. docs/api.md, "Comparing two runs": columns and rules.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Column, Table
from rich.text import Text

from aqsgd.filecache import atomic_write_text
from bench.report.cli import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, _check_has_cells
from bench.report.summary import summarize
from bench.results.files import load_records
from bench.results.record import CellRecord
from bench.results.records import records_json

__all__ = ["COMPARE_COLUMNS", "DEFAULT_THRESHOLD_PCT", "METRICS", "Comparison", "Metric",
           "compare_results", "comparison_key", "plot_comparison", "print_comparison",
           "register"]


@dataclass(frozen=True)
class Metric:
    """A summary column (bench.report.summary) compared by `bench compare`."""

    column: str
    higher_is_better: bool
    header: str
    scale: float = 1.0  # shown as value / scale

    def text(self, value: float) -> str:
        return "-" if pd.isna(value) else f"{value / self.scale:.4g}"


METRICS = {
    "samples_per_s": Metric("throughput_samples_s", True, "samples/s"),
    "loss": Metric("final_eval_loss", False, "held-out loss"),
    "bytes": Metric("bytes_per_step", False, "MB/step", scale=1e6),
}
DEFAULT_THRESHOLD_PCT = 5.0

# What says where and from which code a cell ran, not what it is: left out of the key.
# spec_key hashes the repeat too; the spec itself stands in for it without the repeat.
# paths: where a setting's content was found (the content is compared)
_IDENTITY_LEFT_OUT = ("machine", "git_commit", "mechanisms", "spec_key", "paths")
_SPEC_LEFT_OUT = ("repeat", "seed_in_name", "scenario")  # scenario: the file's path
# the cell block's names and what was measured about the link (not chosen by the run)
_CELL_LEFT_OUT = ("name", "spec_name", "sweep", "repeat", "host_limited",
                  "rate_mbit_achieved", "shaping")

COMPARE_COLUMNS = ("cell", "metric", "a", "a_lo", "a_hi", "a_repeats", "b", "b_lo", "b_hi",
                   "b_repeats", "ratio", "ratio_lo", "ratio_hi", "change_pct", "verdict",
                   "cells_a", "cells_b")


def _flat(tree: dict, depth: int, prefix: str = "") -> dict[str, str]:
    """'a.b' -> JSON text of the value, dicts opened `depth` levels deep (below that a
    value is compared whole: an override added to {} is a change, not a new key)."""
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict) and depth > 0:
            flat.update(_flat(value, depth - 1, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = json.dumps(value, sort_keys=True, default=str)
    return flat


def comparison_key(record: CellRecord) -> dict[str, str]:
    """What a cell of another run must share with `record`'s to be compared with it, as
    flat 'part.field' -> JSON text: meta.json's `identity` without the machine, the
    commit and the mechanisms (which follow from them), the cell's `spec` (its mode's and
    workload's fields) and `cell` block without its names and its repeat (a cell's
    repeats share a key)."""
    identity, cell = record.identity.to_dict(), record.cell.to_dict()
    return _flat({
        "identity": {k: v for k, v in identity.items() if k not in _IDENTITY_LEFT_OUT},
        "spec": {k: v for k, v in record.spec.items() if k not in _SPEC_LEFT_OUT},
        "cell": {k: v for k, v in cell.items() if k not in _CELL_LEFT_OUT}}, depth=2)


def _cells(path: Path, metric: Metric) -> tuple[pd.DataFrame, list[str], str]:
    """One row per finished cell of `path` (`name`, `repeat`, `flat`: comparison_key,
    `value` of the metric); the cells that did not finish; the commits they ran at."""
    _check_has_cells(path)
    rows, not_ok, commits = [], [], set()
    for record in load_records([path]):
        commits.add(str(record.identity.git_commit)[:12])
        if not record.ok:
            not_ok.append(f"{record.name} ({record.status})")
            continue
        summary = summarize([record.cell_dir])  # this cell's row, known by its directory
        if summary["status"].iloc[0] != "ok":  # its metrics.csv is unreadable
            not_ok.append(f"{record.name} ({summary['status'].iloc[0]})")
            continue
        rows.append({"name": record.name, "repeat": record.cell.repeat,
                     "flat": comparison_key(record),
                     "value": pd.to_numeric(summary[metric.column], errors="coerce").iloc[0]})
    frame = pd.DataFrame(rows, columns=["name", "repeat", "flat", "value"])
    return frame.sort_values(["name", "repeat"]), not_ok, ", ".join(sorted(commits))


def _over_repeats(cells: pd.DataFrame, fields: set[str]) -> pd.DataFrame:
    """One row per key (comparison_key restricted to `fields`): `key`, `name` (its first
    repeat's), the metric's median `v`, `lo`, `hi`, count `n`, `cells`, `flat` (restricted
    to `fields`)."""
    shared = [{k: f[k] for k in sorted(fields) if k in f} for f in cells["flat"]]
    keyed = cells.assign(flat=shared, key=[json.dumps(f) for f in shared])
    return keyed.groupby("key", sort=False).agg(
        name=("name", "first"), v=("value", "median"), lo=("value", "min"),
        hi=("value", "max"), n=("value", "count"), cells=("name", ", ".join),
        flat=("flat", "first")).reset_index()


def _only(side: pd.DataFrame, other: pd.DataFrame, side_is_a: bool) -> list[str]:
    """The cells of `side` without a match in `other`, each with what differs from the
    other side's cell of the same name, if it has one."""
    theirs = dict(zip(other["name"], other["flat"], strict=True))
    listed = []
    for key, name, flat in zip(side["key"], side["name"], side["flat"], strict=True):
        if key in set(other["key"]):
            continue
        if name in theirs:  # A's fields first, then B's
            a, b = (flat, theirs[name])[::1 if side_is_a else -1]
            name += f" (the other side's cell of this name differs: {_differences(a, b)})"
        listed.append(name)
    return sorted(listed)


def _verdict(change_pct: float, metric: Metric, threshold_pct: float) -> str:
    if pd.isna(change_pct):
        return "no value"
    worse_pct = -change_pct if metric.higher_is_better else change_pct
    if worse_pct > threshold_pct:
        return "regressed"
    return "improved" if worse_pct < -threshold_pct else "same"


def _differences(a: dict, b: dict) -> str:
    """'spec.workload.steps 8 -> 16; ...': where two flat keys differ."""
    parts = [f"{k} {a.get(k, '(none)')} -> {b.get(k, '(none)')}"
             for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    return "; ".join(parts)


@dataclass(frozen=True)
class Comparison:
    """`rows`: one per cell both folders have (COMPARE_COLUMNS, B over A); `only_a`,
    `only_b`: the cells of one folder only (with what differs from a cell of the same
    name on the other side); `not_ok_a`, `not_ok_b`: cells that did not finish;
    `commits_a`, `commits_b`: the commits each side's cells ran at; `one_sided`: the
    fields of comparison_key that only one side's cells have (a field one commit added),
    left out of the match."""

    a: Path
    b: Path
    metric: str
    threshold_pct: float
    rows: pd.DataFrame
    only_a: list[str]
    only_b: list[str]
    not_ok_a: list[str]
    not_ok_b: list[str]
    commits_a: str
    commits_b: str
    one_sided: list[str]

    @property
    def regressed(self) -> pd.DataFrame:
        """The rows whose verdict is 'regressed' (empty: the gate passes)."""
        return self.rows[self.rows["verdict"] == "regressed"]


def compare_results(a: str | Path, b: str | Path, metric: str = "samples_per_s",
                    threshold_pct: float = DEFAULT_THRESHOLD_PCT) -> Comparison:
    """Compare the finished cells of result folders `a` and `b` (cells, sweeps or trees)
    on `metric` (a key of METRICS). ValueError naming the folder or value for bad input:
    a folder without cells, an unknown metric, a negative threshold."""
    if metric not in METRICS:
        raise ValueError(f"--metric: expected one of {'|'.join(METRICS)}, got {metric!r}")
    if not threshold_pct >= 0:
        raise ValueError(f"--threshold: expected a percentage >= 0, got {threshold_pct}")
    m = METRICS[metric]
    (cells_a, not_ok_a, commits_a), (cells_b, not_ok_b, commits_b) = \
        _cells(Path(a), m), _cells(Path(b), m)
    # a field only one side's cells have (one commit added it) cannot tell them apart
    fields_a, fields_b = (set().union(*c["flat"]) for c in (cells_a, cells_b))
    side_a, side_b = (_over_repeats(c, fields_a & fields_b) for c in (cells_a, cells_b))
    both = side_a.merge(side_b, on="key", suffixes=("_a", "_b"))
    rows = pd.DataFrame({
        "cell": both["name_a"], "metric": metric,
        "a": both["v_a"], "a_lo": both["lo_a"], "a_hi": both["hi_a"], "a_repeats": both["n_a"],
        "b": both["v_b"], "b_lo": both["lo_b"], "b_hi": both["hi_b"], "b_repeats": both["n_b"],
        "ratio": both["v_b"] / both["v_a"],
        # the extreme ratios of any repeat of B over any of A
        "ratio_lo": both["lo_b"] / both["hi_a"], "ratio_hi": both["hi_b"] / both["lo_a"],
        "cells_a": both["cells_a"], "cells_b": both["cells_b"]})
    rows["change_pct"] = (rows["ratio"] - 1.0) * 100.0
    rows["verdict"] = [_verdict(c, m, threshold_pct) for c in rows["change_pct"]]
    return Comparison(Path(a), Path(b), metric, threshold_pct,
                      rows[list(COMPARE_COLUMNS)].sort_values("cell").reset_index(drop=True),
                      _only(side_a, side_b, True), _only(side_b, side_a, False),
                      not_ok_a, not_ok_b, commits_a, commits_b,
                      sorted(fields_a ^ fields_b))


def _band(metric: Metric, row, side: str) -> str:
    text = metric.text(row[side])
    if row[f"{side}_repeats"] > 1:
        text += f" [{metric.text(row[f'{side}_lo'])}-{metric.text(row[f'{side}_hi'])}]"
    return text


def print_comparison(result: Comparison, console: Console | None = None) -> None:
    """The comparison as a rich table (one row per matched cell), then the cells of one
    side only and those that did not finish."""
    console = console or Console()
    m = METRICS[result.metric]
    direction = "higher" if m.higher_is_better else "lower"
    # a cell's name folds rather than being cut; the numbers never wrap
    table = Table(Column("cell", overflow="fold"),
                  *(Column(h, no_wrap=True) for h in (f"A {m.header}", f"B {m.header}", "B / A",
                                                      "verdict")),
                  title=f"bench compare: {m.header} ({direction} is better), threshold "
                        f"{result.threshold_pct:g}%")
    for _, r in result.rows.iterrows():
        ratio = "-" if pd.isna(r["ratio"]) else f"{r['ratio']:.3f} ({r['change_pct']:+.1f}%)"
        table.add_row(*(Text(t) for t in (r["cell"], _band(m, r, "a"), _band(m, r, "b"),
                                          ratio, r["verdict"])))
    console.print(table)
    lines = [f"A: {result.a} (commit {result.commits_a})",
             f"B: {result.b} (commit {result.commits_b})"]
    if result.one_sided:
        lines.append("matched without the fields only one side's cells have: "
                     + ", ".join(result.one_sided))
    if (result.rows[["a_repeats", "b_repeats"]] > 1).any(axis=None):
        lines.append("[min-max]: over a cell's repeats")
    for label, names in (("only in A", result.only_a), ("only in B", result.only_b),
                         ("not finished in A", result.not_ok_a),
                         ("not finished in B", result.not_ok_b)):
        if names:
            lines.append(f"{label} ({len(names)}): " + "; ".join(names))
    for line in lines:
        console.print(Text(line), overflow="fold")


def plot_comparison(result: Comparison, out_dir: Path, stem: str) -> list[Path]:
    """One horizontal bar per matched cell: B / A of the metric, a whisker from its
    smallest to its largest ratio over the repeats, the threshold dashed, regressions in
    red; written as out_dir/stem.png and .svg."""
    from bench.report import plots  # matplotlib (Agg) only when a figure is drawn

    m, rows = METRICS[result.metric], result.rows.iloc[::-1]
    colors = {"regressed": "tab:red", "improved": "tab:green"}
    fig, ax = plots.plt.subplots(figsize=(8, 1.2 + 0.35 * max(len(rows), 1)))
    y = np.arange(len(rows))
    ratio = rows["ratio"].to_numpy(dtype=float)
    err = np.vstack([ratio - rows["ratio_lo"].to_numpy(dtype=float),
                     rows["ratio_hi"].to_numpy(dtype=float) - ratio])
    ax.barh(y, ratio - 1.0, left=1.0, xerr=np.nan_to_num(err), capsize=3,
            color=[colors.get(v, "tab:gray") for v in rows["verdict"]])
    ax.plot(ratio, y, "o", color="black", markersize=3)  # seen where the bar has no length
    ax.axvline(1.0, color="black", linewidth=0.8)
    limit = 1.0 + (-1 if m.higher_is_better else 1) * result.threshold_pct / 100.0
    ax.axvline(limit, color="tab:red", linestyle="--", linewidth=0.8,
               label=f"regression threshold ({result.threshold_pct:g}%)")
    ax.set_yticks(y, rows["cell"], fontsize=8)
    ax.set_xlabel(f"{m.header}: B / A (1 = unchanged; {'higher' if m.higher_is_better else 'lower'}"
                  f" is better)")
    ax.set_title(f"B = {result.b} over A = {result.a}", fontsize=9)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # off the bars
    return plots.save(fig, out_dir, stem)


def register(sub) -> None:
    """Add `compare` to the subparsers `sub` of `python -m bench`."""
    p = sub.add_parser("compare", help="compare two result folders cell by cell (exit 1 on "
                                       "a regression)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a", type=Path, help="the results compared against (the baseline)")
    p.add_argument("b", type=Path, help="the results judged")
    p.add_argument("--metric", choices=tuple(METRICS), default="samples_per_s",
                   help="what is compared: samples_per_s (higher is better), loss (held-out, "
                        "lower is better), bytes (per step, lower is better) (default: "
                        "samples_per_s)")
    p.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD_PCT, metavar="PCT",
                   help=f"a cell regressed when its median is worse than A's by more than "
                        f"PCT percent (default: {DEFAULT_THRESHOLD_PCT:g})")
    p.add_argument("--out", type=Path, default=None, metavar="FILE.csv|FILE.json",
                   help="write the rows there too, and the figure beside it as FILE.png and "
                        "FILE.svg (default: no file of rows; the figure in B/figures)")
    p.set_defaults(func=run_compare)


def run_compare(args: argparse.Namespace) -> int:
    if args.out is not None and args.out.suffix not in (".csv", ".json"):
        raise ValueError(f"--out: expected a path ending in .csv or .json, got {args.out}")
    result = compare_results(args.a, args.b, args.metric, args.threshold)
    print_comparison(result)
    if result.rows.empty:
        print(f"error: no cell of {args.a} has the identity of a cell of {args.b} (listed "
              f"above): nothing to compare", file=sys.stderr)
        return EXIT_BAD_INPUT
    if result.rows["a"].isna().all() or result.rows["b"].isna().all():
        print(f"error: the matched cells have no {METRICS[args.metric].header} on one side "
              f"(loss: cells without an evaluation)", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.out is not None:
        text = result.rows.to_csv(index=False) if args.out.suffix == ".csv" else \
            records_json(result.rows)
        print(f"rows: {atomic_write_text(args.out, text)}")
        out_dir, stem = args.out.parent, args.out.stem
    else:
        out_dir, stem = Path(args.b) / "figures", f"compare_{args.metric}"
    from bench.report.plots import print_figure_paths

    print_figure_paths(plot_comparison(result, out_dir, stem))
    regressed = result.regressed
    if len(regressed):
        print(f"{len(regressed)} cell(s) regressed past {args.threshold:g}%: "
              f"{', '.join(regressed['cell'])}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK
