"""A cell's worker configuration: one `RunConfig` per cell, built from its mode and
workload and validated by construction (aqsgd.train.config).

    config = run_config(cell, cell_dir)              # RunConfig
    write_run_config(config, cell_dir / "config.yaml")  # what every rank loads

The mode decides only the compression (`MODE_COMPRESSION`, keyed by ModeSpec.name);
the workload decides everything else. `Workload.overrides` ("section.key" -> value)
are applied last, through aqsgd.train.config's loader, so a bad key or value fails
with its key path (`unknown key train.lrr ...`). meta.json keeps
`config.to_dict()`, the resolved configuration the workers ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from aqsgd.compress.activation import CompressionConfig
from aqsgd.compress.gradient import GradCompressionConfig
from aqsgd.filecache import atomic_write_text
from aqsgd.model.config import PRESETS
from aqsgd.train.config import (
    DataConfig,
    DistConfig,
    OutputConfig,
    PipelineConfig,
    RunConfig,
    TrainConfig,
    config_from_dict,
)
from bench.harness.sweep import MODE_NAMES, CellSpec, ModeSpec, Workload

__all__ = ["ModeCompression", "MODE_COMPRESSION", "compression", "run_config",
           "write_run_config"]


@dataclass(frozen=True)
class ModeCompression:
    """What one mode of the comparison compresses: the CompressionConfig.mode of
    activations (forward) and of their gradients (backward), and whether the
    data-parallel gradients go through ModeSpec.grad_mode."""

    forward: str
    backward: str
    data_parallel: bool


MODE_COMPRESSION: dict[str, ModeCompression] = {
    "fp32": ModeCompression("none", "none", data_parallel=False),
    "directq": ModeCompression("directq", "directq", data_parallel=False),
    "aqsgd": ModeCompression("aqsgd", "directq", data_parallel=False),
    "aqsgd+gc": ModeCompression("aqsgd", "directq", data_parallel=True),
}
assert set(MODE_COMPRESSION) == set(MODE_NAMES), "every mode needs its compression"


def _direction(mode: str, bits: int | None, warmup_epochs: int) -> CompressionConfig:
    # Mode none sends raw rows whatever the epoch, but it gets the workload's warm-up
    # epochs too: the worker flags warm-up steps from them (aqsgd.train.pipeline,
    # Note [warm-up flag]), so every mode's throughput counts the same steps.
    if mode == "none":
        return CompressionConfig(mode="none", dtype="fp32", warmup_epochs=warmup_epochs)
    return CompressionConfig(mode=mode, bits=bits, warmup_epochs=warmup_epochs)


def compression(mode: ModeSpec, workload: Workload) -> tuple[CompressionConfig,
                                                             CompressionConfig,
                                                             GradCompressionConfig]:
    """(forward, backward, data-parallel gradient) compression of `mode`."""
    table = MODE_COMPRESSION[mode.name]
    forward = _direction(table.forward, mode.fw_bits, workload.warmup_epochs)
    backward = _direction(table.backward, mode.bw_bits, workload.warmup_epochs)
    if not table.data_parallel:
        return forward, backward, GradCompressionConfig(mode="fp32")
    # QuantizedAdam averages exactly (and warms Adam up) for `freeze_after_steps`:
    # start compressing where the activation warm-up ends.
    grad = GradCompressionConfig(mode=mode.grad_mode, bits=mode.grad_bits,
                                 freeze_after_steps=max(1, workload.warmup_steps),
                                 seed=workload.seed)
    return forward, backward, grad


def _apply_overrides(config: RunConfig, overrides: dict) -> RunConfig:
    """`config` with "section.key" values replaced, validated by the config loader."""
    if not overrides:
        return config
    tree = config.to_dict()
    for path, value in overrides.items():
        section, key = path.split(".")
        if path == "model.preset":
            # the resolved tree holds the preset's values, which would win over the preset
            raise ValueError(f"Workload.overrides[{path!r}]: set Workload.preset instead, "
                             f"got {value!r}")
        if section not in tree:
            raise ValueError(f"Workload.overrides[{path!r}]: unknown section {section!r} "
                             f"(known sections: {', '.join(tree)})")
        tree[section][key] = value
    return config_from_dict(tree)


def run_config(cell: CellSpec, output_dir: Path) -> RunConfig:
    """The validated RunConfig every rank of `cell` runs, writing under `output_dir`."""
    w = cell.workload
    if w.preset not in PRESETS:
        raise ValueError(f"Workload.preset must be one of {sorted(PRESETS)}, got {w.preset!r}")
    forward, backward, grad = compression(cell.mode, w)
    config = RunConfig(
        model=PRESETS[w.preset],
        pipeline=PipelineConfig(stages=w.stages, replicas=w.replicas,
                                micro_batch_size=w.micro_batch_size,
                                num_micro_batches=w.num_micro_batches, schedule="gpipe"),
        forward=forward,
        backward=backward,
        grad=grad,
        train=TrainConfig(steps=w.total_steps, lr=w.lr, seed=w.seed, threads=w.threads,
                          eval_every=0, eval_batches=w.eval_batches, init_from=w.init_from),
        # every evaluation micro-batch needs a full window of held-out samples
        data=DataConfig(max_samples=w.train_samples,
                        eval_samples=max(w.eval_samples, w.eval_batches * w.micro_batch_size)),
        dist=DistConfig(timeout_s=w.dist_timeout_s),
        output=OutputConfig(dir=str(output_dir), trace=False),
    )
    return _apply_overrides(config, w.overrides)


def write_run_config(config: RunConfig, path: Path) -> Path:
    """The YAML file of `config.to_dict()` that every rank of the cell loads."""
    return atomic_write_text(path, yaml.safe_dump(config.to_dict(), sort_keys=False))
