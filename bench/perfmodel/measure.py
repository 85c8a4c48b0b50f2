"""Measure this machine's profile: per-stage forward, backward and optimizer time of the
tiny presets (one stage alone, one thread, as each rank runs), and the compressors' cost
per element; the communication part (`comm`) is fitted from measured cells afterwards
(`bench.perfmodel.validate.fit_comm`).

    python -m bench profile --out profiles/cpu-2core.yaml --cells results/profile-fit

Each figure is the median over `repeats` timed calls after one untimed call, in CPU time
of this process (bench.micro.timing's "cpu" clock, `time.process_time`, one thread): the
work itself, not what other load on a shared machine adds to the wall clock. A stage
timed alone has a core to itself; the profile's `cores` (this machine's CPU count) lets
the simulation share them among the ranks of a cell that compute at the same time.
"""

from __future__ import annotations

import datetime
import os
import platform
from collections.abc import Callable

import torch

from aqsgd.compress.activation import make_compressor
from aqsgd.compress.gradient import GradCompressionConfig
from aqsgd.compress.message import CompressionConfig
from aqsgd.compress.registry import ACTIVATION_MODES, GRAD_CODECS
from aqsgd.model.config import PRESETS, TINY_FAMILY, TINY_PIPELINE
from aqsgd.model.gpt2 import init_stage, lm_loss
from aqsgd.quant import QuantConfig
from bench.micro.timing import Timer, time_call
from bench.perfmodel.profile import (
    CommProfile,
    CompressProfile,
    ComputeProfile,
    Profile,
    StageCost,
)

__all__ = ["time_stage", "time_compressors", "time_grad_codecs", "measure_profile"]


def _median_s(fn: Callable[[], object], repeats: int, clock: str = "cpu") -> float:
    """Seconds of `fn()` on `clock` (CPU time by default): the median of `repeats` calls
    after one that warms allocators and kernels."""
    return time_call(fn, repeats, clock=clock).median_s


def time_stage(preset: str, stages: int, stage: int, micro_batch_size: int,
               repeats: int, clock: str = "cpu") -> StageCost:
    """Forward, backward (per micro-batch) and AdamW step of one stage, training mode;
    `clock` "wall" for what the stage takes under the machine's present load."""
    cfg = PRESETS[preset]
    module = init_stage(cfg, stage, stages, seed=0).train()
    opt = torch.optim.AdamW(module.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, cfg.vocab_size, (micro_batch_size, cfg.seq_len), generator=gen)
    x = torch.randn(micro_batch_size, cfg.seq_len, cfg.n_embd, generator=gen)
    timer = Timer(clock)
    for _ in timer.rounds(repeats, warmup=1):  # the first call warms up
        with timer.phase("forward"):
            out = module(ids if module.first else x.clone().requires_grad_())
            loss = lm_loss(out, ids) if module.last else (out * out).mean()
        with timer.phase("backward"):
            loss.backward()
    optimizer = _median_s(opt.step, repeats, clock)
    return StageCost(preset, stages, stage, micro_batch_size,
                     timer.samples("forward").median_s, timer.samples("backward").median_s,
                     optimizer)


def time_compressors(shape: tuple[int, int, int], repeats: int
                     ) -> tuple[dict[str, float], dict[str, float]]:
    """Encode and decode seconds per element of a steady-state message (after the warm-up
    epoch, every sample cached) of each registered activation mode at its `profile_bits`."""
    enc, dec = {}, {}
    elements = shape[0] * shape[1] * shape[2]
    ids = torch.arange(shape[0])
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    for mode, coding in ACTIVATION_MODES.items():
        cfg = CompressionConfig(mode=mode, quant=QuantConfig(bits=coding.profile_bits),
                                warmup_epochs=0)
        send = make_compressor(cfg, "send", shape[1:], shape[0])
        recv = make_compressor(cfg, "recv", shape[1:], shape[0])
        recv.decode(send.encode(x, ids), ids)  # first visit: fills both caches
        msg = send.encode(x, ids)
        enc[mode] = _median_s(lambda s=send: s.encode(x, ids), repeats) / elements
        # decode the same message again: the receiver's cache moves on, the cost does not
        dec[mode] = _median_s(lambda r=recv, m=msg: r.decode(m, ids), repeats) / elements
        send.close()
        recv.close()
    return enc, dec


def time_grad_codecs(numel: int, repeats: int) -> dict[str, float]:
    """Seconds per parameter and step of each data-parallel codec's compute: one encode
    and one decode of every parameter (the sharded exchange codes each parameter about
    once on the way out and once on the way back, split over the shards), each codec
    at GradCompressionConfig's defaults (`round_trip`); 0 for the exact average."""
    g = torch.randn(numel, generator=torch.Generator().manual_seed(0))
    gen = torch.Generator().manual_seed(0)
    out = {}
    for name, codec in GRAD_CODECS.items():
        cfg = GradCompressionConfig(mode=name)
        out[name] = (_median_s(lambda c=codec, k=cfg: c.round_trip(k, g, gen), repeats) / numel
                     if codec.compresses else 0.0)
    return out


def measure_profile(repeats: int = 10, name: str = "cpu-this-machine") -> Profile:
    """This machine's profile (module docstring); `comm` left at its defaults."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread per rank, as the cells run (train.threads)
    try:
        b = TINY_PIPELINE.micro_batch_size
        # each tiny preset at its own depth, and at half of it: the data-parallel cells of
        # `bench run` (bench.harness.defaults) split the same hosts into 2 replicas
        stages = tuple(time_stage(preset, depth, s, b, repeats)
                       for preset, n in TINY_FAMILY.items()
                       for depth in sorted({n, max(1, n // 2)}) for s in range(depth))
        cfg = PRESETS["tiny"]
        enc, dec = time_compressors((b, cfg.seq_len, cfg.n_embd), repeats)
        grad = time_grad_codecs(1 << 18, repeats)
    finally:
        torch.set_num_threads(previous)
    cpu = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return Profile(
        name=name, device=f"{cpu} ({os.cpu_count()} cores)",
        source="python -m bench profile: stages timed alone on one thread, "
               "compressors on one message of the tiny preset's boundary",
        date=datetime.date.today().isoformat(), kind="measured", cores=os.cpu_count(),
        compute=ComputeProfile(stages=stages),
        compress=CompressProfile(enc, dec, grad), comm=CommProfile(),
        assumptions=(f"median of {repeats} timed calls after one untimed call, CPU time of "
                     f"the process, torch {torch.__version__}, one thread per rank",
                     "load average while measured (1, 5, 15 min): "
                     + ", ".join(f"{x:.2f}" for x in os.getloadavg()),
                     "the ranks of a cell share this machine's cores (processor sharing)"))
