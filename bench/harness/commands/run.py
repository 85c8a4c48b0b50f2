"""`python -m bench run --scenario NAME`: one scenario, every mode of the grid, then the
table, figures and report.md.

    python -m bench run --scenario 100mbps                 # default grid, table, figures
    python -m bench run --scenario 100mbps --modes fp32 aqsgd:2/4 --steps 5
    python -m bench run --scenario 100mbps --dry-run       # cells, placement, time; no run
    python -m bench run --scenario 100mbps --launcher ssh --hostfile H --dry-run --check-hosts
    python -m bench run --scenario 100mbps --plugin examples/plugins/randproj.py  # + its modes

The workload flags are Workload's settings (bench.harness.workload), each declared once
there; `--stages` and `--preset` default to the scenario's layout (bench.harness.defaults).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

from bench.harness.commands.options import (
    add_launch_options,
    add_plugin_option,
    load_plugin_option,
    parse_modes,
    run_and_finish,
)
from bench.harness.modes import DEFAULT_GRID, default_grid
from bench.harness.sweep import SweepSpec, Workload
from specfile import SpecError, add_flags, flag_fields

__all__ = ["register", "run_spec"]

# Every Workload setting is a flag (its declaration's type, default and help) but for
# gc_stages, which follows from the scenario's hosts (bench.harness.defaults); stages and
# preset default to the scenario's layout.
WORKLOAD_FLAGS = flag_fields(Workload, leave_out=("gc_stages",))
SCENARIO_DEFAULTS = {
    "stages": "the scenario's layout, e.g. 4; the aqsgd+gc cells then run 2 stages x 2 "
              "replicas on the same hosts",
    "preset": "the tiny preset sized for the stages"}
# The flag that sets a field of the sweep `bench run` builds (bench.harness.preflight names
# fields): each workload flag its own field, and these.
RUN_FLAGS = {"workload.gc_stages": "--stages", "scenarios[0]": "--scenario",
             "reference": "--reference",
             **{f"workload.{name}": f"--{name.replace('_', '-')}" for name in WORKLOAD_FLAGS}}


def register(sub) -> None:
    """Add `run` to the subparsers `sub` of `python -m bench`."""
    run = sub.add_parser("run", help="one scenario, every mode of the grid")
    run.add_argument("--scenario", required=True, help="name in scenarios/ or a YAML path")
    run.add_argument("--modes", nargs="+", default=None,
                     help=f"modes as NAME[/GRAD][:FW/BW], e.g. aqsgd+gc/ef21:2/4, the "
                          f"spelling of tables and legends; a directory's aqsgd-fw2-bw4 "
                          f"reads too (docs/results-schema.md, \"Mode spellings\"; "
                          f"default: {' '.join(DEFAULT_GRID)}, then every plug-in's modes)")
    add_plugin_option(run)
    add_flags(run, Workload, WORKLOAD_FLAGS, unset=SCENARIO_DEFAULTS)
    run.add_argument("--reference", default="loopback", metavar="SCENARIO",
                     help="also run fp32 on this (unshaped) scenario as the speed-up "
                          "reference; 'none' to skip (default loopback)")
    add_flags(run, SweepSpec, ("repeats",))
    run.add_argument("--out", type=Path, help="results directory (default results/<scenario>)")
    add_launch_options(run)
    run.set_defaults(func=run_scenario)


def run_spec(args: argparse.Namespace) -> SweepSpec:
    """The sweep `bench run` runs, every cell checked; a check that fails names the flag
    that decides it (RUN_FLAGS)."""
    from bench.harness.defaults import bench_workload
    from bench.harness.preflight import check_sweep
    from bench.net.scenario import load_scenario

    load_plugin_option(args)
    modes = parse_modes(args.modes if args.modes is not None else list(default_grid()))
    scenario = load_scenario(args.scenario)
    # a folder or model id brings its shape (config.json); a state-dict file takes the preset's
    if args.model is not None and args.preset is not None and not Path(args.model).is_file():
        raise ValueError(f"--preset {args.preset} beside --model {args.model}: the model's "
                         f"shape comes from its config.json; give one of them (a preset "
                         f"goes with a state-dict file)")
    try:
        given = {name: getattr(args, name) for name in WORKLOAD_FLAGS
                 if name not in SCENARIO_DEFAULTS}
        workload = bench_workload(scenario, dataclasses.replace(Workload(), **given),
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


def run_scenario(args: argparse.Namespace) -> int:
    spec = run_spec(args)
    return run_and_finish(spec, args.out, args, title=f"Benchmark: scenario {spec.name}")
