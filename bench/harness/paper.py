"""`python -m bench paper`: run (resume) the paper sweep, then draw its figures and
claims table (bench.report.paper) from the result files.

    python -m bench paper                          # run (resume) the paper sweep, draw
    python -m bench paper --no-run --results results/paper

Runs scenarios/sweeps/paper.yaml (10 Gbit/s down to 100 Mbit/s, every mode;
finished cells are reused).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench import REPO_ROOT
from bench.harness.run import run_sweep
from bench.harness.sweep import load_sweep
from bench.launch.choice import LAUNCHERS
from bench.report.paper import CLAIMS_FILE, draw_paper_figures
from bench.report.plots import print_figure_paths

__all__ = ["SWEEP_FILE", "add_arguments", "run_paper"]

SWEEP_FILE = REPO_ROOT / "scenarios" / "sweeps" / "paper.yaml"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sweep-file", type=Path, default=SWEEP_FILE)
    p.add_argument("--results", type=Path, help="default results/<sweep name>")
    p.add_argument("--out", type=Path, help="figures directory (default RESULTS/paper)")
    p.add_argument("--claims", type=Path, default=CLAIMS_FILE)
    p.add_argument("--no-run", action="store_true", help="draw from existing results only")
    p.add_argument("--launcher", default="auto", choices=LAUNCHERS)
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=run_paper)


def run_paper(args) -> int:
    """Run the sweep unless --no-run, then draw; 1 when a cell failed, else 0."""
    spec = load_sweep(args.sweep_file)
    results = args.results or REPO_ROOT / "results" / spec.name
    code = 0
    if not args.no_run:
        outcomes = run_sweep(spec, results, launcher=args.launcher, quiet=args.quiet)
        code = 1 if any(o.status == "failed" for o in outcomes) else 0
    out = args.out or results / "paper"
    figures = draw_paper_figures(results, out, args.claims)
    print(f"claims table: {out / 'paper.md'}")
    print_figure_paths(figures)
    return code
