"""The model's commands, wired into `python -m bench` (bench/__main__.py):

    python -m bench model --preset gpt2-xl --stages 8 --scenario 100mbps-8hosts  # a100-bf16
    python -m bench model ... --rate-mbit 500           # every link of the scenario at 500
    python -m bench model ... --scenario 100mbps --add-hosts   # 8 stages on a 4-host file
    python -m bench profile --out profiles/cpu-2core.yaml --cells results/profile-fit
    python -m bench profile --from cpu-2core --name cpu-2core --out profiles/cpu-2core.yaml \
        --keep-comm --cells results/bench-100mbps     # refit the contention term only
    python -m bench validate --profile cpu-2core results/paper results/regress
    python -m bench model ... --json                   # the rows as JSON on stdout, no table
    python -m bench validate ... --csv out.csv         # the table, and its rows in out.csv

`model` gets each mode's run config from the command line (`configs_for`, so this
package imports no harness) and refuses what `bench run` refuses; bad input is a
ValueError naming the flag (exit 2). The columns of --json / --csv:
docs/results-schema.md; the rules of `model`: docs/performance-model.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from aqsgd.model.config import PRESETS, SHAPE_FIELDS, ModelConfig
from aqsgd.train.config import PipelineConfig, RunConfig
from bench.net.placement import PlacementError, place
from bench.net.scenario import NetworkScenario, load_scenario
from bench.perfmodel.contention import fit_contention
from bench.perfmodel.measure import measure_profile
from bench.perfmodel.profile import PROFILE_DIR, Profile, load_profile, write_profile
from bench.perfmodel.validate import (
    TARGET,
    compute_source,
    fit_comm,
    load_cells,
    validate_cells,
    worst_cell,
)
from bench.perfmodel.whatif import is_fp32, scenario_for, whatif, whatif_text
from bench.results.files import find_cells
from bench.results.records import records_json
from specfile import add_flags

__all__ = ["GPU_PROFILE", "WHATIF_MODES", "STDOUT", "add_model_arguments", "add_output_arguments",
           "write_outputs", "add_profile_arguments",
           "add_validate_arguments", "available_profiles", "find_profile", "run_model",
           "run_profile", "run_validate"]

# The paper's GPT-2 bits (fw 4 / bw 8) and the suite's default aqsgd bits (2 / 4), beside
# fp32 and bf16 (the half-precision baseline).
WHATIF_MODES = ("fp32", "bf16", "directq:4/8", "aqsgd:4/8", "aqsgd:2/4")
# `bench model`'s profile and the paper's projection's: GPUs in bf16 compute
GPU_PROFILE = "a100-bf16"
ConfigsFor = Callable[..., dict[str, RunConfig]]
Layout = tuple[int, int]  # (stages, replicas)


def available_profiles() -> list[str]:
    """The profile names under profiles/ (what `--profile NAME` accepts)."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def find_profile(name: str | Path) -> Profile:
    """The profile `name` names (a file, or a name under profiles/ without .yaml); a
    ValueError listing the available ones when there is none."""
    path = Path(name)
    if not path.suffix and not path.exists():
        path = PROFILE_DIR / f"{name}.yaml"
    if not path.is_file():
        raise ValueError(f"--profile {str(name)!r}: no profile at {path}; available: "
                         f"{', '.join(available_profiles())} (names in {PROFILE_DIR}), or a "
                         f"profile file's path (`python -m bench profile` measures this "
                         f"machine's)")
    return load_profile(path)


STDOUT = "-"  # --json / --csv without a path: to stdout, instead of the table


def add_output_arguments(p: argparse.ArgumentParser) -> None:
    """--json [PATH] and --csv [PATH] (module docstring)."""
    for flag, what in (("--json", "JSON (a list of one object per row, NaN as null)"),
                       ("--csv", "CSV (a header line, one line per row)")):
        p.add_argument(flag, nargs="?", const=STDOUT, default=None, metavar="PATH",
                       help=f"the rows as {what}: to stdout instead of the table with no "
                            f"PATH or '-', else to PATH beside the table (default: the "
                            f"table only)")


def _check_outputs(args) -> None:
    """Refuse both formats on stdout and a directory as PATH, before any work."""
    if args.json == STDOUT and args.csv == STDOUT:
        raise ValueError("--json and --csv both write to stdout: give one of them a PATH "
                         "(e.g. --csv rows.csv --json)")
    for flag, value in (("--json", args.json), ("--csv", args.csv)):
        if value not in (None, STDOUT) and Path(value).is_dir():
            raise ValueError(f"{flag} {value} is a directory: name the file to write, e.g. "
                             f"{Path(value) / ('rows' + flag.replace('--', '.'))}")


def write_outputs(args, table: pd.DataFrame, print_table: Callable[[], None]) -> None:
    """`table` as --json / --csv ask (module docstring); print_table() unless one of
    them goes to stdout."""
    texts = {"--json": lambda: records_json(table),
             "--csv": lambda: table.to_csv(index=False)}
    to_stdout = None
    for flag, value in (("--json", args.json), ("--csv", args.csv)):
        if value == STDOUT:
            to_stdout = flag
        elif value is not None:
            Path(value).write_text(texts[flag]())
    if to_stdout is None:
        print_table()
    else:
        sys.stdout.write(texts[to_stdout]())


def add_model_arguments(p: argparse.ArgumentParser, configs_for: ConfigsFor) -> None:
    p.add_argument("--preset", default="gpt2-xl", choices=list(PRESETS),
                   help="model preset (default gpt2-xl)")
    p.add_argument("--stages", type=int, default=8, help="pipeline stages (default 8)")
    p.add_argument("--replicas", type=int, default=1,
                   help="data-parallel replicas (default 1; aqsgd+gc runs at least 2, and "
                        "fp32 then runs that layout too)")
    p.add_argument("--micro-batch-size", type=int, default=1,
                   help="samples per micro-batch (default 1)")
    p.add_argument("--micro-batches", type=int, default=32,
                   help="micro-batches per step and replica (default 32; batch = this x "
                        "micro-batch size)")
    add_flags(p, PipelineConfig, ("schedule",))
    # a shape without a checkpoint: each of the preset's unless given
    add_flags(p, ModelConfig, SHAPE_FIELDS, unset={n: "the preset's" for n in SHAPE_FIELDS})
    p.add_argument("--profile", default=GPU_PROFILE,
                   help=f"a profile file, or a name in profiles/ "
                        f"({', '.join(available_profiles())}) (default {GPU_PROFILE}: "
                        f"A100s in bf16 compute, as GPUs fine-tune)")
    p.add_argument("--scenario", required=True, help="name in scenarios/ or a YAML path")
    p.add_argument("--rate-mbit", type=float,
                   help="every default link of the scenario at R Mbit/s (default: the "
                        "scenario's own rates)")
    p.add_argument("--add-hosts", action="store_true",
                   help="give the scenario's default link to the hosts a layout needs and "
                        "the scenario lacks (default: such a layout is refused, as `bench "
                        "run` refuses it)")
    p.add_argument("--modes", nargs="+", default=list(WHATIF_MODES),
                   help=f"modes as NAME[/GRAD][:FW/BW] (default {' '.join(WHATIF_MODES)})")
    add_output_arguments(p)
    p.set_defaults(func=lambda args: run_model(args, configs_for))


def _check_model_args(args) -> None:
    for flag, value in (("--stages", args.stages), ("--replicas", args.replicas),
                        ("--micro-batch-size", args.micro_batch_size),
                        ("--micro-batches", args.micro_batches)):
        if value < 1:
            raise ValueError(f"{flag} must be >= 1, got {value}")
    try:
        blocks = model_shape(args).n_layer
    except ValueError as err:  # e.g. heads that do not divide the width
        given = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in shape_args(args).items())
        raise ValueError(f"{given} over --preset {args.preset}: {err}") from None
    if args.stages > blocks:
        raise ValueError(f"--stages {args.stages}: the model ({args.preset}"
                         f"{' reshaped' if shape_args(args) else ''}) has {blocks} blocks (a "
                         f"stage needs at least one): at most {blocks} stages, or a deeper "
                         f"--preset or --n-layer")


def shape_args(args) -> dict:
    """The shape flags given (--n-layer, --n-embd, ...), by ModelConfig field."""
    return {k: getattr(args, k) for k in SHAPE_FIELDS if getattr(args, k) is not None}


def model_shape(args) -> ModelConfig:
    """The preset's shape with the shape flags over it; ModelConfig's ValueError."""
    return PRESETS[args.preset].replace(**shape_args(args))


def _layout(config: RunConfig) -> Layout:
    return config.pipeline.stages, config.pipeline.replicas


def _rows(args, configs_for: ConfigsFor) -> list[tuple[str, RunConfig]]:
    """Every mode's config, and fp32 at each other layout a mode runs (aqsgd+gc's
    replicas) just before that mode, so each row has fp32 of its own shape."""
    shape = dict(schedule=args.schedule, shape=shape_args(args))
    configs = configs_for(args.preset, args.stages, args.replicas, args.micro_batch_size,
                          args.micro_batches, list(args.modes), **shape)
    rows: list[tuple[str, RunConfig]] = []
    have = {_layout(c) for c in configs.values() if is_fp32(c)}
    for mode, config in configs.items():
        layout = _layout(config)
        if have and layout not in have:
            stages, replicas = layout
            rows.append(("fp32", configs_for(args.preset, stages, replicas,
                                             args.micro_batch_size, args.micro_batches,
                                             ["fp32"], **shape)["fp32"]))
            have.add(layout)
        rows.append((mode, config))
    return rows


def _check_hosts(rows: list[tuple[str, RunConfig]], scenario: NetworkScenario) -> None:
    for mode, config in rows:
        stages, replicas = _layout(config)
        try:
            place(scenario, stages, replicas)
        except PlacementError as err:
            raise ValueError(f"mode {mode} ({stages} stages x {replicas} replica(s)): {err}; "
                             f"or --add-hosts to give the scenario's default link to the "
                             f"hosts it lacks") from None


def run_model(args, configs_for: ConfigsFor) -> int:
    _check_model_args(args)
    _check_outputs(args)
    profile = find_profile(args.profile)
    scenario = load_scenario(args.scenario)
    rows = _rows(args, configs_for)
    if not args.add_hosts:
        _check_hosts(rows, scenario)
    try:
        scenario = scenario_for(scenario, args.stages, args.replicas, args.rate_mbit)
    except ValueError as err:  # the rate out of the scenario file's bounds
        raise ValueError(f"--rate-mbit {args.rate_mbit:g}: {err}") from None
    rate = f" at {args.rate_mbit:g} Mbit/s" if args.rate_mbit else ""
    model = model_shape(args)
    reshaped = (f" reshaped to {model.n_layer} x {model.n_embd} ({model.n_head} heads, "
                f"vocabulary {model.vocab_size}, sequence {model.seq_len})"
                if shape_args(args) else "")
    title = (f"{args.preset}{reshaped}, {args.stages} stages x {args.replicas} replica(s), "
             f"{args.schedule}, micro-batch {args.micro_batch_size} x {args.micro_batches}, "
             f"scenario {scenario.name}{rate}, profile {profile.name} ({profile.precision} "
             f"compute)")
    results = whatif(rows, scenario, profile)
    context = {"preset": args.preset, **shape_args(args), "schedule": args.schedule,
               "micro_batch_size": args.micro_batch_size,
               "micro_batches": args.micro_batches, "scenario": scenario.name,
               "rate_mbit": args.rate_mbit, "profile": profile.name,
               "precision": profile.precision}
    table = pd.DataFrame([{**dataclasses.asdict(r), **context} for r in results])
    write_outputs(args, table, lambda: print(whatif_text(results, title), end=""))
    return 0


def add_profile_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, default=PROFILE_DIR / "cpu-this-machine.yaml",
                   help="the profile file to write (default profiles/cpu-this-machine.yaml)")
    p.add_argument("--name", default="cpu-this-machine",
                   help="the profile's name (default cpu-this-machine)")
    p.add_argument("--repeats", type=int, default=10,
                   help="timed calls per measurement (default 10)")
    p.add_argument("--cells", type=Path, nargs="*", default=[],
                   help="measured cells: their fp32 cells fit the runtime's per-message cost "
                        "and overlap, then every cell of real compute the contention term "
                        "(default: none, comm at its defaults and no contention term)")
    p.add_argument("--from", dest="start", metavar="PROFILE",
                   help="refit this profile (a file or a name in profiles/) from --cells "
                        "instead of measuring the stages again (default: measure)")
    p.add_argument("--keep-comm", action="store_true",
                   help="keep the profile's comm and fit the contention term only (with "
                        "--from; default: fit both)")
    p.set_defaults(func=run_profile)


def run_profile(args) -> int:
    """Bad input is refused before the (minutes of) measuring."""
    if args.repeats < 1:
        raise ValueError(f"--repeats must be >= 1, got {args.repeats}")
    if not args.name.strip():
        raise ValueError("--name '': name the profile (it is the file's `name`)")
    if args.out.is_dir():
        raise ValueError(f"--out {args.out} is a directory: name the profile file, e.g. "
                         f"{args.out / (args.name + '.yaml')}")
    if args.keep_comm and not args.start:
        raise ValueError("--keep-comm keeps the comm of the profile --from names: give --from")
    cells = [c for c in load_cells(args.cells) if compute_source(c) == "real"]
    fp32 = [c for c in cells if c.record.cell.mode == "fp32"]
    if args.cells and not fp32 and not args.keep_comm:
        raise ValueError(f"--cells {' '.join(map(str, args.cells))}: no finished fp32 cell "
                         f"of real compute with measured steps to fit the runtime's costs on; "
                         f"name the results of `make paper` or `bench run`, or leave --cells "
                         f"out")
    if args.start and not args.cells:
        raise ValueError(f"--from {args.start}: name the --cells to refit it from")
    profile = (find_profile(args.start).replace(name=args.name) if args.start
               else measure_profile(args.repeats, args.name))
    note = "comm: defaults (no cells given)"
    if args.cells:
        where = ", ".join(str(c) for c in args.cells)
        if not args.keep_comm:
            profile = profile.replace(comm=fit_comm(fp32, profile))
        note = ("comm kept" if args.keep_comm
                else f"comm fitted on {len(fp32)} fp32 cells of {where}")
        if profile.cores is not None:
            fitted_on = (f"{len(cells)} cells of real compute of {where} (fitted "
                         f"{datetime.date.today().isoformat()}, load average then "
                         + ", ".join(f"{x:.2f}" for x in os.getloadavg()) + ")")
            profile = profile.replace(contention=fit_contention(cells, profile, fitted_on))
            note += f"; contention fitted on {len(cells)} cells of real compute of {where}"
    write_profile(profile, args.out, header=f"Written by `python -m bench profile`; {note}.\n"
                  "Format: docs/performance-model.md (Profile format).")
    print(f"profile: {args.out} ({note})")
    return 0


def add_validate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", type=Path, nargs="+", help="cells, sweeps or result trees")
    p.add_argument("--profile", required=True,
                   help=f"a profile file, or a name in profiles/ "
                        f"({', '.join(available_profiles())})")
    add_output_arguments(p)
    p.set_defaults(func=run_validate)


VALIDATE_COLUMNS = ("cell", "compute", "schedule", "stages", "replicas", "measured_s",
                    "predicted_s", "error", "predicted_profile_s", "error_profile",
                    "wait_overrun")


def _print_validation(table: pd.DataFrame) -> None:
    print(table[list(VALIDATE_COLUMNS)].to_string(index=False,
                                                  float_format=lambda v: f"{v:.3f}"))
    for replayed, rows in table.groupby(table["compute"] != "real", sort=True):
        worst = worst_cell(rows)
        ok = int((rows["error"].abs() <= TARGET).sum())
        alone = int((rows["error_profile"].abs() <= TARGET).sum())
        what = "replayed cells" if replayed else "real-compute cells"
        source = "the times they waited" if replayed else "the profile"
        print(f"{what}: {ok} of {len(rows)} within {TARGET:.0%} in situ, {alone} of "
              f"{len(rows)} from {source}; worst in situ: {worst['cell']} "
              f"({worst['error']:+.1%})")


def run_validate(args) -> int:
    _check_outputs(args)
    profile = find_profile(args.profile)
    for path in args.paths:
        if not find_cells([path]):
            raise ValueError(f"no result cells under {path} (no */meta.json): name the "
                             f"results of a run or sweep, e.g. results/paper")
    table = validate_cells(args.paths, profile)
    if table.empty:
        raise ValueError(f"no finished cell with measured steps under "
                         f"{', '.join(map(str, args.paths))}: a failed cell, one without "
                         f"measured steps and one whose files cannot be read (named above) "
                         f"have nothing to validate")
    write_outputs(args, table, lambda: _print_validation(table))
    return 0
