"""How a preset's stages compare with their traffic: per-stage compute time against
the time the fp32 activations and gradients of one micro-batch take on the link.

    python -m aqsgd.model.measure --preset tiny   # compute vs 100 Mbit/s fp32 traffic per stage
    python -m aqsgd.model.measure --preset gpt2 --stages 4 --micro-batch-size 1

Compression pays where the ratio of traffic time to the slowest stage's compute is
well above 1 (the regime of the paper); the `tiny` preset and TINY_PIPELINE are sized
with this measurement (aqsgd.model.config).
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass

import torch
from rich.console import Console
from rich.table import Table

from aqsgd.model.config import PRESETS, TINY_PIPELINE, ModelConfig
from aqsgd.model.gpt2 import GPT2Stage, init_stage, lm_loss

__all__ = ["StageTiming", "comm_to_compute_ratio", "main", "measure_stages", "stage_table"]


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
) -> tuple[list[float], list[float]]:
    b, seq, d = micro_batch_size, cfg.seq_len, cfg.n_embd
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, cfg.vocab_size, (b, seq), generator=gen)
    wall, cpu = [], []
    for _ in range(repeats + 1):  # first call warms allocators and kernels
        x = ids if module.first else torch.randn(b, seq, d, generator=gen).requires_grad_()
        start, start_cpu = time.perf_counter(), time.process_time()
        out = module(x)
        if module.last:
            lm_loss(out, ids).backward()
        else:
            out.backward(torch.ones_like(out))
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        module.zero_grad(set_to_none=True)
    return wall[1:], cpu[1:]


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
            q = statistics.quantiles(wall, n=4)
            last = s == num_stages - 1
            nbytes = 0 if last else micro_batch_size * cfg.seq_len * cfg.n_embd * 4
            comm_ms = 2 * nbytes * 8 / (link_rate_mbit * 1e6) * 1e3
            rows.append(
                StageTiming(s, module.layers, statistics.median(wall) * 1e3, (q[2] - q[0]) * 1e3,
                            statistics.median(cpu) * 1e3, nbytes, comm_ms)
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m aqsgd.model.measure", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    defaults = TINY_PIPELINE
    parser.add_argument("--stages", type=int, default=defaults.num_stages)
    parser.add_argument("--micro-batch-size", type=int, default=defaults.micro_batch_size)
    parser.add_argument("--threads", type=int, default=defaults.threads_per_stage)
    parser.add_argument("--link-rate-mbit", type=float, default=defaults.link_rate_mbit)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--seq-len", type=int, default=None, help="override the preset's seq_len")
    args = parser.parse_args(argv)
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
