"""The harness command line.

    python -m bench run --scenario 100mbps                 # default grid, table, figures
    python -m bench run --scenario 100mbps --modes fp32 aqsgd:2/4 --steps 5
    python -m bench run --scenario 100mbps --dry-run       # cells, placement, time; no run
    python -m bench sweep scenarios/sweeps/paper.yaml      # resumable sweep
    python -m bench report results/100mbps                 # table + figures + report.md again
    python -m bench paper                                  # paper-style figures with claims
    python -m bench convergence [--size smoke]             # model quality: seeds, epochs
    python -m bench regress [--update-baseline]            # CI regression check
    python -m bench docker compose --scenario 100mbps      # the equivalent compose file
    python -m bench slurm --scenario 100mbps --sweep F --iface eth0   # an sbatch script
    python -m bench model --preset gpt2-xl --stages 8 --profile a100-bf16 --scenario 100mbps-8hosts
    python -m bench profile --cells results/paper          # this machine's profile
    python -m bench validate --profile cpu-2core results/paper   # predicted vs measured

Launchers (--launcher, bench.launch.choice.LAUNCHERS): auto (netns when root and
`ip netns` works, else local), netns, docker (containers, docs/docker.md), local, ssh
(real hosts: --hostfile FILE, and --no-shaping to measure the real links unshaped).

Exit codes: 0 all cells ok (regress: no regression), 1 a cell failed or a
regression was found, 2 bad input (unknown scenario, bad mode, bad file, a cell that
cannot run: every cell is checked before anything is brought up), with one or two lines
that name what was wrong, the value and how to fix it.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import time
import warnings
from pathlib import Path

from bench.harness.modes import DEFAULT_GRID, ModeSpec, parse_mode
from bench.harness.preflight import load_checked_sweep
from bench.harness.sweep import SweepSpec, Workload
from specfile import SpecError

__all__ = ["main", "build_parser", "finish_sweep", "launcher_options"]

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


# A mode has one spelling on the command line, in sweep files, tables and legends; the
# directory spelling reads too (docs/results-schema.md, "Mode spellings").
MODE_SYNTAX = ("a mode reads NAME[/GRAD][:FW/BW], e.g. fp32, aqsgd:2/4, aqsgd+gc/ef21:2/4, "
               "as tables print it, or as directories name it (aqsgd-fw2-bw4); "
               "docs/results-schema.md, \"Mode spellings\"")
# The field of a sweep a `bench run` flag sets (bench.harness.preflight names fields).
RUN_FLAGS = {"workload.stages": "--stages", "workload.gc_stages": "--stages",
             "workload.preset": "--preset", "workload.train_samples": "--train-samples",
             "workload.init_from": "--init-from", "workload.replicas": "--replicas",
             "scenarios[0]": "--scenario", "reference": "--reference"}


def _split_modes(values: list[str]) -> list[str]:
    return [m for v in values for m in v.split(",") if m.strip()]


def _parse_modes(values: list[str]) -> tuple[ModeSpec, ...]:
    """--modes as ModeSpecs; a ValueError naming the flag, the value and the syntax."""
    modes = []
    for text in _split_modes(values):
        try:
            modes.append(parse_mode(text))
        except (ValueError, TypeError) as err:
            raise ValueError(f"--modes {text!r}: {err}\n  {MODE_SYNTAX}") from None
    return tuple(modes)


def _add_run_options(p: argparse.ArgumentParser) -> None:
    from bench.launch.choice import LAUNCHERS

    p.add_argument("--launcher", default="auto", choices=LAUNCHERS,
                   help="default auto: netns when root and `ip netns` works, else local "
                        "(unshaped)")
    p.add_argument("--hostfile", type=Path, default=None,
                   help="--launcher ssh: the hosts, `HOST slots=N interface=DEV ...` a line, "
                        "or YAML (bench/launch/ssh/hostfile.py; default: none)")
    p.add_argument("--no-shaping", action="store_true",
                   help="--launcher ssh: shape nothing; probe and record the real links")
    p.add_argument("--fresh", action="store_true",
                   help="rerun every cell, even those finished earlier")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--dry-run", action="store_true",
                   help="check every cell, print the cells, their placement and the time "
                        "estimate; bring nothing up, write nothing")


def launcher_options(args) -> dict:
    """The options of the launcher `--launcher` names (bench.launch.choice.choose_launcher):
    only those given, so that another launcher is not handed the ssh launcher's."""
    options = {}
    if args.hostfile is not None:
        options["hostfile"] = args.hostfile
    if args.no_shaping:
        options["shaping"] = False
    return options


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    defaults = Workload()

    run = sub.add_parser("run", help="one scenario, every mode of the grid")
    run.add_argument("--scenario", required=True, help="name in scenarios/ or a YAML path")
    run.add_argument("--modes", nargs="+", default=list(DEFAULT_GRID),
                     help=f"modes as NAME[/GRAD][:FW/BW], e.g. aqsgd+gc/ef21:2/4, the "
                          f"spelling of tables and legends; a directory's aqsgd-fw2-bw4 "
                          f"reads too (docs/results-schema.md, \"Mode spellings\"; "
                          f"default: {' '.join(DEFAULT_GRID)})")
    run.add_argument("--steps", type=int, default=defaults.steps,
                     help=f"measured steps after the warm-up (default {defaults.steps})")
    run.add_argument("--warmup-epochs", type=int, default=defaults.warmup_epochs,
                     help="uncompressed epochs before the measured steps (default "
                          f"{defaults.warmup_epochs})")
    run.add_argument("--train-samples", type=int, default=defaults.train_samples,
                     help="training windows (one warm-up epoch = one pass over them; "
                          f"default {defaults.train_samples})")
    run.add_argument("--preset", default=None,
                     help="model preset (default: the tiny preset sized for the stages)")
    run.add_argument("--stages", type=int, default=None,
                     help="pipeline stages (default: the scenario's layout, e.g. 4; the "
                          "aqsgd+gc cells then run 2 stages x 2 replicas on the same hosts)")
    run.add_argument("--replicas", type=int, default=defaults.replicas,
                     help=f"data-parallel replicas of the pipeline (default {defaults.replicas})")
    run.add_argument("--seed", type=int, default=defaults.seed,
                     help=f"seed of data order, dropout and init (default {defaults.seed})")
    run.add_argument("--init-from", default=defaults.init_from,
                     help="starting weights: 'pretrained' (cached checkpoint, built once; "
                          "default), 'none' (random init) or a state-dict path")
    run.add_argument("--reference", default="loopback", metavar="SCENARIO",
                     help="also run fp32 on this (unshaped) scenario as the speed-up "
                          "reference; 'none' to skip (default loopback)")
    run.add_argument("--repeats", type=int, default=1,
                     help="run every cell this many times, interleaved (all cells once, then "
                          "again); tables and figures show the median with its min..max "
                          "(default 1)")
    run.add_argument("--out", type=Path, help="results directory (default results/<scenario>)")
    _add_run_options(run)

    sweep = sub.add_parser("sweep", help="scenarios x modes from a sweep file",
                           description="Run (resume) the cells of a sweep file. Its `modes:` "
                                       "read as --modes of `run` does: " + MODE_SYNTAX + ".")
    sweep.add_argument("file", type=Path)
    sweep.add_argument("--out", type=Path, help="default results/<sweep name>")
    _add_run_options(sweep)

    report = sub.add_parser("report", help="table, figures and report.md from results")
    report.add_argument("paths", nargs="+", type=Path)

    docker = sub.add_parser("docker", help="Docker helpers (docs/docker.md)")
    docker_sub = docker.add_subparsers(dest="docker_command", required=True)
    compose = docker_sub.add_parser("compose", help="write the compose file equivalent "
                                                     "to a Docker launcher run")
    compose.add_argument("--scenario", required=True, help="name in scenarios/ or a YAML path")
    compose.add_argument("--mode", default="aqsgd:2/4",
                         help="the mode of the cell the services run, placed as `bench run "
                              "--scenario S --modes MODE` places it: one service per rank, "
                              "the scenario's layout (default aqsgd:2/4)")
    compose.add_argument("--config", type=Path, default=None,
                         help="a run config of your own instead of the cell's (its stages x "
                              "replicas must fit the scenario's hosts; default: the cell's, "
                              "written beside the compose file as NAME.run.yaml)")
    compose.add_argument("--gpus", action="store_true",
                         help="reserve GPU i for rank i (NVIDIA runtime)")
    compose.add_argument("--image", default=None, help="worker image (default: the one "
                                                       "`make docker-image` builds)")
    compose.add_argument("--delay-mechanism", choices=("netem", "delayline"), default="netem",
                         help="how the services add the scenario's delay, jitter and loss: "
                              "netem on eth0 (hosts with the sch_netem module), or the "
                              "suite's userspace delay line on a TUN device (default netem)")
    compose.add_argument("--out", type=Path, default=Path("compose.yaml"),
                         help="where to write it (default compose.yaml)")
    compose.set_defaults(func=_cmd_docker_compose)

    _add_slurm_parser(sub)

    from bench.harness import convergence, paper, regress

    paper.add_arguments(sub.add_parser("paper", help="paper-style figures with the "
                                                     "published claims beside them"))
    convergence.add_arguments(sub.add_parser(
        "convergence", help="model quality: every mode for many epochs and seeds, held-out "
                            "loss per epoch, then the convergence report"))
    regress.add_arguments(sub.add_parser("regress", help="short fixed-seed sweep compared "
                                                         "with the committed baseline"))

    from bench.perfmodel import cli as model_cli

    model_cli.add_model_arguments(sub.add_parser(
        "model", help="what-if: predicted throughput, bytes, bottleneck per mode "
                      "(docs/performance-model.md)"), paper.model_configs)
    model_cli.add_profile_arguments(sub.add_parser(
        "profile", help="measure this machine's profile for the performance model"))
    model_cli.add_validate_arguments(sub.add_parser(
        "validate", help="the performance model's predicted against measured step times"))
    return parser


def finish_sweep(sweep_dir: Path, title: str | None = None) -> int:
    """Summary table (at the terminal's width), figures, report.md, summary.csv and
    summary.json of a sweep directory; the exit code."""
    from bench.report.linkbound import fp32_bounds
    from bench.report.plots import make_figures, print_figure_paths
    from bench.report.summary import SUMMARY_FILES, summarize
    from bench.report.tables import print_table, write_report
    from bench.results.files import load_metas

    summary = summarize([sweep_dir])
    print_table(summary)
    for bound in fp32_bounds(load_metas([sweep_dir]), summary):
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


def _results_dir(path: Path, flag: str) -> Path:
    """`path` if it can hold results (a directory, or nothing yet); a ValueError naming
    `flag` for an existing file."""
    if path.exists() and not path.is_dir():
        raise ValueError(f"{flag} {path} is a file, not a results directory: name a "
                         f"directory (it is created if missing)")
    return path


def _run_and_finish(spec: SweepSpec, out: Path | None, args, title: str) -> int:
    """Run (resume) a sweep into `out` (default results/<sweep name>), then print its
    table, figures and report; the exit code. With --dry-run: what would run, nothing
    done (bench.harness.run.dry_run)."""
    from bench import REPO_ROOT
    from bench.harness.run import dry_run, run_sweep

    out = _results_dir(out or REPO_ROOT / "results" / spec.name, "--out")
    if args.dry_run:
        dry_run(spec, out, launcher=args.launcher, fresh=args.fresh,
                launcher_options=launcher_options(args))
        return EXIT_OK
    started = time.monotonic()
    run_sweep(spec, out, launcher=args.launcher, fresh=args.fresh, quiet=args.quiet,
              launcher_options=launcher_options(args))
    code = finish_sweep(out, title=title)
    print(f"wall time: {time.monotonic() - started:.1f} s")
    return code


def _run_spec(args) -> SweepSpec:
    """The sweep `bench run` runs, every cell checked; a check that fails names the flag
    that decides it (RUN_FLAGS)."""
    from bench.harness.defaults import bench_workload
    from bench.harness.preflight import check_sweep
    from bench.net.scenario import load_scenario

    modes = _parse_modes(args.modes)
    scenario = load_scenario(args.scenario)
    try:
        workload = bench_workload(scenario, dataclasses.replace(
            Workload(), steps=args.steps, warmup_epochs=args.warmup_epochs,
            train_samples=args.train_samples, replicas=args.replicas, seed=args.seed,
            init_from=None if args.init_from in ("none", "") else args.init_from),
            stages=args.stages, preset=args.preset)
    except (ValueError, TypeError) as err:  # Workload's own checks name its fields
        field = re.search(r"Workload\.(\w+)", str(err))
        flag = f"--{field[1].replace('_', '-')}: " if field else ""
        raise ValueError(f"{flag}{err}") from None
    name = Path(args.scenario).stem
    reference = None if args.reference in ("none", "", name) else args.reference
    try:
        spec = SweepSpec(name=name, scenarios=(args.scenario,), modes=modes,
                         workload=workload, reference_scenario=reference,
                         repeats=args.repeats)
    except ValueError as err:  # SweepSpec.repeats
        raise ValueError(f"--repeats: {err}") from None
    try:
        check_sweep(spec)
    except SpecError as err:
        flag = RUN_FLAGS.get(err.field or "", "the run's options")
        raise ValueError(f"{flag}: {err.text}") from None
    return spec


def _cmd_run(args) -> int:
    spec = _run_spec(args)
    return _run_and_finish(spec, args.out, args, title=f"Benchmark: scenario {spec.name}")


def _cmd_sweep(args) -> int:
    spec = load_checked_sweep(args.file)  # every cell checked; errors name file and field
    return _run_and_finish(spec, args.out, args, title=f"Sweep {spec.name}")


def _compose_config(args, scenario, out: Path):
    """(run config, its host path): --config's, or that of the cell `bench run --scenario
    S --modes MODE` runs (its stages, preset and replicas), written beside `out`."""
    from aqsgd.train.config import load_config
    from bench.harness.cells import run_config, write_run_config
    from bench.harness.defaults import bench_workload
    from bench.launch.docker.compose import WORKSPACE

    if args.config is not None:
        return load_config(args.config), args.config.resolve()
    try:
        mode = parse_mode(args.mode)
    except (ValueError, TypeError) as err:
        raise ValueError(f"--mode {args.mode!r}: {err}\n  {MODE_SYNTAX}") from None
    spec = SweepSpec(name=scenario.name, scenarios=(args.scenario,), modes=(mode,),
                     workload=bench_workload(scenario, Workload()), gc_reference=False)
    cell = next(c for c in spec.cells() if c.mode == mode)
    config = run_config(cell, Path(WORKSPACE) / "runs" / f"compose-{cell.name}")
    path = write_run_config(config, out.with_name(f"{out.stem}.run.yaml"))
    return config, path.resolve()


def _cmd_docker_compose(args) -> int:
    from bench.launch.docker.compose import write_compose
    from bench.net.placement import PlacementError, place
    from bench.net.scenario import load_scenario

    if args.out.is_dir():
        raise ValueError(f"--out {args.out} is a directory: name the compose file to write, "
                         f"e.g. {args.out / 'compose.yaml'}")
    if args.image is not None and not args.image.strip():
        raise ValueError("--image '': name a worker image, or leave --image out for the one "
                         "`make docker-image` builds")
    scenario = load_scenario(args.scenario)
    config, config_path = _compose_config(args, scenario, args.out)
    stages, replicas = config.pipeline.stages, config.pipeline.replicas
    try:
        place(scenario, stages, replicas)
    except PlacementError as err:
        raise ValueError(f"--config {args.config}: {err}") from None
    n_hosts = stages * replicas
    path = write_compose(args.out, scenario, n_hosts=n_hosts, config=config_path,
                         gpus=args.gpus, gpu_count=n_hosts, image=args.image,
                         delay_mechanism=args.delay_mechanism)
    print(f"wrote {path}: {n_hosts} services ({stages} stages x {replicas} replica(s) on "
          f"{scenario.name}'s {scenario.n_hosts} hosts), run config {config_path}; check it "
          f"with `docker-compose -f {path} config`")
    return EXIT_OK


# -- `bench slurm`: the sbatch script of one scenario of a sweep (bench/launch/export/slurm.py)
def _add_slurm_parser(sub) -> None:
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
    slurm.set_defaults(func=_cmd_slurm)


def _cmd_slurm(args) -> int:
    """The cells' run configs and meta.json heads, then the sbatch script beside them."""
    import shlex

    from bench import REPO_ROOT
    from bench.harness.cells import run_config, write_run_config
    from bench.harness.checkpoint import prepare_checkpoints
    from bench.harness.meta import cell_dir_name, meta_head
    from bench.harness.preflight import check_sweep
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
    out = _results_dir((args.out or REPO_ROOT / "results" / spec.name).resolve(), "--out")
    options = SlurmOptions(iface=args.iface, shaping=not args.no_shaping,
                           netem=not args.no_netem, allow_drop=args.allow_drop,
                           allow_unshaped=args.allow_unshaped, partition=args.partition,
                           account=args.account, sbatch=tuple(args.sbatch_option))
    choice = LauncherChoice("slurm", "sbatch script of `bench slurm`", SlurmExport)
    # the cell directories carry the launcher's tag (bench.harness.meta, Note [cell identity])
    job = SlurmJob(spec.name, scenario, scenario_arg,
                   tuple(SlurmCell(cell_dir_name(c, choice), c.world_size, c.workload.timeout_s)
                         for c in cells),
                   out, REPO_ROOT, args.python, options)  # checked before anything is written
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


def _check_has_cells(path: Path) -> None:
    """A ValueError unless `path` holds result cells (bench.results.files.find_cells) and
    one of them can be read."""
    from bench.results.files import find_cells, load_metas

    if path.is_file():
        raise ValueError(f"{path} is a file: name a results directory (a sweep's, a cell's "
                         f"or a tree of them, e.g. results/100mbps)")
    cells = find_cells([path])
    if not cells:
        raise ValueError(f"no result cells under {path} (no */meta.json): write them with "
                         f"`python -m bench run --scenario NAME --out {path}` or "
                         f"`python -m bench sweep FILE --out {path}`")
    if not load_metas([path]):
        raise ValueError(f"no readable result cell under {path}: the meta.json of each of "
                         f"its {len(cells)} cell(s) is truncated or corrupt (named above); "
                         f"the next run of its sweep measures them again")


def _cmd_report(args) -> int:
    for path in args.paths:
        _check_has_cells(path)
    code = EXIT_OK
    for path in args.paths:
        code = max(code, finish_sweep(path))
    return code


def _name_skipped_files_once() -> None:
    """A result file the loaders skip (ResultFileWarning) is named once, on one line of
    stderr, however many readers meet it; other warnings show as Python shows them."""
    from bench.results.files import ResultFileWarning

    shown, python_show = set(), warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if not issubclass(category, ResultFileWarning):
            python_show(message, category, filename, lineno, file, line)
        elif str(message) not in shown:
            shown.add(str(message))
            print(f"warning: {message}", file=sys.stderr)

    warnings.simplefilter("always", ResultFileWarning)
    warnings.showwarning = show


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    with warnings.catch_warnings():  # the caller's warning settings come back after
        _name_skipped_files_once()
        return _dispatch(args)


def _dispatch(args) -> int:
    try:
        if args.command == "run":
            return _cmd_run(args)
        if args.command == "sweep":
            return _cmd_sweep(args)
        if args.command == "report":
            return _cmd_report(args)
        if getattr(args, "modes", None):  # bench model
            _parse_modes(args.modes)
        return args.func(args)
    # ScenarioError and SpecError are ValueErrors; OSError: a path that cannot be read or
    # written, named in the message
    except (ValueError, TypeError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
