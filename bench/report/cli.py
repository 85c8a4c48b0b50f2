"""`python -m bench report`: the table, figures and report.md of result folders again,
and `finish_sweep`, what every command that ran cells prints at its end.

    python -m bench report results/100mbps results/paper
    finish_sweep(Path("results/100mbps"), title="Benchmark: scenario 100mbps")  # exit code

The exit codes of `python -m bench` live here, the lowest room with a command:
0 every cell ok, 1 a cell failed, 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["EXIT_OK", "EXIT_FAILED", "EXIT_BAD_INPUT", "finish_sweep", "register"]

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def register(sub) -> None:
    """Add `report` to the subparsers `sub` of `python -m bench`."""
    report = sub.add_parser("report", help="table, figures and report.md from results")
    report.add_argument("paths", nargs="+", type=Path)
    report.set_defaults(func=run_report)


def finish_sweep(sweep_dir: Path, title: str | None = None) -> int:
    """Summary table (at the terminal's width), figures, report.md, summary.csv and
    summary.json of a sweep directory; the exit code."""
    from bench.report.linkbound import fp32_bounds
    from bench.report.plots import make_figures, print_figure_paths
    from bench.report.summary import SUMMARY_FILES, summarize
    from bench.report.tables import print_table, write_report
    from bench.results.files import load_records

    summary = summarize([sweep_dir])
    print_table(summary)
    for bound in fp32_bounds(load_records([sweep_dir]), summary):
        print(bound.text())
    figures = make_figures([sweep_dir], sweep_dir / "figures")
    report = write_report(sweep_dir, summary, figures, title=title)
    print(f"report: {report}")
    print(f"summary for scripts: {', '.join(str(sweep_dir / n) for n in SUMMARY_FILES)}")
    print_figure_paths(figures)
    failed = summary[summary["status"] != "ok"]
    if len(failed):
        print(f"{len(failed)} cell(s) failed: {', '.join(failed['cell'])}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _check_has_cells(path: Path) -> None:
    """A ValueError unless `path` holds result cells (bench.results.files.find_cells) and
    one of them can be read."""
    from bench.results.files import find_cells, load_records

    if path.is_file():
        raise ValueError(f"{path} is a file: name a results directory (a sweep's, a cell's "
                         f"or a tree of them, e.g. results/100mbps)")
    cells = find_cells([path])
    if not cells:
        raise ValueError(f"no result cells under {path} (no */meta.json): write them with "
                         f"`python -m bench run --scenario NAME --out {path}` or "
                         f"`python -m bench sweep FILE --out {path}`")
    if not load_records([path]):
        raise ValueError(f"no readable result cell under {path}: the meta.json of each of "
                         f"its {len(cells)} cell(s) is truncated or corrupt (named above); "
                         f"the next run of its sweep measures them again")


def run_report(args: argparse.Namespace) -> int:
    for path in args.paths:
        _check_has_cells(path)
    code = EXIT_OK
    for path in args.paths:
        code = max(code, finish_sweep(path))
    return code
