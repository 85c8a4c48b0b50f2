"""CI regression check: a short fixed-seed sweep compared with a committed baseline.

    python -m bench regress                    # run scenarios/sweeps/regress.yaml, compare
    python -m bench regress --update-baseline  # rewrite results/baseline/ deliberately
    python -m bench regress --compare-only results/regress   # compare existing results

Checks: each cell's bytes per step exactly equal to the baseline's, its final loss within
LOSS_ABS_TOL + LOSS_REL_TOL * |baseline|, status ok; aqsgd 2/4 over fp32 at the slow
scenario >= SPEEDUP_FLOOR where its links were shaped (docs/architecture/harness.md, "The
regression check", says why each rule, Note [speed-up floor] the floor).

Exit codes: 0 no regression, 1 regression (a table says what moved and by how
much), 2 bad input or no baseline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from aqsgd.filecache import atomic_write_text
from bench import REPO_ROOT, SCENARIO_DIR
from bench.launch.choice import LAUNCHERS
from bench.report.summary import summarize
from bench.report.tables import text_table
from bench.results.files import BYTE_KINDS, find_cells, load_records, provenance, write_json

__all__ = [
    "LOSS_ABS_TOL",
    "LOSS_REL_TOL",
    "SPEEDUP_FLOOR",
    "SLOW_SCENARIO",
    "Check",
    "baseline_rows",
    "compare",
    "format_checks",
    "register",
]

LOSS_ABS_TOL = 1e-3
LOSS_REL_TOL = 0.01
SPEEDUP_FLOOR = 1.0  # aqsgd fw2/bw4 over fp32 at 100mbps, shaped only; Note [speed-up floor]
SLOW_SCENARIO = "100mbps"
HEADLINE_LABEL = "aqsgd-fw2-bw4"
BYTE_COLUMNS = ("bytes_per_step", *(f"bytes_per_step_{k}" for k in BYTE_KINDS))
BASELINE_COLUMNS = ("cell", "scenario", "label", "replicas", "launcher", "shaped", "status",
                    *BYTE_COLUMNS, "final_loss", "throughput_samples_s", "speedup_vs_fp32")

SWEEP_FILE = SCENARIO_DIR / "sweeps" / "regress.yaml"
BASELINE_DIR = REPO_ROOT / "results" / "baseline"


@dataclass(frozen=True)
class Check:
    cell: str
    metric: str
    baseline: float | str | None
    measured: float | str | None
    tolerance: str
    ok: bool | None  # None: skipped

    @property
    def verdict(self) -> str:
        return "skip" if self.ok is None else ("ok" if self.ok else "REGRESSION")


def baseline_rows(summary: pd.DataFrame) -> pd.DataFrame:
    """The columns of a summary the baseline keeps (one row per cell), each cell by its
    sweep's name (`spec_name`: without the launcher's tag, so a local run compares with
    the netns baseline)."""
    rows = summary.copy()
    rows["cell"] = rows["spec_name"]
    for col in BASELINE_COLUMNS:
        if col not in rows.columns:
            rows[col] = pd.NA
    return rows[list(BASELINE_COLUMNS)].sort_values("cell").reset_index(drop=True)


def _num(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _fmt(value) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:.0f}" if value >= 1000 and value == int(value) else f"{value:.4g}"
    return "-" if value is None else str(value)


def _cell_checks(cell: str, base: pd.Series, new: pd.Series | None) -> list[Check]:
    if new is None:
        return [Check(cell, "present", "yes", "missing", "cell must run", False)]
    if new["status"] != "ok":
        return [Check(cell, "status", "ok", new["status"], "must be ok", False)]
    checks = []
    for col in BYTE_COLUMNS:
        b, m = _num(base[col]), _num(new[col])
        checks.append(Check(cell, col, b, m, "exact", b == m or (math.isnan(b) and
                                                                  math.isnan(m))))
    b, m = _num(base["final_loss"]), _num(new["final_loss"])
    tol = LOSS_ABS_TOL + LOSS_REL_TOL * abs(b)
    checks.append(Check(cell, "final_loss", b, m, f"+-{tol:.3g}",
                        not math.isnan(m) and abs(m - b) <= tol))
    return checks


def _speedup_check(new: pd.DataFrame) -> Check:
    rows = new[(new["scenario"] == SLOW_SCENARIO) & (new["label"] == HEADLINE_LABEL)]
    name = f"{SLOW_SCENARIO}__{HEADLINE_LABEL}"
    if rows.empty:
        return Check(name, "speedup_vs_fp32", f">= {SPEEDUP_FLOOR}", "missing",
                     f">= {SPEEDUP_FLOOR}", False)
    row = rows.iloc[0]
    measured = _num(row["speedup_vs_fp32"])
    if not bool(row["shaped"]):
        return Check(name, "speedup_vs_fp32", f">= {SPEEDUP_FLOOR}", measured,
                     f"unshaped ({row['launcher']}): not checked", None)
    return Check(name, "speedup_vs_fp32", f">= {SPEEDUP_FLOOR}", measured,
                 f">= {SPEEDUP_FLOOR}", not math.isnan(measured) and measured >= SPEEDUP_FLOOR)


def compare(baseline: pd.DataFrame, new: pd.DataFrame) -> list[Check]:
    """Every check of the new baseline rows against the committed ones."""
    checks: list[Check] = []
    new_by_cell = {r["cell"]: r for _, r in new.iterrows()}
    for _, base in baseline.iterrows():
        checks += _cell_checks(base["cell"], base, new_by_cell.get(base["cell"]))
    for cell in sorted(set(new_by_cell) - set(baseline["cell"])):
        checks.append(Check(cell, "present", "absent", "new cell",
                            "update the baseline", False))
    checks.append(_speedup_check(new))
    return checks


def format_checks(checks: list[Check], only_failures: bool = False) -> str:
    """A plain-text table (bench.report.tables.text_table): what moved and by how much."""
    headers = ["cell", "metric", "baseline", "measured", "change", "tolerance", "verdict"]
    rows = []
    for c in checks:
        if only_failures and c.ok is not False:
            continue
        b, m = _num(c.baseline), _num(c.measured)
        if math.isnan(b) or math.isnan(m):
            change = "-"
        elif b == 0:
            change = f"{m - b:+.4g}"
        else:
            change = f"{m - b:+.4g} ({(m - b) / abs(b):+.2%})"
        rows.append([c.cell, c.metric, _fmt(c.baseline), _fmt(c.measured), change,
                     c.tolerance, c.verdict])
    return text_table(headers, rows)


def _write_baseline(baseline_dir: Path, rows: pd.DataFrame, results_dir: Path) -> None:
    records = load_records([results_dir])
    prov = provenance(REPO_ROOT)  # before writing: the rewrite itself would make the tree dirty
    atomic_write_text(baseline_dir / "regress.csv", rows.to_csv(index=False))
    write_json(baseline_dir / "regress.json", {
        "sweep_file": str(SWEEP_FILE.relative_to(REPO_ROOT)),
        "tolerances": {"loss_abs": LOSS_ABS_TOL, "loss_rel": LOSS_REL_TOL,
                       "speedup_floor": SPEEDUP_FLOOR, "slow_scenario": SLOW_SCENARIO,
                       "headline": HEADLINE_LABEL},
        "provenance": prov,
        "launchers": sorted({r.cell.launcher for r in records}),
    })


def register(sub) -> None:
    """Add `regress` to the subparsers `sub` of `python -m bench`."""
    p = sub.add_parser("regress", help="short fixed-seed sweep compared "
                                              "with the committed baseline")
    p.add_argument("--update-baseline", action="store_true",
                   help="rewrite results/baseline/ from this run (deliberately)")
    p.add_argument("--sweep-file", type=Path, default=SWEEP_FILE,
                   help="the sweep to run (default scenarios/sweeps/regress.yaml)")
    p.add_argument("--baseline", type=Path, default=BASELINE_DIR,
                   help="directory of the committed baseline (default results/baseline)")
    p.add_argument("--out", type=Path, default=REPO_ROOT / "results" / "regress",
                   help="where the sweep's cells go (default results/regress)")
    p.add_argument("--compare-only", type=Path, metavar="RESULTS",
                   help="compare existing results instead of running the sweep (default: "
                        "run it)")
    p.add_argument("--launcher", default="auto", choices=LAUNCHERS,
                   help="launcher of the sweep's cells (default auto)")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=run_regress)


def _check_inputs(args) -> None:
    """Bad input refused before the sweep runs: a ValueError naming the flag."""
    baseline_path = args.baseline / "regress.csv"
    if not args.update_baseline and not baseline_path.is_file():
        raise ValueError(f"--baseline {args.baseline}: no baseline at {baseline_path}; write "
                         f"one with `python -m bench regress --update-baseline`")
    if args.compare_only is not None and not find_cells([args.compare_only]):
        raise ValueError(f"--compare-only {args.compare_only}: no result cells there (no "
                         f"*/meta.json); run `python -m bench regress` without it, or name "
                         f"the directory a regress sweep wrote")


def run_regress(args) -> int:
    from bench.harness.preflight import load_checked_sweep
    from bench.harness.run import run_sweep

    try:
        _check_inputs(args)
    except ValueError as err:
        print(f"error: {err}")
        return 2
    results_dir = args.compare_only
    if results_dir is None:
        results_dir = args.out
        outcomes = run_sweep(load_checked_sweep(args.sweep_file), results_dir,
                             launcher=args.launcher, fresh=True, quiet=args.quiet)
    summary = summarize([results_dir])
    if args.compare_only is None:  # this run's cells, not another launcher's beside them
        summary = summary[summary["cell"].isin({o.name for o in outcomes})]
    new = baseline_rows(summary)
    if args.update_baseline:
        failed = new[new["status"] != "ok"]
        if len(failed):
            print(f"not updating the baseline: {len(failed)} cell(s) failed: "
                  f"{', '.join(failed['cell'])}")
            return 1
        _write_baseline(args.baseline, new, results_dir)
        print(f"baseline updated: {args.baseline / 'regress.csv'} ({len(new)} cells)")
        print(format_checks([_speedup_check(new)]))
        return 0
    checks = compare(pd.read_csv(args.baseline / "regress.csv"), new)
    print(format_checks(checks))
    failures = [c for c in checks if c.ok is False]
    if failures:
        print(f"\nREGRESSION: {len(failures)} check(s) failed:\n")
        print(format_checks(failures, only_failures=True))
        return 1
    print(f"\nno regression ({len(checks)} checks)")
    return 0
