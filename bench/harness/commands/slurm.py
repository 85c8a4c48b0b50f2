"""`python -m bench slurm`: the sbatch script running one scenario of a sweep on a Slurm
cluster, with each cell's run config and meta.json head beside it
(bench/launch/export/slurm.py writes the script; docs/multihost.md).

    python -m bench slurm --scenario 100mbps --sweep scenarios/sweeps/paper.yaml --iface eth0
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.harness.commands.options import results_dir
from bench.report.cli import EXIT_OK

__all__ = ["register"]


def register(sub) -> None:
    """Add `slurm` to the subparsers `sub` of `python -m bench`."""
    slurm = sub.add_parser("slurm", help="write the sbatch script running one scenario of a "
                                         "sweep on a Slurm cluster (docs/multihost.md)")
    slurm.add_argument("--scenario", required=True,
                       help="the sweep's scenario whose cells the job runs (one job each)")
    slurm.add_argument("--sweep", required=True, type=Path, help="the sweep file")
    slurm.add_argument("--out", type=Path, default=None,
                       help="results folder, on a filesystem every node mounts at the same "
                            "path; the script goes there too (default results/<sweep name>)")
    slurm.add_argument("--iface", default=None,
                       help="the nodes' data-network interface: shaped, and the workers' "
                            "(default: none: Slurm's node addresses, nothing shaped)")
    slurm.add_argument("--no-shaping", action="store_true",
                       help="with --iface: shape nothing; the cells record the real links")
    slurm.add_argument("--allow-unshaped", action="store_true",
                       help="where a node cannot shape (not root), run on the real links "
                            "and record them as real instead of failing the cells")
    slurm.add_argument("--no-netem", action="store_true", help="the nodes have no netem")
    slurm.add_argument("--allow-drop", action="store_true",
                       help="with --no-netem: run without the delay, jitter and loss")
    slurm.add_argument("--partition", default=None,
                       help="#SBATCH --partition (default: the cluster's default)")
    slurm.add_argument("--account", default=None,
                       help="#SBATCH --account (default: yours)")
    slurm.add_argument("--sbatch-option", action="append", default=[], metavar="OPTION",
                       help="one more #SBATCH line, e.g. --sbatch-option=--gpus-per-node=1 "
                            "(default: none; repeatable)")
    slurm.add_argument("--python", default=sys.executable,
                       help="the interpreter on the nodes (default: this one)")
    slurm.set_defaults(func=run_slurm)


def run_slurm(args: argparse.Namespace) -> int:
    """The cells' run configs and meta.json heads, then the sbatch script beside them."""
    import shlex

    from bench import REPO_ROOT
    from bench.harness.cells import run_config, write_run_config
    from bench.harness.meta import cell_dir_name, meta_head
    from bench.harness.prebuild import prepare_checkpoints
    from bench.harness.preflight import check_sweep, load_checked_sweep
    from bench.launch.choice import LauncherChoice
    from bench.launch.export.slurm import (
        SlurmCell,
        SlurmExport,
        SlurmJob,
        SlurmOptions,
        write_sbatch,
    )
    from bench.launch.export.slurm_job import CELL_HEAD
    from bench.results.files import provenance, write_json

    spec = load_checked_sweep(args.sweep)  # every cell checked; errors name file and field
    plan = check_sweep(spec)
    cells = [c for c in plan.cells if args.scenario in (c.scenario, c.scenario_name)]
    if not cells:
        names = sorted(dict.fromkeys(c.scenario_name for c in plan.cells))
        raise ValueError(f"--scenario {args.scenario}: sweep file {args.sweep} runs no cell "
                         f"of it; name one of its scenarios: {', '.join(names)}")
    scenario = plan.scenarios[cells[0].scenario]
    scenario_arg = cells[0].scenario
    if Path(scenario_arg).suffix in (".yaml", ".yml"):
        scenario_arg = str(Path(scenario_arg).resolve())
    if not args.python.strip():
        raise ValueError("--python '': name the interpreter on the nodes")
    out = results_dir((args.out or REPO_ROOT / "results" / spec.name).resolve(), "--out")
    options = SlurmOptions(iface=args.iface, shaping=not args.no_shaping,
                           netem=not args.no_netem, allow_drop=args.allow_drop,
                           allow_unshaped=args.allow_unshaped, partition=args.partition,
                           account=args.account, sbatch=tuple(args.sbatch_option))
    choice = LauncherChoice("slurm", "sbatch script of `bench slurm`", SlurmExport)
    # the cell directories carry the launcher's tag (bench.harness.meta, Note [cell identity])
    job = SlurmJob(spec.name, scenario, scenario_arg,
                   tuple(SlurmCell(cell_dir_name(c, choice), c.world_size, c.workload.timeout_s)
                         for c in cells),
                   out, REPO_ROOT, args.python, options,  # checked before anything is written
                   tuple(dict.fromkeys(p for c in cells for p in c.mode.plugins)))
    prepare_checkpoints(cells, REPO_ROOT, print)
    prov = provenance(REPO_ROOT)  # the job records the nodes' own when it runs
    for cell in cells:
        cell_dir = out / cell_dir_name(cell, choice)
        config = run_config(cell, cell_dir)
        write_run_config(config, cell_dir / "config.yaml")
        write_json(cell_dir / CELL_HEAD, {
            **meta_head(cell, spec.name, choice, scenario, [], prov, plan.placements[cell.name]),
            "scenario": scenario.to_dict(), "run_config": config.to_dict(),
            "launcher": {"choice": choice.name, "reason": choice.reason}})
    command = shlex.join(["python", "-m", "bench", "slurm", *sys.argv[2:]]) \
        if sys.argv[1:2] == ["slurm"] else "bench slurm"
    path = write_sbatch(job, command)
    print(f"wrote {path}: {len(cells)} cell(s) of scenario {scenario.name} on {job.nodes} "
          f"node(s), links {'shaped on ' + args.iface if job.shaped else 'real (not shaped)'}; "
          f"submit it with `sbatch {path}`")
    return EXIT_OK
