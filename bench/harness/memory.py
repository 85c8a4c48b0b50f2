"""The memory a sweep states before its first cell: each cell's estimated resident memory
over its ranks, the largest against this machine's, and a refusal when it would not fit.

    estimate = cell_memory(cell)          # CellMemory: bytes by part, over all ranks
    memory_line(spec, todo, choice)       # 'memory: the largest cell ... about 5.1 GiB ...'

What a rank holds (docs/replay-sweeps.md, "Memory stated up front"):
- the runtime: an interpreter with torch, the worker and gloo (RUNTIME_BYTES, measured);
- its stage's weights with their gradients and Adam's two moments (20 bytes a parameter
  in fp32, the optimizer step's temporaries measured in; with replicas 44, the exchange's
  copies and the codec's state measured in); a replayed stand-in holds one scalar and a
  (D,) buffer, or with replicas weights of the real size (aqsgd.train.replay_weights);
- the activations of the micro-batches in flight per the schedule (GPipe: all M of a step;
  1F1B: at most S - stage): a real stage keeps about L x (34 D + 5 h L) bytes a sequence
  a layer at 16-bit compute (Korthikanti et al., "Reducing activation recomputation in
  large transformer models", 2022), twice that at fp32, and the last stage its logits; a
  stand-in about 1.5 (L, D) fp32 rows a boundary side (its input or output, the wire's
  row, AQ-SGD's working copy: measured);
- AQ-SGD's per-sample caches: samples x seq_len x width x the cache's bytes an element,
  one copy at each end of every boundary whose direction keeps one (in memory; `mmap`
  caches are on disk and counted apart);
- the messages: beside the activations (a received input and a sent output are both),
  a buffer being sent and one posted ahead to receive on each boundary side, each way,
  raw (the warm-up epoch sends rows uncoded).

Measured peak RSS against these estimates: docs/replay-sweeps.md.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from aqsgd.compress.message import CompressionConfig
from aqsgd.model.config import layer_split
from aqsgd.train.config import RunConfig
from bench.harness.cells import run_config
from bench.harness.sweep import CellSpec, SweepSpec
from bench.launch.choice import LauncherChoice
from bench.perfmodel.workload import stage_params

__all__ = ["RUNTIME_BYTES", "LOCAL_LAUNCHERS", "CellMemory", "MemoryRefusal", "cell_memory",
           "machine_memory", "memory_line"]

# An idle worker's resident memory: the interpreter, torch, the worker's modules, gloo's
# process group and its threads (measured: 402-411 MiB a rank of replayed tiny-8 in 8
# stages, whose stand-ins hold next to nothing).
RUNTIME_BYTES = 400 * 2**20
# Launchers whose ranks all run on this machine: their sweeps are refused when the largest
# cell would not fit its memory (the others' ranks run on their own hosts).
LOCAL_LAUNCHERS = ("local", "netns", "docker")
# What a replayed stage holds of a micro-batch in flight, in (L, D) fp32 rows a boundary
# side: the input it received or the output it sends, the wire's row, and AQ-SGD's
# working copy. Fit to replayed GPT2-XL in 8 stages, 32 micro-batches of 1 x 1024 under
# GPipe (first and last ranks 613-614 MiB, middle ranks 1063-1119 MiB in fp32 cells;
# docs/replay-sweeps.md).
_REPLAYED_ROWS = 1.5
_GIB = 2**30
# fp32 weight, gradient, exp_avg and exp_avg_sq, and about one more fp32 value of the
# optimizer step's temporaries (fit to real GPT-2-shaped stages of 49 M parameters, whose
# ranks held 1.62-1.64 GiB: docs/replay-sweeps.md)
_ADAM_BYTES_A_PARAM = 20
# With data-parallel replicas a rank also holds the exchange's flat copies and the codec's
# state (error feedback): 41-45 bytes a parameter measured on replayed GPT-2 small in 8
# stages x 2 replicas under aqsgd+gc/qadam (docs/replay-replicas.md, "Memory")
_REPLICATED_BYTES_A_PARAM = 44
_ELEMENT = {"fp32": 4, "bf16": 2, "fp16": 2}


class MemoryRefusal(ValueError):
    """A sweep whose largest cell would not fit this machine's memory."""


@dataclass(frozen=True)
class CellMemory:
    """A cell's estimated resident memory over all its ranks, in bytes, by part."""

    name: str
    ranks: int
    runtime: int
    weights: int
    activations: int
    caches: int
    messages: int
    caches_on_disk: int = 0

    @property
    def total(self) -> int:
        """Bytes in memory (the caches on disk left out)."""
        return self.runtime + self.weights + self.activations + self.caches + self.messages

    def parts_text(self) -> str:
        parts = [f"runtime {self.runtime / _GIB:.2f}", f"weights {self.weights / _GIB:.2f}",
                 f"activations {self.activations / _GIB:.2f}",
                 f"AQ-SGD caches {self.caches / _GIB:.2f}",
                 f"messages {self.messages / _GIB:.2f}"]
        if self.caches_on_disk:
            parts.append(f"caches on disk {self.caches_on_disk / _GIB:.2f}")
        return ", ".join(parts) + " GiB"


def _in_flight(config: RunConfig, stage: int) -> int:
    """Micro-batches whose activations a stage holds at once under the schedule."""
    p = config.pipeline
    if p.schedule == "1f1b":
        return min(p.num_micro_batches, p.stages - stage)
    return p.num_micro_batches


def _cache_bytes(direction: CompressionConfig, samples: int, shape: tuple[int, int]) -> int:
    if not direction.uses_cache:
        return 0
    return direction.cache_spec(shape, samples).bytes_per_sample() * samples


def estimate(config: RunConfig, name: str = "") -> CellMemory:
    """The estimate of a cell that runs `config` (module docstring, part by part)."""
    model, p = config.model, config.pipeline
    b, seq, d = p.micro_batch_size, model.seq_len, model.n_embd
    replayed = config.compute.replayed
    compute_bytes = _ELEMENT[config.train.precision]
    wire = _ELEMENT.get(config.forward.dtype, 4)
    splits = layer_split(model.n_layer, p.stages)
    weights = activations = messages = 0
    for stage, (layers, params) in enumerate(zip(splits, stage_params(model, p.stages),
                                                 strict=True)):
        first, last = stage == 0, stage == p.stages - 1
        flight = _in_flight(config, stage)
        # a replayed stage holds weights of the real size only with replicas (their
        # gradients are exchanged: aqsgd.train.replay_weights)
        if replayed and p.replicas == 1:
            weights += 4 * (d + 1)
        else:
            weights += params * (_ADAM_BYTES_A_PARAM if p.replicas == 1
                                 else _REPLICATED_BYTES_A_PARAM)
        sides = (0 if first else 1) + (0 if last else 1)
        if replayed:  # _REPLAYED_ROWS (L, D) fp32 rows a boundary side a micro-batch
            activations += int(flight * sides * _REPLAYED_ROWS * b * seq * d * 4)
        else:
            a_layer = b * seq * (34 * d + 5 * model.n_head * seq) * compute_bytes // 2
            logits = 2 * b * seq * model.vocab_size * 4 if last else 0
            activations += flight * (len(layers) * a_layer + logits)
        # a micro-batch's received input and its output are the activations above; the
        # buffers beside them: on each side, a raw row being sent and one posted ahead to
        # receive, each way (activation, gradient)
        messages += sides * 2 * 2 * b * seq * d * wire
    boundaries = (p.stages - 1) * p.replicas
    samples = config.data.max_samples
    cached = 2 * boundaries * (_cache_bytes(config.forward, samples, (seq, d))
                               + _cache_bytes(config.backward, samples, (seq, d)))
    on_disk = config.forward.cache_storage == "mmap"
    ranks = p.stages * p.replicas
    return CellMemory(name=name, ranks=ranks, runtime=ranks * RUNTIME_BYTES,
                      weights=weights * p.replicas, activations=activations * p.replicas,
                      caches=0 if on_disk else cached, messages=messages * p.replicas,
                      caches_on_disk=cached if on_disk else 0)


def cell_memory(cell: CellSpec) -> CellMemory:
    """The estimate of `cell`, from the RunConfig its workers would run."""
    with tempfile.TemporaryDirectory() as tmp:
        return estimate(run_config(cell, Path(tmp)), cell.name)


def machine_memory() -> tuple[int, int]:
    """(available, total) bytes of this machine's memory (/proc/meminfo's MemAvailable and
    MemTotal; where there is none, the physical pages for both)."""
    try:
        fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text()
                      .splitlines() if ":" in line)
        return (int(fields["MemAvailable"].split()[0]) * 1024,
                int(fields["MemTotal"].split()[0]) * 1024)
    except (OSError, KeyError, ValueError):
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return total, total


def memory_line(spec: SweepSpec, todo: list[CellSpec],
                choice: LauncherChoice | None = None,
                machine: tuple[int, int] | None = None) -> str:
    """'memory: the largest cell NAME, about X GiB over its N ranks (parts) against this
    machine's A GiB available of T GiB'. Raises MemoryRefusal naming the cell, its parts
    and what to change when a launcher that runs every rank here (LOCAL_LAUNCHERS; None:
    netns) would need more than is available."""
    if not todo:
        return "memory: no cell to run"
    estimates = [cell_memory(c) for c in todo]
    big = max(estimates, key=lambda e: e.total)
    available, total = machine if machine is not None else machine_memory()
    line = (f"memory: the largest cell {big.name}, about {big.total / _GIB:.2f} GiB over its "
            f"{big.ranks} ranks ({big.parts_text()}) against this machine's "
            f"{available / _GIB:.1f} GiB available of {total / _GIB:.1f} GiB")
    here = choice is None or choice.name in LOCAL_LAUNCHERS
    if not here:
        return line + f" (launcher {choice.name} runs the ranks on their own hosts)"
    if big.total > available:  # caches on disk only where that alone makes it fit
        fix = ("put AQ-SGD's caches on disk (workload overrides: forward.cache_storage: mmap, "
               "forward.cache_dir: a folder with room), or "
               if big.caches and big.total - big.caches <= available else "")
        raise MemoryRefusal(
            f"sweep {spec.name}: cell {big.name} needs about {big.total / _GIB:.2f} GiB "
            f"({big.parts_text()}) and this machine has {available / _GIB:.1f} GiB available "
            f"of {total / _GIB:.1f} GiB: {fix}run fewer train_samples, micro-batches or "
            f"stages, or a launcher that spreads the ranks over hosts")
    return line


