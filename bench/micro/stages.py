"""How a preset's stages compare with their traffic: per-stage compute time against
the time the fp32 activations and gradients of one micro-batch take on the link.

    python -m bench.micro.stages --preset tiny   # compute vs 100 Mbit/s fp32 traffic per stage
    python -m bench.micro.stages --preset gpt2 --stages 4 --micro-batch-size 1
    python -m bench.micro.stages --metrics runs/x/metrics   # a real run, all ranks running

Compression pays where traffic time over the slowest stage's compute is well above 1;
the `tiny` presets are sized with this measurement (aqsgd.model.config). Figures are
the median and interquartile range over `repeats` timed calls (bench.micro.timing).
Alone against a real run (`--metrics`): docs/micro.md, "Stages".
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from aqsgd.model.config import PRESETS, TINY_PIPELINE, ModelConfig
from aqsgd.model.gpt2 import GPT2Stage, init_stage, lm_loss
from bench.micro.timing import Samples, Timer

__all__ = [
    "RunStageTiming",
    "StageTiming",
    "comm_to_compute_ratio",
    "main",
    "measure_stages",
    "read_run_timings",
    "run_ratio",
    "run_table",
    "stage_table",
]


@dataclass(frozen=True)
class StageTiming:
    """Per-micro-batch costs of one stage; comm is the boundary after it (fwd + bwd)."""

    stage: int
    layers: range
    compute_ms: float  # forward + backward wall time, median
    compute_spread_ms: float  # interquartile range of the wall time
    compute_cpu_ms: float  # this process's CPU time, median (robust to a loaded host)
    boundary_bytes: int  # fp32 activation bytes sent forward (gradient back is the same)
    comm_ms: float  # (activation + gradient) at the link rate; 0 for the last stage


def _time_stage(
    module: GPT2Stage, cfg: ModelConfig, micro_batch_size: int, repeats: int
) -> tuple[Samples, Samples]:
    """Wall and CPU time of one forward + backward, each round on a fresh input."""
    b, seq, d = micro_batch_size, cfg.seq_len, cfg.n_embd
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, cfg.vocab_size, (b, seq), generator=gen)
    timer = Timer("wall", "cpu")
    for _ in timer.rounds(repeats, warmup=1):  # the first warms allocators and kernels
        x = ids if module.first else torch.randn(b, seq, d, generator=gen).requires_grad_()
        with timer.phase("fwd+bwd"):
            out = module(x)
            if module.last:
                lm_loss(out, ids).backward()
            else:
                out.backward(torch.ones_like(out))
        module.zero_grad(set_to_none=True)
    return timer.samples("fwd+bwd", "wall"), timer.samples("fwd+bwd", "cpu")


def measure_stages(
    cfg: ModelConfig,
    num_stages: int,
    micro_batch_size: int,
    threads: int = 1,
    link_rate_mbit: float = 100.0,
    repeats: int = 20,
) -> list[StageTiming]:
    """Forward+backward time of each stage (training mode, dropout on) on `threads`
    threads, and the fp32 traffic time of the boundary after it at `link_rate_mbit`."""
    if repeats < 2:
        raise ValueError(f"repeats must be >= 2 (for a spread), got {repeats!r}")
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        rows = []
        for s in range(num_stages):
            module = init_stage(cfg, s, num_stages, seed=0).train()
            wall, cpu = _time_stage(module, cfg, micro_batch_size, repeats)
            last = s == num_stages - 1
            nbytes = 0 if last else micro_batch_size * cfg.seq_len * cfg.n_embd * 4
            comm_ms = 2 * nbytes * 8 / (link_rate_mbit * 1e6) * 1e3
            rows.append(
                StageTiming(s, module.layers, wall.median_s * 1e3, wall.iqr_s * 1e3,
                            cpu.median_s * 1e3, nbytes, comm_ms)
            )  # fmt: skip
        return rows
    finally:
        torch.set_num_threads(previous)


def comm_to_compute_ratio(rows: list[StageTiming], cpu: bool = False) -> float:
    """Slowest boundary's fp32 traffic time over the slowest stage's compute time:
    the paper's regime needs this well above 1 (compression then pays)."""
    compute = max(r.compute_cpu_ms if cpu else r.compute_ms for r in rows)
    return max(r.comm_ms for r in rows) / compute


def stage_table(rows: list[StageTiming], title: str) -> Table:
    """One row per stage; the comm/compute ratios as the caption (two stages or more)."""
    table = Table(title=title, title_justify="left")
    for header in ("stage", "layers", "fwd+bwd ms", "iqr ms", "cpu ms", "boundary B",
                   "comm fwd+bwd ms"):  # fmt: skip
        table.add_column(header, justify="right")
    for r in rows:
        table.add_row(
            str(r.stage), f"{r.layers.start}-{r.layers.stop - 1}", f"{r.compute_ms:.1f}",
            f"{r.compute_spread_ms:.1f}", f"{r.compute_cpu_ms:.1f}", str(r.boundary_bytes),
            f"{r.comm_ms:.1f}",
        )  # fmt: skip
    if len(rows) > 1:
        table.caption = (
            f"comm / slowest compute: {comm_to_compute_ratio(rows):.2f} (wall), "
            f"{comm_to_compute_ratio(rows, cpu=True):.2f} (cpu)"
        )
        table.caption_justify = "left"
    return table


@dataclass(frozen=True)
class RunStageTiming:
    """One stage of a real run, per optimizer step (medians over the measured steps of
    its replica-0 rank): compute against the boundary after it at the link rate."""

    stage: int
    rank: int
    steps: int  # measured (not warm-up) steps the medians are over
    compute_s: float  # the worker's compute_s: forward + backward wall time of the step
    boundary_bytes: int  # activations sent to stage + 1 plus gradients received from it
    comm_s: float  # boundary_bytes at the link rate; 0 for the last stage

    def __post_init__(self) -> None:
        if self.steps < 1 or self.compute_s <= 0 or self.boundary_bytes < 0:
            raise ValueError(f"RunStageTiming of stage {self.stage}: steps >= 1, compute_s > 0 "
                             f"and boundary_bytes >= 0 expected, got {self.steps}, "
                             f"{self.compute_s!r}, {self.boundary_bytes}")


def read_run_timings(metrics_dir: str | Path, link_rate_mbit: float = 100.0
                     ) -> list[RunStageTiming]:
    """Per-stage compute and fp32-equivalent boundary time of a finished run, from its
    `metrics/rank{R}.jsonl` (replica 0; warm-up steps left out as the worker flagged them).
    The bytes are what the run sent, so the ratio is fp32's only for an fp32 run."""
    if not link_rate_mbit > 0:
        raise ValueError(f"link_rate_mbit must be > 0, got {link_rate_mbit!r}")
    paths = sorted(Path(metrics_dir).glob("rank*.jsonl"))
    if not paths:
        raise FileNotFoundError(f"{metrics_dir}: no rank*.jsonl metrics files")
    rows = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            records = [json.loads(line) for line in f if line.strip()]
        steps = [r for r in records if r["kind"] == "train" and not r["warmup"]]
        if not steps:
            raise ValueError(f"{path}: no measured (non-warm-up) train records")
        if steps[0]["replica"] != 0:
            continue
        nbytes = statistics.median(r["bytes_sent"]["activation"] + r["bytes_recv"]["gradient"]
                                   for r in steps)
        rows.append(RunStageTiming(
            stage=steps[0]["stage"], rank=steps[0]["rank"], steps=len(steps),
            compute_s=statistics.median(r["compute_s"] for r in steps),
            boundary_bytes=int(nbytes), comm_s=nbytes * 8 / (link_rate_mbit * 1e6)))
    return sorted(rows, key=lambda r: r.stage)


def run_ratio(rows: list[RunStageTiming]) -> float:
    """Slowest boundary's traffic time over the slowest stage's compute, all ranks running."""
    return max(r.comm_s for r in rows) / max(r.compute_s for r in rows)


def run_table(rows: list[RunStageTiming], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for header in ("stage", "rank", "steps", "compute s/step", "boundary B/step",
                   "comm s/step"):  # fmt: skip
        table.add_column(header, justify="right")
    for r in rows:
        table.add_row(str(r.stage), str(r.rank), str(r.steps), f"{r.compute_s:.4f}",
                      str(r.boundary_bytes), f"{r.comm_s:.4f}")
    if len(rows) > 1:
        table.caption = f"comm / slowest compute (all ranks running): {run_ratio(rows):.2f}"
        table.caption_justify = "left"
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.micro.stages", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    defaults = TINY_PIPELINE
    parser.add_argument("--stages", type=int, default=defaults.num_stages)
    parser.add_argument("--micro-batch-size", type=int, default=defaults.micro_batch_size)
    parser.add_argument("--threads", type=int, default=defaults.threads_per_stage)
    parser.add_argument("--link-rate-mbit", type=float, default=defaults.link_rate_mbit)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--seq-len", type=int, default=None, help="override the preset's seq_len")
    parser.add_argument("--metrics", type=Path, default=None,
                        help="a finished run's metrics directory: its stages' compute instead")
    args = parser.parse_args(argv)
    if args.metrics is not None:
        rows = read_run_timings(args.metrics, args.link_rate_mbit)
        title = f"run {args.metrics}: link={args.link_rate_mbit} Mbit/s"
        Console().print(run_table(rows, title))
        return
    cfg = PRESETS[args.preset]
    if args.seq_len is not None:
        cfg = cfg.replace(seq_len=args.seq_len)
    rows = measure_stages(
        cfg, args.stages, args.micro_batch_size, args.threads, args.link_rate_mbit, args.repeats
    )
    title = (
        f"preset={args.preset} stages={args.stages} micro_batch={args.micro_batch_size} "
        f"seq_len={cfg.seq_len} threads={args.threads} link={args.link_rate_mbit} Mbit/s"
    )
    Console().print(stage_table(rows, title))


if __name__ == "__main__":
    main()
