"""`python -m bench paper-replay`: run (resume) the replayed GPT2-XL sweep, then draw the
paper's throughput figure from its cells beside the performance model's curve and the
published claims (bench.report.paper_replay).

    python -m bench paper-replay                      # scenarios/sweeps/paper-replay.yaml
    python -m bench paper-replay --no-run --results results/paper-replay

Every stage of a replayed cell waits a GPU profile's times while its messages and links
are real (docs/replay.md); finished cells are reused, as `bench sweep` reuses them.
"""

from __future__ import annotations

from pathlib import Path

from bench import REPO_ROOT
from bench.launch.choice import LAUNCHERS
from bench.report.claims import CLAIMS_FILE
from bench.report.paper_replay import draw_replay_figures
from bench.report.plots import print_figure_paths
from bench.results.files import find_cells

__all__ = ["SWEEP_FILE", "register", "run_paper_replay"]

SWEEP_FILE = REPO_ROOT / "scenarios" / "sweeps" / "paper-replay.yaml"


def register(sub) -> None:
    """Add `paper-replay` to the subparsers `sub` of `python -m bench`."""
    p = sub.add_parser("paper-replay", help="the paper's throughput figure from replayed "
                                            "GPT2-XL cells, the model's curve and the claims")
    p.add_argument("--sweep", type=Path, default=SWEEP_FILE,
                   help="the sweep of replayed cells (default "
                        "scenarios/sweeps/paper-replay.yaml)")
    p.add_argument("--results", type=Path,
                   help="its cells (default results/<the sweep's name>)")
    p.add_argument("--out", type=Path, help="figure and table (default RESULTS/paper)")
    p.add_argument("--claims", type=Path, default=CLAIMS_FILE,
                   help="the published claims (default results/reference/claims.yaml)")
    p.add_argument("--no-run", action="store_true",
                   help="draw from existing cells only (default: run the sweep first)")
    p.add_argument("--launcher", default="auto", choices=LAUNCHERS,
                   help="launcher of the cells (default auto)")
    p.add_argument("--quiet", action="store_true", help="no per-cell lines (default: shown)")
    p.set_defaults(func=run_paper_replay)


def run_paper_replay(args) -> int:
    """Run the sweep unless --no-run, then draw; 1 when a cell failed, else 0. Bad input
    (no claims file, no sweep file to run, no cells to draw with --no-run): a ValueError."""
    from bench.harness.preflight import load_checked_sweep
    from bench.harness.run import run_sweep

    if not args.claims.is_file():
        raise ValueError(f"--claims {args.claims}: no such file; the published claims are "
                         f"{CLAIMS_FILE} (the default)")
    results = args.results
    code = 0
    if not args.no_run:
        if not args.sweep.is_file():
            raise ValueError(f"--sweep {args.sweep}: no such sweep file; name one, or draw "
                             f"from cells with --no-run --results DIR")
        spec = load_checked_sweep(args.sweep)
        results = results or REPO_ROOT / "results" / spec.name
        outcomes = run_sweep(spec, results, launcher=args.launcher, fresh=False,
                             quiet=args.quiet)
        code = int(any(o.status != "ok" for o in outcomes))
    results = results or REPO_ROOT / "results" / "paper-replay"
    if not (results.is_dir() and find_cells([results])):
        raise ValueError(f"no cells under {results}: run them first (`make paper-replay`) "
                         f"or name their directory with --results")
    out = args.out or results / "paper"
    paths = draw_replay_figures(results, out, args.claims)
    print(f"table: {out / 'paper-replay.md'}")
    print_figure_paths([p for p in paths if p.suffix != ".md"])
    return code
