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

import dataclasses
from pathlib import Path

import pandas as pd

from aqsgd.filecache import atomic_write_text
from aqsgd.model.config import ModelConfig
from aqsgd.train.config import RunConfig
from bench import REPO_ROOT
from bench.harness.cells import run_config
from bench.harness.convergence import plan, run_plan, write_report
from bench.harness.modes import parse_mode
from bench.harness.sweep import CellSpec, Workload
from bench.launch.choice import LAUNCHERS
from bench.perfmodel.cli import GPU_PROFILE as GPU_PROFILE_NAME
from bench.perfmodel.profile import PROFILE_DIR
from bench.report.claims import CLAIMS_FILE
from bench.report.paper import draw_paper_figures, write_model_report
from bench.report.plots import print_figure_paths
from bench.results.files import find_cells

__all__ = ["register", "run_paper", "model_configs", "write_model_results"]

# The performance model in the paper report: validated with this machine's profile,
# projected with a published-figures GPU profile (profiles/).
CPU_PROFILE = PROFILE_DIR / "cpu-2core.yaml"
GPU_PROFILE = PROFILE_DIR / f"{GPU_PROFILE_NAME}.yaml"  # bf16 compute, as GPUs fine-tune
# GPT2-XL as the paper ran it, and a larger model of GPT-3 6.7B's shape
PROJECTED_MODELS = {
    "gpt2-xl": "gpt2-xl",
    "gpt-6.7b": ModelConfig(n_layer=32, n_embd=4096, n_head=32, vocab_size=50257,
                            seq_len=1024),
}
# the paper's GPT-2 bits (fw 4 / bw 8) and the suite's default 2 / 4, beside fp32 and bf16
# (the speed-up references); with 2 replicas, the references and AQ-SGD with
# QuantizedAdam (the "with gradient compression" claim)
PROJECTED_MODES = ("fp32", "bf16", "directq:4/8", "aqsgd:4/8", "aqsgd:2/4")
PROJECTED_DP_MODES = ("fp32", "bf16", "aqsgd+gc:4/8")
WHATIF_SCENARIOS = ("100mbps", "500mbps")
MODEL_NOTE = ("Validation: the measured cells with this machine's profile "
              "(profiles/cpu-2core.yaml); projection and what-if: the published-figures GPU "
              f"profile profiles/{GPU_PROFILE_NAME}.yaml, bf16 compute (its assumptions are "
              "stated in the file). "
              "Equations and limits: docs/performance-model.md.")


def register(sub) -> None:
    """Add `paper` to the subparsers `sub` of `python -m bench`."""
    p = sub.add_parser("paper", help="paper-style figures with the "
                                          "published claims beside them")
    p.add_argument("--results", type=Path, help="throughput cells (default results/paper)")
    p.add_argument("--conv-results", type=Path,
                   help="convergence cells (default results/convergence)")
    p.add_argument("--out", type=Path, help="figures directory (default RESULTS/paper)")
    p.add_argument("--claims", type=Path, default=CLAIMS_FILE,
                   help="the published claims (default results/reference/claims.yaml)")
    p.add_argument("--no-run", action="store_true", help="draw from existing results only")
    p.add_argument("--launcher", default="auto", choices=LAUNCHERS,
                   help="launcher of the throughput cells (default auto; the convergence "
                        "cells run on the local launcher, unshaped)")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=run_paper)


def run_paper(args) -> int:
    """Run both sweeps unless --no-run, then draw; 1 when a cell failed, else 0. With
    --no-run and no throughput cells to draw from: a ValueError (bad input)."""
    if not args.claims.is_file():
        raise ValueError(f"--claims {args.claims}: no such file; the published claims are "
                         f"{CLAIMS_FILE} (the default)")
    p = plan("default", args.conv_results, args.results)
    if args.no_run and not (p.throughput_results.is_dir()
                            and find_cells([p.throughput_results])):
        raise ValueError(f"--no-run: no throughput cells under {p.throughput_results}; run "
                         f"them first (`python -m bench paper`) or name their directory "
                         f"with --results")
    code = 0
    if not args.no_run:
        code = run_plan(p, launcher=args.launcher, fresh=False, quiet=args.quiet)
    out = args.out or p.throughput_results / "paper"
    figures = draw_paper_figures(p.throughput_results, out, conv_dir=p.results,
                                 claims_path=args.claims)
    print(f"claims table: {out / 'paper.md'}")
    write_model_results(p.throughput_results, p.results, out)
    figures += write_model_report(out, args.claims, profile_note=MODEL_NOTE)
    print(f"performance model: {out / 'model.md'}")
    report = write_report(p.results, p.throughput_results, p.results / "report",
                          REPO_ROOT / "results" / "dynamic")
    print(f"convergence report: {report}")
    print_figure_paths(figures)
    return code


def model_configs(preset: str | ModelConfig, stages: int, replicas: int, micro_batch_size: int,
                  num_micro_batches: int, modes: list[str], *, schedule: str = "gpipe",
                  shape: dict | None = None) -> dict[str, RunConfig]:
    """{mode: RunConfig} as a cell of that mode and layout would run (bench.harness.cells),
    for the performance model; `preset` a preset name or a ModelConfig of its own, `shape`
    Workload's shape settings over the preset's. A mode that compresses data-parallel
    gradients gets at least 2 replicas."""
    model = None
    if isinstance(preset, ModelConfig):
        model, preset = preset, "gpt2-xl"  # the layout is checked again with `model`
    out = {}
    for text in modes:
        mode = parse_mode(text)
        reps = max(2, replicas) if mode.compresses_dp else replicas
        # the model's weights do not enter a step's time: random init needs no checkpoint
        workload = Workload(preset=preset, stages=stages, replicas=reps,
                            micro_batch_size=micro_batch_size,
                            num_micro_batches=num_micro_batches, schedule=schedule,
                            init_from=None, **(shape or {}))
        config = run_config(CellSpec("model", mode, workload), Path("model"))
        out[text] = dataclasses.replace(config, model=model) if model else config
    return out


def write_model_results(results: Path, conv_dir: Path, out: Path) -> list[Path]:
    """The performance model's files for the paper report, under `out`: its validation
    against every measured cell of these sweeps and of every other sweep under results/
    (model_validation.csv, with the CPU profile), the GPT2-XL and larger-model projection
    on the published-figures GPU profile (model_projection.csv), and the what-if tables
    of GPT2-XL on two scenarios (model_whatif.txt)."""
    from bench.net.scenario import load_scenario
    from bench.perfmodel import project as projection
    from bench.perfmodel.profile import load_profile
    from bench.perfmodel.validate import load_cells, validate_cells
    from bench.perfmodel.whatif import scenario_for, whatif, whatif_text
    from bench.results.files import SchemaError

    cpu, gpu = load_profile(CPU_PROFILE), load_profile(GPU_PROFILE)
    dirs = {results, conv_dir} | {p.parent for p in (REPO_ROOT / "results").glob("*/sweep.json")}
    cells, skipped = [], []
    for d in sorted(p for p in dirs if p.is_dir()):
        try:
            cells += load_cells([d])
        except SchemaError as err:  # cells of an older schema are measured again by a rerun
            skipped.append(f"{d}: {err}")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    if cells:
        table = validate_cells(cells, cpu, skipped)  # a shape cpu lacks: skipped
        table.to_csv(out / "model_validation.csv", index=False)
        written.append(out / "model_validation.csv")
    base = load_scenario("10gbps")
    frames = []
    for name, model in PROJECTED_MODELS.items():
        configs = model_configs(model, 8, 1, 1, 32, list(PROJECTED_MODES))
        configs |= {f"{m} dp2" if "+gc" not in m else m: c for m, c in model_configs(
            model, 8, 2, 1, 32, list(PROJECTED_DP_MODES)).items()}
        frames.append(projection.project(configs, gpu, base).assign(model=name))
    pd.concat(frames).to_csv(out / "model_projection.csv", index=False)
    written.append(out / "model_projection.csv")
    texts = []
    for scenario in WHATIF_SCENARIOS:
        configs = model_configs("gpt2-xl", 8, 1, 1, 32, list(PROJECTED_MODES))
        scn = scenario_for(load_scenario(scenario), 8, 1)
        texts.append(f"$ python -m bench model --preset gpt2-xl --stages 8 --profile "
                     f"{gpu.name} --scenario {scenario} --add-hosts\n"
                     + whatif_text(whatif(configs, scn, gpu), f"gpt2-xl on {scenario}"))
    text = "\n".join(texts) + "".join(f"\nskipped: {s}" for s in skipped)
    atomic_write_text(out / "model_whatif.txt", text + "\n")
    written.append(out / "model_whatif.txt")
    return written
