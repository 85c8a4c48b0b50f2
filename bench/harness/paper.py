"""`python -m bench paper`: run (resume) the paper's throughput sweep and the convergence
sweep, then draw the paper figures and claims table (bench.report.paper) and the
convergence report (bench.report.convergence) from the result files.

    python -m bench paper                          # run (resume) both sweeps, draw
    python -m bench paper --no-run --results results/paper --conv-results results/convergence

The throughput cells (scenarios/sweeps/paper.yaml: 10 Gbit/s down to 100 Mbit/s, every
mode) give speed; the convergence cells (scenarios/sweeps/convergence.yaml, the default
size of `python -m bench convergence`, into the same results/convergence/) give the
quality verdicts, the loss figure and time-to-quality. Finished cells of either are
reused; both sweeps' times are stated before the first cell.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from aqsgd.model.config import ModelConfig
from aqsgd.train.config import RunConfig
from bench.harness.cells import run_config
from bench.harness.convergence import plan, run_plan, write_report
from bench.harness.modes import parse_mode
from bench.harness.sweep import CellSpec, Workload
from bench.launch.choice import LAUNCHERS
from bench.report.claims import CLAIMS_FILE
from bench.report.paper import draw_paper_figures
from bench.report.plots import print_figure_paths

__all__ = ["add_arguments", "run_paper", "model_configs"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", type=Path, help="throughput cells (default results/paper)")
    p.add_argument("--conv-results", type=Path,
                   help="convergence cells (default results/convergence)")
    p.add_argument("--out", type=Path, help="figures directory (default RESULTS/paper)")
    p.add_argument("--claims", type=Path, default=CLAIMS_FILE)
    p.add_argument("--no-run", action="store_true", help="draw from existing results only")
    p.add_argument("--launcher", default="auto", choices=LAUNCHERS,
                   help="launcher of the throughput cells (the convergence cells run on "
                        "the local launcher, unshaped)")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=run_paper)


def run_paper(args) -> int:
    """Run both sweeps unless --no-run, then draw; 1 when a cell failed, else 0."""
    p = plan("default", args.conv_results, args.results)
    code = 0
    if not args.no_run:
        code = run_plan(p, launcher=args.launcher, fresh=False, quiet=args.quiet)
    out = args.out or p.throughput_results / "paper"
    figures = draw_paper_figures(p.throughput_results, out, conv_dir=p.results,
                                 claims_path=args.claims)
    print(f"claims table: {out / 'paper.md'}")
    report = write_report(p.results, p.throughput_results, p.results / "report")
    print(f"convergence report: {report}")
    print_figure_paths(figures)
    return code


def model_configs(preset: str | ModelConfig, stages: int, replicas: int, micro_batch_size: int,
                  num_micro_batches: int, modes: list[str]) -> dict[str, RunConfig]:
    """{mode: RunConfig} as a cell of that mode and layout would run (bench.harness.cells),
    for the performance model; `preset` a preset name or a ModelConfig of its own. A mode
    that compresses data-parallel gradients gets at least 2 replicas."""
    model = None
    if isinstance(preset, ModelConfig):
        model, preset = preset, "tiny"
    out = {}
    for text in modes:
        mode = parse_mode(text)
        reps = max(2, replicas) if mode.compresses_dp else replicas
        workload = Workload(preset=preset, stages=stages, replicas=reps,
                            micro_batch_size=micro_batch_size,
                            num_micro_batches=num_micro_batches)
        config = run_config(CellSpec("model", mode, workload), Path("model"))
        out[text] = dataclasses.replace(config, model=model) if model else config
    return out
