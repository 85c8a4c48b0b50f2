"""`python -m bench docker compose`: the compose file equivalent to a Docker launcher run
of one cell (bench/launch/docker/compose.py writes it; docs/docker.md).

    python -m bench docker compose --scenario 100mbps [--mode aqsgd:2/4] [--out compose.yaml]

The cell and its run config are the harness's (as `bench run --scenario S --modes MODE`
places it), which is why this command lives here and not beside the launcher.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.harness.commands.options import MODE_SYNTAX
from bench.report.cli import EXIT_OK

__all__ = ["register"]


def register(sub) -> None:
    """Add `docker compose` to the subparsers `sub` of `python -m bench`."""
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
    compose.set_defaults(func=run_compose)


def _compose_config(args: argparse.Namespace, scenario, out: Path):
    """(run config, its host path): --config's, or that of the cell `bench run --scenario
    S --modes MODE` runs (its stages, preset and replicas), written beside `out`."""
    from aqsgd.train.config import load_config
    from bench.harness.cells import run_config, write_run_config
    from bench.harness.defaults import bench_workload
    from bench.harness.modes import parse_mode
    from bench.harness.sweep import SweepSpec, Workload
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


def run_compose(args: argparse.Namespace) -> int:
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
        placement = place(scenario, stages, replicas)
    except PlacementError as err:
        raise ValueError(f"--config {args.config}: {err}") from None
    n_hosts = stages * replicas
    rank_on = {p.host: p.rank for p in placement.ranks}
    path = write_compose(args.out, scenario, n_hosts=n_hosts, config=config_path,
                         gpus=args.gpus, gpu_count=n_hosts, image=args.image,
                         delay_mechanism=args.delay_mechanism,
                         ranks=tuple(rank_on[h] for h in range(n_hosts)))
    print(f"wrote {path}: {n_hosts} services ({stages} stages x {replicas} replica(s) on "
          f"{scenario.name}'s {scenario.n_hosts} hosts), run config {config_path}; check it "
          f"with `docker-compose -f {path} config`")
    return EXIT_OK
