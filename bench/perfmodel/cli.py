"""The model's commands, wired into `python -m bench` (bench/__main__.py):

    python -m bench model --preset gpt2-xl --stages 8 --profile a100-bf16 --scenario 100mbps
    python -m bench model ... --rate-mbit 500           # every link of the scenario at 500
    python -m bench profile --out profiles/cpu-2core.yaml --cells results/paper
    python -m bench validate --profile cpu-2core results/paper results/regress

`model` needs the run config each mode gets, built as the harness builds a cell's
(`configs_for`, passed in by the command line so this package imports no harness).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from aqsgd.train.config import RunConfig
from bench.net.scenario import load_scenario
from bench.perfmodel.measure import measure_profile
from bench.perfmodel.profile import PROFILE_DIR, load_profile, write_profile
from bench.perfmodel.validate import TARGET, fit_comm, load_cells, validate_cells, worst_cell
from bench.perfmodel.whatif import scenario_for, whatif, whatif_text

__all__ = ["WHATIF_MODES", "add_model_arguments", "add_profile_arguments",
           "add_validate_arguments", "run_model", "run_profile", "run_validate"]

# The paper's GPT-2 bits (fw 4 / bw 8) and the suite's default aqsgd bits (2 / 4), beside
# fp32 and bf16 (the half-precision baseline).
WHATIF_MODES = ("fp32", "bf16", "directq:4/8", "aqsgd:4/8", "aqsgd:2/4")
ConfigsFor = Callable[..., dict[str, RunConfig]]


def add_model_arguments(p: argparse.ArgumentParser, configs_for: ConfigsFor) -> None:
    p.add_argument("--preset", default="gpt2-xl")
    p.add_argument("--stages", type=int, default=8)
    p.add_argument("--replicas", type=int, default=1)
    p.add_argument("--micro-batch-size", type=int, default=1)
    p.add_argument("--micro-batches", type=int, default=32,
                   help="micro-batches per step and replica (batch = this x micro-batch size)")
    p.add_argument("--profile", required=True, help="a profile file, or a name in profiles/")
    p.add_argument("--scenario", required=True, help="name in scenarios/ or a YAML path")
    p.add_argument("--rate-mbit", type=float, help="every default link of the scenario at R")
    p.add_argument("--modes", nargs="+", default=list(WHATIF_MODES))
    p.set_defaults(func=lambda args: run_model(args, configs_for))


def run_model(args, configs_for: ConfigsFor) -> int:
    profile = load_profile(args.profile)
    scenario = scenario_for(load_scenario(args.scenario), args.stages, args.replicas,
                            args.rate_mbit)
    configs = configs_for(args.preset, args.stages, args.replicas, args.micro_batch_size,
                          args.micro_batches, args.modes)
    rate = f" at {args.rate_mbit:g} Mbit/s" if args.rate_mbit else ""
    title = (f"{args.preset}, {args.stages} stages x {args.replicas} replica(s), micro-batch "
             f"{args.micro_batch_size} x {args.micro_batches}, scenario {scenario.name}{rate}, "
             f"profile {profile.name}")
    print(whatif_text(whatif(configs, scenario, profile), title), end="")
    return 0


def add_profile_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, default=PROFILE_DIR / "cpu-this-machine.yaml")
    p.add_argument("--name", default="cpu-this-machine")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--cells", type=Path, nargs="*", default=[],
                   help="measured cells whose fp32 cells fit the runtime's per-message cost "
                        "and overlap (default: none, comm left at its defaults)")
    p.set_defaults(func=run_profile)


def run_profile(args) -> int:
    profile = measure_profile(args.repeats, args.name)
    note = "comm: defaults (no cells given)"
    if args.cells:
        fp32 = [c for c in load_cells(args.cells) if c.meta["cell"]["mode"] == "fp32"]
        profile = profile.replace(comm=fit_comm(fp32, profile))
        note = (f"comm fitted on {len(fp32)} fp32 cells of "
                f"{', '.join(str(c) for c in args.cells)}")
    write_profile(profile, args.out, header=f"Written by `python -m bench profile`; {note}.\n"
                  "Format: docs/performance-model.md (Profile format).")
    print(f"profile: {args.out} ({note})")
    return 0


def add_validate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", type=Path, nargs="+", help="cells, sweeps or result trees")
    p.add_argument("--profile", required=True)
    p.add_argument("--csv", type=Path, help="also write the table as CSV")
    p.set_defaults(func=run_validate)


def run_validate(args) -> int:
    table = validate_cells(args.paths, load_profile(args.profile))
    if table.empty:
        print("no finished cells with measured steps")
        return 1
    cols = ["cell", "stages", "replicas", "measured_s", "predicted_s", "error",
            "predicted_profile_s", "error_profile"]
    print(table[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    worst = worst_cell(table)
    within = (table["error"].abs() <= TARGET).mean()
    print(f"within {TARGET:.0%}: {within:.0%} of {len(table)} cells; worst: {worst['cell']} "
          f"({worst['error']:+.1%})")
    if args.csv:
        table.to_csv(args.csv, index=False)
    return 0
