"""A cell's worker configuration: one `RunConfig` per cell, built from its mode and
workload and validated by construction (aqsgd.train.config).

    config = run_config(cell, cell_dir)              # RunConfig
    write_run_config(config, cell_dir / "config.yaml")  # what every rank loads

The mode decides only the compression (its aqsgd.compress.registry.COMPARISONS entry:
the forward and backward activation modes, the transport dtype, whether the
data-parallel gradients take the mode's gradient codec); the workload decides everything
else. `Workload.overrides` ("section.key" -> value)
are applied last, through aqsgd.train.config's loader, so a bad key or value fails
with its key path (`unknown key train.lrr ...`); an override may not contradict the
mode's gradient compressor (`grad.mode`: select it with the mode, `aqsgd+gc/ef21:2/4`).
meta.json keeps `config.to_dict()`, the resolved configuration the workers ran.

Every cell evaluates on Workload.eval_windows held-out windows, uncompressed (raw
activations, no cache touched): once after the last step, or with
`Workload.eval_each_epoch` also before the first step and after every epoch. Every
cell writes TensorBoard event files (OUTPUT_DIR/tensorboard/). `Workload.compute`
replay:PROFILE puts that profile's times of the cell's cut in the config's `compute`
section (bench.perfmodel.replay.replay_compute; docs/replay.md): synthetic token
windows and no evaluation then.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import yaml

from aqsgd.compress.adaptive import ladder
from aqsgd.compress.gradient import GradCompressionConfig
from aqsgd.compress.message import CompressionConfig
from aqsgd.compress.registry import COMPARISONS
from aqsgd.filecache import atomic_write_text
from aqsgd.model.source import ModelChoice, ModelSourceError, resolve_model
from aqsgd.quant import QuantConfig
from aqsgd.train.config import (
    DataConfig,
    DistConfig,
    OutputConfig,
    PipelineConfig,
    RunConfig,
    TrainConfig,
    config_from_dict,
)
from aqsgd.train.replay import profile_reference
from bench.harness.modes import ModeSpec
from bench.harness.sweep import CellSpec, Workload
from bench.perfmodel.replay import replay_compute

__all__ = ["FREEZE_FRACTION", "compression", "freeze_after_steps", "model_choice",
           "run_config", "write_run_config"]


def _direction(mode: str, dtype: str, bits: int | None, warmup_epochs: int,
               widths: tuple[int, ...] = (), coords: int | None = None) -> CompressionConfig:
    # A mode that takes no bit widths (fp32: mode none) sends raw rows whatever the epoch,
    # but it gets the workload's warm-up epochs too: the worker flags warm-up steps from
    # them (aqsgd.train.pipeline, Note [warm-up flag]), so every mode's throughput counts
    # the same steps.
    if bits is None:
        return CompressionConfig(mode=mode, dtype=dtype, warmup_epochs=warmup_epochs,
                                 coords=coords)
    if widths:  # adaptive: start at the widest, the chooser narrows it (aqsgd.compress.adaptive)
        bits = widths[-1]
    return CompressionConfig(mode=mode, dtype=dtype, quant=QuantConfig(bits=bits),
                             warmup_epochs=warmup_epochs, widths=widths, coords=coords)


# QuantizedAdam's exact phase lasts at least this share of the run (1-bit Adam's rule).
FREEZE_FRACTION = 0.1


def freeze_after_steps(workload: Workload) -> int:
    """The step after which QuantizedAdam freezes Adam's second moment and compresses.

    Frozen too early, v holds the squares of a few gradients only: a coordinate whose
    gradient was still ~0 then (a token not seen yet) later moves by lr * m / sqrt(v),
    far more than Adam would let it. 1-bit Adam runs exact Adam for a share of training
    (~10-15%) so v has seen many batches; here at least FREEZE_FRACTION of the run and at
    least the warm-up epochs (whose activations go uncompressed too), so the compressed
    phase starts where the activation warm-up ends or later. grad.v_floor (its default)
    bounds what is left."""
    return max(1, workload.warmup_steps, math.ceil(FREEZE_FRACTION * workload.total_steps))


def compression(mode: ModeSpec, workload: Workload) -> tuple[CompressionConfig,
                                                             CompressionConfig,
                                                             GradCompressionConfig]:
    """(forward, backward, data-parallel gradient) compression of `mode`."""
    entry = COMPARISONS[mode.name]
    fw_widths = ladder("forward", mode.fw_bits) if entry.adaptive else ()
    bw_widths = ladder("backward", mode.bw_bits) if entry.adaptive else ()
    # an in-graph half's k sits on the forward direction, whose mode declares the half
    forward = _direction(entry.forward, entry.dtype, mode.fw_bits, workload.warmup_epochs,
                         fw_widths, mode.coords)
    backward = _direction(entry.backward, entry.dtype, mode.bw_bits, workload.warmup_epochs,
                          bw_widths)
    if not entry.data_parallel:
        return forward, backward, GradCompressionConfig(mode="fp32")
    # PowerSGD's exact phase follows torch's advice (about 10% of the run), here the same
    # rule as QuantizedAdam's freeze: at least the warm-up epochs
    exact = ({"powersgd_start_step": freeze_after_steps(workload)}
             if mode.grad_mode == "powersgd" else {})
    grad = GradCompressionConfig(mode=mode.grad_mode, bits=mode.grad_bits,
                                 freeze_after_steps=freeze_after_steps(workload),
                                 seed=workload.seed, **exact)
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
        if path == "grad.mode" and value != config.grad.mode:
            # one override for a whole sweep would compress the fp32 reference's gradients
            # too, and the cell's label and meta.json would name another compressor
            raise ValueError(f"Workload.overrides['grad.mode']: the mode decides the "
                             f"gradient compressor (this cell's: {config.grad.mode!r}); "
                             f"select one with the mode, e.g. aqsgd+gc/{value}:2/4, "
                             f"got {value!r}")
        sections = [name for name, value in tree.items() if isinstance(value, dict)]
        if section not in sections:
            raise ValueError(f"Workload.overrides[{path!r}]: unknown section {section!r} "
                             f"(known sections: {', '.join(sections)})")
        tree[section][key] = value
    return config_from_dict(tree)


def model_choice(workload: Workload) -> ModelChoice:
    """The workload's model, shape and tokenizer resolved (aqsgd.model.source): the
    preset's shape with the workload's own shape settings over it; a ValueError naming
    the setting to change (a ModelSourceError, or a shape that cannot be built)."""
    w = workload
    choice = resolve_model(w.model, w.preset, w.tokenizer, w.seq_len)
    shape = w.shape
    if not shape:
        return choice
    try:
        return dataclasses.replace(choice, config=choice.config.replace(**shape))
    except ValueError as err:  # ModelConfig's words name n_embd and n_head
        given = ", ".join(f"{k}={v}" for k, v in shape.items())
        raise ModelSourceError(f"{given} over preset {w.preset!r}: {err}",
                               "n_head" if "n_head" in shape else next(iter(shape))) from None


def _init_from(w: Workload, choice: ModelChoice) -> str | None:
    # 'pretrained' means the checkpoint's weights when the model names one
    return choice.weights if choice.weights and w.init_from == "pretrained" else w.init_from


def _local_path(path: str | None) -> str | None:
    # an existing path made absolute (the ranks may start elsewhere); an id stays as given
    return str(Path(path).resolve()) if path is not None and Path(path).exists() else path


def _data(w: Workload, choice: ModelChoice) -> DataConfig:
    # the evaluation covers each held-out window once (eval_batches per replica); stand-in
    # stages read token ids only, so a replayed cell trains on synthetic windows (no
    # tokenizer, no text: a GPT2-XL vocabulary needs neither)
    if profile_reference(w.compute) is not None:
        return DataConfig(name="synthetic", max_samples=w.train_samples,
                          eval_samples=w.eval_windows)
    return DataConfig(name=w.data, path=_local_path(w.data_path),
                      max_samples=w.train_samples, eval_samples=w.eval_windows,
                      tokenizer=choice.tokenizer)


def run_config(cell: CellSpec, output_dir: Path) -> RunConfig:
    """The validated RunConfig every rank of `cell` runs, writing under `output_dir`."""
    w = cell.workload
    forward, backward, grad = compression(cell.mode, w)
    choice = model_choice(w)
    model = choice.config
    if w.dropout is not None:
        model = dataclasses.replace(model, dropout=float(w.dropout))
    config = RunConfig(
        model=model,
        pipeline=PipelineConfig(stages=w.stages, replicas=w.replicas,
                                micro_batch_size=w.micro_batch_size,
                                num_micro_batches=w.num_micro_batches, schedule=w.schedule),
        forward=forward,
        backward=backward,
        grad=grad,
        # eval_every 0: the worker evaluates after the last step only
        train=TrainConfig(total_steps=w.total_steps, lr=w.lr, seed=w.seed, threads=w.threads,
                          eval_every=w.steps_per_epoch if w.eval_each_epoch else w.eval_every,
                          eval_at_start=w.eval_each_epoch, eval_batches=w.eval_batches,
                          dropout_masks=w.dropout_masks,
                          init_from=_init_from(w, choice),
                          precision=w.precision),
        data=_data(w, choice),
        dist=DistConfig(timeout_s=w.dist_timeout_s),
        compute=replay_compute(w.compute, model, w.stages, w.micro_batch_size, w.precision,
                               coding=w.coding, modes=(forward.mode, backward.mode),
                               replicas=w.replicas),
        output=OutputConfig(dir=str(output_dir), trace=False, tensorboard=True),
        plugins=cell.mode.plugins,  # its workers load them (docs/plugins.md)
    )
    return _apply_overrides(config, w.overrides)


def write_run_config(config: RunConfig, path: Path) -> Path:
    """The YAML file of `config.to_dict()` that every rank of the cell loads."""
    return atomic_write_text(path, yaml.safe_dump(config.to_dict(), sort_keys=False))
