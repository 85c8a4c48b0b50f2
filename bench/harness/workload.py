"""What every worker of a cell trains: `Workload`, each field declared once with its type,
range, default and one line of help (those it shares with the worker's config are
aqsgd.train.settings' declarations, the model's shape aqsgd.model.config's). A sweep
file's `workload:` keys, a variant's, and the `bench run` flags
(bench.harness.commands.run) are its fields; bench.harness.cells turns it into each
cell's RunConfig.

    Workload(steps=5, stages=4)            # 'Workload.steps must be >= 1, got 0' for 0
    dataclasses.replace(w, seed=1)         # checked again (specfile.check_fields)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from pydantic import Field

from aqsgd.data.sources import DATASETS
from aqsgd.model.config import (
    PRESETS,
    SHAPE_FIELDS,
    Heads,
    Layers,
    MlpWidth,
    SeqLen,
    VocabSize,
    Width,
)
from aqsgd.train.replay import check_compute, profile_reference
from aqsgd.train.settings import (
    Coding,
    Compute,
    DataPath,
    DropoutMasks,
    EvalEvery,
    EvalSamples,
    InitFrom,
    LearningRate,
    MicroBatchSize,
    NumMicroBatches,
    Precision,
    Replicas,
    Schedule,
    Seed,
    Stages,
    Threads,
    TimeoutS,
    Tokenizer,
)
from bench.harness.contents import content_digest
from specfile import SPEC_CONFIG, check_fields, or_none, setting

__all__ = ["IDENTITY_IF_SET", "PATH_SETTINGS", "Workload"]

# Fields added after cells were recorded: in a cell's identity only when not at their
# default (Workload.identity).
IDENTITY_IF_SET = frozenset({"precision", "model", "tokenizer", "data", "data_path",
                             "seq_len", "schedule", "n_layer", "n_embd", "n_head",
                             "vocab_size", "n_inner", "compute", "eval_every", "coding"})


def _itself(value: str) -> str:
    return value


def _unless_pretrained(init_from: str) -> str | None:
    return None if init_from == "pretrained" else init_from


# Note [identity by content]: the settings whose value may name a file or folder, each
# with what of its value may (None: nothing). One that names an existing path (relative
# to the folder the run starts in) enters the identity by what it holds
# (bench.harness.contents), not as typed: another model at the same path is another
# cell, the same model named by another path the same cell. A value naming no path (a
# cached model or data set id, a shipped profile's name) enters as typed.
PATH_SETTINGS: dict[str, Callable[[str], str | None]] = {
    "model": _itself, "tokenizer": _itself, "data_path": _itself,
    "init_from": _unless_pretrained, "compute": profile_reference}

_VARIANT_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")
_PRESET = "the preset's"


@dataclass(frozen=True)
class Workload:
    """What every worker of a cell trains: model, layout, data, steps, evaluation.

    The settings it shares with the worker's config (stages, micro-batches, schedule,
    learning rate, seed, ...) are aqsgd.train.settings' declarations, default included;
    those that exist only for cells (the preset, measured steps, epochs, variants) are
    declared here. Length: with `epochs` 0 (bench cells), the warm-up epochs
    (uncompressed, excluded from throughput) run over `train_samples` windows first,
    then `steps` measured optimizer steps; with `epochs` > 0 (convergence cells) the run
    is that many whole passes over the training split, warm-up epochs included, and
    `steps` is not used. Evaluation: once at the end, or with `eval_each_epoch` also
    before the first step and after every epoch, or with `eval_every` every that many
    steps, each time over `eval_windows` held-out windows, uncompressed.
    """

    __pydantic_config__ = SPEC_CONFIG  # a variant's workload is validated on its own

    preset: Annotated[str, Field(description=(
        "model preset: a named shape (aqsgd.model.config.PRESETS)"))] = "tiny"
    # the shape, each the preset's unless set (a shape without a checkpoint)
    n_layer: or_none(Layers, _PRESET) = None
    n_embd: or_none(Width, _PRESET) = None
    n_head: or_none(Heads, _PRESET) = None
    vocab_size: or_none(VocabSize, _PRESET) = None
    seq_len: or_none(SeqLen, "the model's context length") = None
    n_inner: or_none(MlpWidth, _PRESET) = None
    stages: Stages = setting(Stages)
    replicas: Replicas = setting(Replicas)
    micro_batch_size: MicroBatchSize = setting(MicroBatchSize)
    num_micro_batches: NumMicroBatches = setting(NumMicroBatches)
    schedule: Schedule = setting(Schedule)
    steps: Annotated[int, Field(ge=1, description=(
        "measured optimizer steps after the warm-up"))] = 10
    epochs: Annotated[int, Field(ge=0, description=(
        "whole passes over the training data, warm-up included (0: warm-up, then steps)"))] = 0
    warmup_epochs: Annotated[int, Field(ge=0, description=(
        "uncompressed epochs before the measured steps"))] = 1
    train_samples: Annotated[int, Field(ge=1, description=(
        "training windows (one warm-up epoch = one pass over them)"))] = 128
    seed: Seed = setting(Seed)
    threads: Threads = setting(Threads)
    lr: LearningRate = setting(LearningRate)
    # rounded up to whole micro-batches of every replica (see eval_windows)
    eval_samples: EvalSamples = setting(EvalSamples)
    eval_each_epoch: Annotated[bool, Field(description=(
        "also evaluate before the first step and after every epoch"))] = False
    # a fixed cadence instead of epochs (steps to a target: bench.report.target)
    eval_every: EvalEvery = setting(EvalEvery)
    dropout: Annotated[float, Field(ge=0, lt=1, description=(
        "dropout probability (RunConfig model.dropout; none: the preset's)"))] | None = None
    dropout_masks: DropoutMasks = setting(DropoutMasks)
    # in the cell's name and identity only when not fp32 (label, identity)
    precision: Precision = setting(Precision)
    # in the label when replayed: a speed-up divides like by like (docs/replay.md)
    compute: Compute = setting(Compute)
    # in the label when replayed: replayed coding times differ from real coding's
    coding: Coding = setting(Coding)
    variant: str = ""  # short label of a sweep variant, in the cell's name ("" = default)
    dist_timeout_s: TimeoutS = setting(TimeoutS)
    init_from: InitFrom = setting(InitFrom)
    model: Annotated[str, Field(description=(
        "a checkpoint to fine-tune instead of the preset's: a save_pretrained folder or a "
        "model id in the local Hugging Face cache (shape from its config.json), or a "
        "state-dict file (the preset's shape); docs/models.md"))] | None = None
    tokenizer: Tokenizer = setting(Tokenizer)
    data: Annotated[str, Field(description=(
        f"data set: {', '.join(DATASETS)} (docs/data.md)"))] = "pydoc"
    data_path: DataPath = setting(DataPath)
    gc_replicas: Annotated[int, Field(ge=2, description=(
        "replicas of the aqsgd+gc cells when replicas is 1"))] = 2
    # `bench run` on a 4-host scenario runs its pipeline cells with 4 stages and its
    # data-parallel cells as 2 stages x 2 replicas on the same 4 hosts (bench.harness.defaults)
    gc_stages: Annotated[int, Field(ge=0, description=(
        "stages of the aqsgd+gc cells (0: stages)"))] = 0
    timeout_s: Annotated[float, Field(gt=0, description=(
        "seconds a cell may take, start to last exit"))] = 300.0
    # RunConfig values set last, by dotted key path, e.g. {"forward.granularity": "token"}
    overrides: dict = field(default_factory=dict)

    def __post_init__(self):
        check_fields(self)
        if self.preset not in PRESETS:
            raise ValueError(f"Workload.preset must be one of {sorted(PRESETS)}, "
                             f"got {self.preset!r}")
        if self.epochs and self.epochs <= self.warmup_epochs:
            raise ValueError(f"Workload.epochs must exceed warmup_epochs={self.warmup_epochs} "
                             f"(or be 0: warm-up, then `steps`), got {self.epochs}")
        if not isinstance(self.variant, str) or not set(self.variant) <= _VARIANT_CHARS:
            raise ValueError(f"Workload.variant must be a short label of a-z, 0-9, '-' and "
                             f"'_' (it goes in directory names), got {self.variant!r}")
        check_compute("Workload.compute", self.compute)
        if self.coding != "real" and profile_reference(self.compute) is None:
            raise ValueError(f"Workload.coding {self.coding!r} replays coding from a profile: "
                             f"it needs compute replay:PROFILE, got compute {self.compute!r}")
        if self.data not in DATASETS:
            raise ValueError(f"Workload.data must be one of {', '.join(DATASETS)}, "
                             f"got {self.data!r}")
        shape = self.shape
        if self.model is not None and shape:
            raise ValueError(f"Workload.{next(iter(shape))} sets a shape, but model names a "
                             f"checkpoint whose shape is its own ({self.model!r}): set one "
                             f"of them, got {shape}")
        if shape and self.init_from == "pretrained":
            raise ValueError(f"Workload.init_from 'pretrained' has no checkpoint of a shape "
                             f"set here ({', '.join(f'{k}={v}' for k, v in shape.items())}; "
                             f"starting checkpoints are built per preset): set init_from "
                             f"to none (random init) or a state-dict of that shape")
        if self.model is not None and self.init_from not in (None, "pretrained"):
            raise ValueError(f"Workload.init_from must be 'pretrained' (the model's weights) "
                             f"or none (random init) when model names a checkpoint, got "
                             f"{self.init_from!r}")
        if self.eval_every and self.eval_each_epoch:
            raise ValueError(f"Workload.eval_every ({self.eval_every} steps) and "
                             f"eval_each_epoch both set when to evaluate: set one")
        if self.eval_every and self.total_steps % self.eval_every:
            raise ValueError(f"Workload.eval_every must divide the run's {self.total_steps} "
                             f"steps (its last evaluation is after the last step), got "
                             f"{self.eval_every}")
        if not isinstance(self.overrides, dict) or not all(
                isinstance(k, str) and k.count(".") == 1 for k in self.overrides):
            raise ValueError(f"Workload.overrides must map 'section.key' to a value, "
                             f"got {self.overrides!r}")

    @property
    def shape(self) -> dict:
        """The model-shape settings given (aqsgd.model.config.SHAPE_FIELDS but seq_len, which
        shortens a checkpoint's windows too), by ModelConfig field: what replaces the
        preset's."""
        return {k: getattr(self, k) for k in SHAPE_FIELDS
                if k != "seq_len" and getattr(self, k) is not None}

    @property
    def checkpoint_preset(self) -> str | None:
        """The preset whose cached starting checkpoint the cells start from (init_from
        'pretrained' and no checkpoint of their own in `model`), else None."""
        if profile_reference(self.compute) is not None:
            return None  # replayed stages hold no weights
        return self.preset if self.init_from == "pretrained" and self.model is None else None

    @property
    def label(self) -> str:
        """The variant as cell names and tables show it: `variant`, then the compute
        precision when it is not fp32 ('bf16-compute', 'dropout0+fp16-compute'), so a
        bf16-compute row never reads as the bf16 wire mode (docs/precision.md), then the
        schedule when it is not gpipe ('1f1b'), then a replayed profile ('replay-NAME', the
        profile file's stem: a speed-up never divides a replayed row by a measured one,
        docs/replay.md), then replayed coding ('replay-coding')."""
        compute = "" if self.precision == "fp32" else f"{self.precision}-compute"
        schedule = "" if self.schedule == "gpipe" else self.schedule
        profile = profile_reference(self.compute)
        replay = "" if profile is None else "replay-" + "".join(
            c if c in _VARIANT_CHARS else "-" for c in Path(profile).stem.lower())
        coding = "" if self.coding == "real" else f"{self.coding}-coding"
        return "+".join(part for part in (self.variant, compute, schedule, replay, coding)
                        if part)

    def paths(self) -> dict[str, str]:
        """The settings of PATH_SETTINGS that name an existing file or folder, each as its
        resolved absolute path (meta.json's `identity.paths`)."""
        named = {k: path_of(getattr(self, k)) for k, path_of in PATH_SETTINGS.items()
                 if getattr(self, k) is not None}
        return {k: str(Path(v).expanduser().resolve()) for k, v in named.items()
                if v is not None and Path(v).expanduser().exists()}

    def contents(self) -> dict[str, str]:
        """The content digest of every path in `paths` (Note [identity by content])."""
        return {k: content_digest(path) for k, path in self.paths().items()}

    def identity(self) -> dict:
        """The fields a cell's identity hashes (CellSpec.key): all, less those of
        IDENTITY_IF_SET at their default, so cells recorded before such a field existed
        keep their key; a setting naming a path by what it holds (`contents`)."""
        fields = dataclasses.asdict(self)
        kept = {k: v for k, v in fields.items()
                if k not in IDENTITY_IF_SET or v != _DEFAULTS[k]}
        return {**kept, **{k: {"content": d} for k, d in self.contents().items()}}

    @property
    def global_batch(self) -> int:
        return self.micro_batch_size * self.num_micro_batches * self.replicas

    @property
    def steps_per_epoch(self) -> int:
        """Optimizer steps of one pass over the training split (partial last batch
        dropped; each replica passes over its own shard of train_samples / replicas)."""
        return max(1, self.train_samples // self.global_batch)

    @property
    def warmup_steps(self) -> int:
        """Optimizer steps of the warm-up epochs."""
        return self.warmup_epochs * self.steps_per_epoch

    @property
    def total_steps(self) -> int:
        if self.epochs:
            return self.epochs * self.steps_per_epoch
        return self.warmup_steps + self.steps

    @property
    def eval_batches(self) -> int:
        """Micro-batches per replica in one evaluation (RunConfig train.eval_batches)."""
        return -(-self.eval_samples // (self.replicas * self.micro_batch_size))

    @property
    def eval_windows(self) -> int:
        """Held-out windows of one evaluation: every replica evaluates eval_batches
        micro-batches of its own windows, each window once (RunConfig data.eval_samples)."""
        return self.eval_batches * self.replicas * self.micro_batch_size

    @property
    def evaluations(self) -> int:
        """Evaluations in one run: before the first step and after each epoch, every
        `eval_every` steps, or once."""
        if not self.eval_samples:
            return 0
        if self.eval_every:
            return self.total_steps // self.eval_every
        return 1 + self.total_steps // self.steps_per_epoch if self.eval_each_epoch else 1


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Workload)}
