"""`python -m bench convergence`: what each compression costs in model quality.

    python -m bench convergence                  # the default size, then its report
    python -m bench convergence --size smoke     # seconds (the test suite runs it)
    python -m bench convergence --no-run         # the report from the cells there are

Runs (resumably) the sweep of scenarios/sweeps/convergence.yaml (a size NAME other than
the default is scenarios/sweeps/convergence-NAME.yaml): every mode fine-tuned for many
epochs over a large training split, several seeds, dropout as a knob (variants), the
held-out loss evaluated uncompressed before the first step and after every epoch. The
cells run on the local launcher, unshaped: the model a run converges to does not depend
on the link, only its wall time does, and that comes from the throughput sweep the file
names (`throughput: paper`), whose missing cells run first (on `--launcher`, shaped).
Both sweeps' times are stated before the first cell. Then the report
(bench.report.convergence.write_convergence_report) reads both result directories.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aqsgd.data.tokenizer import tokenizer_for
from aqsgd.filecache import default_cache_dir
from aqsgd.model.config import PRESETS
from aqsgd.model.pretrain import (
    MAX_PRETRAIN_PARAMS,
    PretrainConfig,
    checkpoint_path,
    estimate_s,
    existing_checkpoint,
)
from bench import REPO_ROOT, SCENARIO_DIR
from bench.harness.estimate import estimate_line
from bench.harness.preflight import load_checked_sweep
from bench.harness.run import CellOutcome, pending_cells, run_sweep
from bench.harness.sweep import SweepSpec
from bench.launch.choice import LAUNCHERS, choose_launcher
from bench.results.files import find_cells

__all__ = ["CONVERGENCE_LAUNCHER", "SIZES", "ConvergencePlan", "register", "plan",
           "pretrain_lines", "run_convergence", "run_plan", "state_times", "sweep_file",
           "write_report"]

SWEEPS_DIR = SCENARIO_DIR / "sweeps"
# default: every mode on tiny; depth: 2, 4, 8 stages of one 8-block model; size: the
# ladder of model sizes (docs/convergence-ladders.md); scratch: trained from random init
# to a target held-out loss (docs/convergence-scratch.md); each -smoke (and smoke) in seconds
SIZES = ("default", "smoke", "depth", "depth-smoke", "size", "size-smoke", "scratch",
         "scratch-smoke")
# unshaped, every rank on this machine: quality does not depend on the link
CONVERGENCE_LAUNCHER = "local"


def sweep_file(size: str) -> Path:
    """The sweep file of a size: convergence.yaml, or convergence-SIZE.yaml."""
    if size not in SIZES:
        raise ValueError(f"--size must be one of {', '.join(SIZES)}, got {size!r}")
    return SWEEPS_DIR / ("convergence.yaml" if size == "default" else f"convergence-{size}.yaml")


@dataclass(frozen=True)
class ConvergencePlan:
    """The two sweeps and where their results go; `throughput` None: none to run."""

    convergence: SweepSpec
    results: Path
    throughput: SweepSpec | None
    throughput_results: Path


def plan(size: str, results: Path | None = None, throughput_results: Path | None = None,
         with_throughput: bool = True) -> ConvergencePlan:
    """Load the size's sweep (and the throughput sweep it names, unless
    `with_throughput` is false); results default to results/<sweep name>/."""
    spec = load_checked_sweep(sweep_file(size))
    tp = None
    if spec.throughput is not None and with_throughput:
        tp = load_checked_sweep(SWEEPS_DIR / f"{spec.throughput}.yaml")
    tp_name = spec.throughput or "paper"
    return ConvergencePlan(spec, results or REPO_ROOT / "results" / spec.name, tp,
                           throughput_results or REPO_ROOT / "results" / tp_name)


def register(sub) -> None:
    """Add `convergence` to the subparsers `sub` of `python -m bench`."""
    p = sub.add_parser(
        "convergence", help="model quality: every mode for many epochs and seeds, held-out "
                            "loss per epoch, then the convergence report")
    p.add_argument("--size", default="default", choices=SIZES,
                   help="default: about 42 min on 2 cores; depth: pipeline depth; size: "
                        "model size; scratch: from random init to a target held-out loss "
                        "(each states its time before the first cell); smoke, "
                        "depth-smoke, size-smoke, scratch-smoke: seconds")
    p.add_argument("--results", type=Path, help="convergence cells (default results/<sweep>)")
    p.add_argument("--throughput-results", type=Path,
                   help="throughput cells, shared with `make paper` (default results/paper)")
    p.add_argument("--dynamic-results", type=Path, default=REPO_ROOT / "results" / "dynamic",
                   help="cells of the dynamic sweep (links that change), read, never run, for "
                        "time to quality under their schedules (default results/dynamic; "
                        "`python -m bench sweep scenarios/sweeps/dynamic.yaml` runs them)")
    p.add_argument("--inrun-results", type=Path,
                   default=REPO_ROOT / "results" / "convergence-inrun",
                   help="cells with loss and wall clock of one shaped run, read, never run, "
                        "for time to quality within one run (default "
                        "results/convergence-inrun; `python -m bench sweep "
                        "scenarios/sweeps/convergence-inrun.yaml` runs them)")
    p.add_argument("--out", type=Path, help="report and figures (default RESULTS/report)")
    p.add_argument("--no-throughput", action="store_true",
                   help="do not run missing throughput cells (time-to-quality uses those "
                        "there are)")
    p.add_argument("--no-run", action="store_true", help="report from existing cells only")
    p.add_argument("--launcher", default="auto", choices=LAUNCHERS,
                   help="launcher of the throughput cells (default auto; the convergence "
                        "cells run on the local launcher, unshaped)")
    p.add_argument("--fresh", action="store_true", help="rerun every cell")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run_convergence)


def pretrain_lines(spec: SweepSpec) -> list[str]:
    """One line per preset the sweep fine-tunes from a starting checkpoint that is not
    cached yet: its size and about how long pre-training it takes (once, on one core)."""
    lines = []
    presets = sorted({c.workload.checkpoint_preset for c in spec.cells()} - {None})
    for preset in presets:
        cfg = PRESETS[preset]
        if cfg.num_parameters() > MAX_PRETRAIN_PARAMS:
            continue  # GPT-2's published weights, not pre-trained here
        tokenizer = tokenizer_for(cfg.vocab_size, default_cache_dir())
        path = checkpoint_path(cfg, default_cache_dir(), tokenizer, PretrainConfig())
        if existing_checkpoint(path) is None:
            lines.append(f"pre-training preset {preset} ({cfg.num_parameters() / 1e6:.1f}M "
                         f"parameters) once first, about {estimate_s(cfg) / 60:.1f} min on "
                         f"an idle core; then cached in .cache/checkpoints")
    return lines


def state_times(p: ConvergencePlan, fresh: bool = False, launcher: str = "auto") -> list[str]:
    """The lines said before anything runs: the starting checkpoints still to pre-train,
    what each sweep still has to run (the throughput cells on `launcher`, the convergence
    cells on CONVERGENCE_LAUNCHER), how long."""
    lines = pretrain_lines(p.convergence)
    if p.throughput is not None:
        choice = choose_launcher(launcher)
        todo = pending_cells(p.throughput, p.throughput_results, choice, fresh=fresh)
        lines.append(f"{estimate_line(p.throughput, todo, p.throughput_results, choice)}; "
                     f"throughput cells for time-to-quality, into {p.throughput_results}")
    choice = choose_launcher(CONVERGENCE_LAUNCHER)
    todo = pending_cells(p.convergence, p.results, choice, fresh=fresh)
    lines.append(f"{estimate_line(p.convergence, todo, p.results, choice)}; into {p.results}")
    return lines


def run_plan(p: ConvergencePlan, *, launcher: str, fresh: bool, quiet: bool) -> int:
    """Run (resume) both sweeps; 1 when a cell failed, else 0."""
    for line in state_times(p, fresh, launcher):
        print(line)
    outcomes: list[CellOutcome] = []
    if p.throughput is not None:
        outcomes += run_sweep(p.throughput, p.throughput_results, launcher=launcher,
                              fresh=fresh, quiet=quiet)
    outcomes += run_sweep(p.convergence, p.results, launcher=CONVERGENCE_LAUNCHER,
                          fresh=fresh, quiet=quiet)
    failed = [o.name for o in outcomes if o.status == "failed"]
    if failed:
        print(f"{len(failed)} cell(s) failed: {', '.join(failed)}")
    return 1 if failed else 0


def write_report(conv_dir: Path, throughput_dir: Path, out: Path,
                 dynamic_dir: Path | None = None, inrun_dir: Path | None = None) -> Path:
    """The convergence report (bench.report.convergence) from the result dirs."""
    from bench.report.convergence import write_convergence_report

    return write_convergence_report(conv_dir, throughput_dir, out, dynamic_dir=dynamic_dir,
                                    inrun_dir=inrun_dir)


def run_convergence(args) -> int:
    """Run unless --no-run, then write the report; 1 when a cell failed, else 0. With
    --no-run and no convergence cells to report on: a ValueError (bad input)."""
    p = plan(args.size, args.results, args.throughput_results,
             with_throughput=not (args.no_throughput or args.no_run))
    if args.no_run and not (p.results.is_dir() and find_cells([p.results])):
        raise ValueError(f"--no-run: no convergence cells under {p.results}; run them first "
                         f"(`python -m bench convergence --size {args.size}`) or name their "
                         f"directory with --results")
    code = 0 if args.no_run else run_plan(p, launcher=args.launcher, fresh=args.fresh,
                                          quiet=args.quiet)
    out = args.out or p.results / "report"
    report = write_report(p.results, p.throughput_results, out, args.dynamic_results,
                          args.inrun_results)
    print(f"convergence report: {report}")
    if p.convergence.target_loss is not None:
        from bench.report.target import write_target_report

        target = write_target_report(p.results, p.convergence.target_loss, out)
        print(f"steps to target: {target}")
    return code
