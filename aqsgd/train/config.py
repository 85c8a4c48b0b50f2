"""The run configuration: one frozen dataclass tree, loaded from YAML or JSON.

    python -m aqsgd.train.config examples/tiny-2stage.yaml     # validate and print resolved
                                                               # (a bad file: one line, exit 2)

Sections: `model` (aqsgd.model.config.ModelConfig; `preset: tiny` picks a preset and the
other keys override it), `pipeline`, `forward` and `backward`
(aqsgd.compress.message.CompressionConfig), `grad`
(aqsgd.compress.gradient.GradCompressionConfig),
`train`, `data`, `dist`, `output`. Files and dicts are checked by specfile against the
dataclasses' type hints: unknown keys and values of the wrong type are rejected with the
full key path (`train.lr: expected a number, got 'fast'`); each setting's range is declared
on its field (`Steps`, `Seed`, ...: specfile.declared), checked in files and in code
(`train: steps must be >= 1, got 0`). `RunConfig.to_dict()` is the resolved configuration.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field

from aqsgd.compress.gradient import GradCompressionConfig
from aqsgd.compress.message import GRADIENT_MODES, CompressionConfig
from aqsgd.compress.plugins import Plugin, PluginError
from aqsgd.compress.registry import require_plugins
from aqsgd.data.sources import DATASETS
from aqsgd.model.config import PRESETS, ModelConfig
from aqsgd.model.dropout import DROPOUT_MASKS
from aqsgd.model.gpt2 import PRECISIONS
from aqsgd.train.schedule import SCHEDULES
from specfile import SPEC_CONFIG, SpecError, check_fields, raising, read_file, validate

__all__ = [
    "MicroBatchSize",
    "NumMicroBatches",
    "Precision",
    "Replicas",
    "Seed",
    "Stages",
    "Steps",
    "Threads",
    "TimeoutS",
    "ConfigError",
    "PipelineConfig",
    "TrainConfig",
    "DataConfig",
    "DistConfig",
    "OutputConfig",
    "RunConfig",
    "load_config",
    "config_from_dict",
]


class ConfigError(SpecError):
    """A configuration file or value that cannot be used; names the key path."""


def _require(ok: bool, name: str, expected: str, value: Any) -> None:
    if not ok:
        raise ValueError(f"{name} must be {expected}, got {value!r}")


# The settings a run config shares with the harness's Workload (bench/harness/sweep.py),
# each declared once: type, range and one line of help (specfile.declared).
Stages = Annotated[int, Field(ge=1, description="pipeline stages")]
Replicas = Annotated[int, Field(ge=1, description="data-parallel replicas of the pipeline")]
MicroBatchSize = Annotated[int, Field(ge=1, description="samples per micro-batch")]
NumMicroBatches = Annotated[int, Field(ge=1, description="micro-batches per optimizer step "
                                                          "and replica")]
Steps = Annotated[int, Field(ge=1, description="optimizer steps")]
Seed = Annotated[int, Field(ge=0, description="seed of data order, dropout and init")]
Threads = Annotated[int, Field(ge=1, description="torch threads of each worker process")]
TimeoutS = Annotated[float, Field(gt=0, description="seconds init_process_group and every "
                                                    "p2p or collective wait may take")]
Precision = Annotated[Literal[tuple(PRECISIONS)], Field(description=(
    "compute precision of every stage: fp32, or torch.autocast to bf16 or fp16 (fp16 with "
    "dynamic loss scaling)"))]
_AtLeast0 = Annotated[int, Field(ge=0)]


@dataclass(frozen=True)
class PipelineConfig:
    stages: Stages = 2
    replicas: Replicas = 1
    micro_batch_size: MicroBatchSize = 4
    num_micro_batches: NumMicroBatches = 4
    schedule: str = "gpipe"  # gpipe | 1f1b

    def __post_init__(self):
        check_fields(self)
        _require(self.schedule in SCHEDULES, "schedule", f"one of {sorted(SCHEDULES)}",
                 self.schedule)  # fmt: skip

    @property
    def world_size(self) -> int:
        return self.stages * self.replicas

    @property
    def samples_per_step(self) -> int:
        return self.replicas * self.num_micro_batches * self.micro_batch_size


@dataclass(frozen=True)
class TrainConfig:
    steps: Steps = 20
    lr: Annotated[float, Field(gt=0, description="peak learning rate (AdamW)")] = 3e-4
    weight_decay: Annotated[float, Field(ge=0)] = 0.01
    # max global gradient norm across the pipeline; 0 = no clipping
    clip: Annotated[float, Field(ge=0)] = 1.0
    lr_warmup_steps: _AtLeast0 = 0  # linear warm-up to `lr`, then linear decay to 0 at `steps`
    seed: Seed = 0
    # Starting weights: None = random init from `seed`; "pretrained" = the cached
    # starting checkpoint of aqsgd.model.pretrain; else a state-dict file or HF model directory.
    init_from: str | None = None
    threads: Threads = 1  # torch.set_num_threads
    eval_every: _AtLeast0 = 0  # steps between evaluations; 0 = only after the last step
    eval_batches: _AtLeast0 = 2  # micro-batches per replica in one evaluation; 0 = none
    eval_at_start: bool = False  # also evaluate before the first step (an eval record at step 0)
    # Dropout masks in training: "random" draws them from torch's RNG (the reference
    # behaviour); "per_sample" from generators seeded by (seed, sample id, module), so a
    # sample's masks repeat at every visit (aqsgd.model.dropout, docs/dropout-and-deltas.md).
    dropout_masks: Literal["random", "per_sample"] = "random"
    # weights, optimizer and the wire stay as they are (the wire's dtype is
    # forward/backward.dtype); docs/precision.md
    precision: Precision = "fp32"
    # Test hooks (not for experiments): raise inside step `fail_at_step` on rank
    # `fail_rank`; write every rank's gradients after the first step to OUTPUT_DIR/grads.
    fail_at_step: _AtLeast0 | None = None
    fail_rank: int = 0
    dump_grads: bool = False

    def __post_init__(self):
        check_fields(self)
        _require(self.lr_warmup_steps <= self.steps, "lr_warmup_steps",
                 f"in [0, steps={self.steps}]", self.lr_warmup_steps)  # fmt: skip
        _require(not self.eval_at_start or self.eval_batches >= 1, "eval_at_start",
                 "false when eval_batches is 0 (no evaluation)", self.eval_at_start)
        _require(self.dropout_masks in DROPOUT_MASKS, "dropout_masks",
                 f"one of {DROPOUT_MASKS}", self.dropout_masks)  # fmt: skip


@dataclass(frozen=True)
class DataConfig:
    # aqsgd.data.sources.DATASETS, or "synthetic" (no tokenizer; tests, benchmarks)
    name: str = "pydoc"
    path: str | None = None  # local file or directory for file-backed data sets
    max_samples: Annotated[int, Field(ge=1)] | None = None  # cap on training windows (None: all)
    eval_samples: _AtLeast0 = 64  # windows held out for evaluation
    text_field: str = "text"  # column of parquet/arrow/JSON records that holds the text
    # a tokenizer.json, or a vocab.json with merges.txt beside it; None: the suite's BPE
    # of model.vocab_size (aqsgd.model.source.run_tokenizer; docs/models.md)
    tokenizer: str | None = None

    def __post_init__(self):
        names = (*DATASETS, "synthetic")
        _require(self.name in names, "name", f"one of {names}", self.name)
        check_fields(self)
        _require(isinstance(self.text_field, str) and self.text_field != "", "text_field",
                 "a non-empty column name", self.text_field)  # fmt: skip


@dataclass(frozen=True)
class DistConfig:
    backend: Literal["auto", "gloo", "nccl"] = "auto"  # auto: nccl on cuda, else gloo
    device: Literal["auto", "cpu", "cuda"] = "auto"
    timeout_s: TimeoutS = 60.0

    def __post_init__(self):
        _require(self.backend in ("auto", "gloo", "nccl"), "backend", "auto|gloo|nccl",
                 self.backend)  # fmt: skip
        _require(self.device in ("auto", "cpu", "cuda"), "device", "auto|cpu|cuda", self.device)
        check_fields(self)


@dataclass(frozen=True)
class OutputConfig:
    dir: str = "runs/local"
    trace: bool = False  # write OUTPUT_DIR/trace/rank{R}.json
    # TensorBoard event files under OUTPUT_DIR/tensorboard/ (aqsgd.train.tensorboard)
    tensorboard: bool = False

    def __post_init__(self):
        _require(bool(self.dir), "dir", "a non-empty path", self.dir)


def _default_backward() -> CompressionConfig:
    return CompressionConfig(mode="none")


@dataclass(frozen=True)
class RunConfig:
    __pydantic_config__ = SPEC_CONFIG  # what specfile.validate checks files against

    model: ModelConfig = field(default_factory=lambda: PRESETS["tiny"])
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    forward: CompressionConfig = field(default_factory=_default_backward)
    backward: CompressionConfig = field(default_factory=_default_backward)
    grad: GradCompressionConfig = field(default_factory=GradCompressionConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    data: DataConfig = field(default_factory=DataConfig)
    dist: DistConfig = field(default_factory=DistConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    # the compressor plug-ins its modes come from, loaded before the rest is checked
    # (_with_plugins; docs/plugins.md)
    plugins: tuple[Plugin, ...] = ()

    def __post_init__(self):
        if self.backward.mode not in GRADIENT_MODES:
            raise ValueError(
                f"backward.mode must be {' or '.join(GRADIENT_MODES)} (gradients are not "
                f"delta-coded), got {self.backward.mode!r}"
            )
        if self.pipeline.stages > self.model.n_layer:
            raise ValueError(
                f"pipeline.stages={self.pipeline.stages} exceeds model.n_layer="
                f"{self.model.n_layer}: every stage needs at least one block"
            )
        if self.train.eval_batches and self.data.eval_samples < self.pipeline.micro_batch_size:
            raise ValueError(
                f"data.eval_samples={self.data.eval_samples} is fewer than one micro-batch "
                f"(pipeline.micro_batch_size={self.pipeline.micro_batch_size}); "
                "set train.eval_batches: 0 to skip evaluation"
            )

    def to_dict(self) -> dict:
        tree = {**dataclasses.asdict(self), "forward": self.forward.to_dict(),
                "backward": self.backward.to_dict()}  # the quantizer's keys flat, as in files
        return json.loads(json.dumps(tree, default=str))


# ------------------------------------------------------------------- loading


def _message(err: SpecError) -> str:
    """Run-config errors read `KEY.PATH: what is wrong` (the form the worker's users know)."""
    if err.kind == "unknown":
        return f"unknown key {err.field} (known keys: {', '.join(err.known)})"
    # a declared range's words name its class ('TrainConfig.steps must be >= 1'); the
    # key path names the section already
    text = re.sub(r"^[A-Z]\w*Config\.", "", err.text)
    return f"{err.field}: {text}" if err.field else text


def _with_preset(data: Any) -> Any:
    """`model: {preset: NAME, ...}`: that preset's fields, the other keys overriding them."""
    model = data.get("model") if isinstance(data, dict) else None
    if not isinstance(model, dict) or "preset" not in model:
        return data
    overrides = dict(model)
    preset = overrides.pop("preset")
    if not isinstance(preset, str) or preset not in PRESETS:
        raise SpecError.at("model.preset", f"one of {sorted(PRESETS)}", preset)
    return {**data, "model": {**PRESETS[preset].to_dict(), **overrides}}


def _with_plugins(data: Any) -> Any:
    """Load the plug-ins `plugins:` names (registry.require_plugins) so that their modes
    validate; a plug-in missing here, or another copy of it, is refused by name."""
    refs = data.get("plugins") if isinstance(data, dict) else None
    if not refs:
        return data
    if not isinstance(refs, list):
        raise SpecError.at("plugins", "a list of plug-ins", refs)
    keys = [f.name for f in dataclasses.fields(Plugin)]
    for k, ref in enumerate(refs):
        if not isinstance(ref, dict) or sorted(ref) != sorted(keys):
            raise SpecError.at(f"plugins[{k}]", f"a mapping of {', '.join(keys)}", ref)
    try:
        require_plugins([Plugin(**{key: str(ref[key]) for key in keys}) for ref in refs])
    except PluginError as err:
        raise SpecError(str(err), "plugins") from None
    return data


def config_from_dict(data: dict) -> RunConfig:
    with raising(ConfigError, render=_message):
        return validate(RunConfig, _with_preset(_with_plugins(data)))


def load_config(path: str | Path) -> RunConfig:
    """Read a RunConfig from a .yaml/.yml or .json file."""
    data = read_file(path, error=ConfigError, what="run config")
    with raising(ConfigError, source=str(path), render=_message):
        return validate(RunConfig, _with_preset(_with_plugins(data or {})))


def main(argv: list[str] | None = None) -> int:
    """Validate one run config and print it resolved; a bad file is one line and exit 2."""
    parser = argparse.ArgumentParser(
        prog="python -m aqsgd.train.config",
        usage="%(prog)s FILE   (a run config, e.g. examples/tiny-2stage.yaml)",
        description="Check a run config and print it with every default filled in.")
    parser.add_argument("config", metavar="FILE",
                        help="a run config, .yaml/.yml or .json (e.g. examples/tiny-2stage.yaml)")
    args = parser.parse_args(argv)  # no FILE: usage and the missing argument, exit 2
    try:
        config = load_config(args.config)
    except SpecError as e:  # ConfigError, naming the file, the key and the value
        print(f"{parser.prog}: {e}", file=sys.stderr)
        return 2
    print(yaml.safe_dump(config.to_dict(), sort_keys=False), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
