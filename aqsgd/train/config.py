"""The run configuration: one frozen dataclass tree, loaded from YAML or JSON.

    python -m aqsgd.train.config examples/tiny-2stage.yaml     # validate and print resolved
                                                               # (a bad file: one line, exit 2)

Sections: `model` (aqsgd.model.config.ModelConfig; `preset: tiny` picks a preset and the
other keys override it), `pipeline`, `forward` and `backward`
(aqsgd.compress.message.CompressionConfig), `grad`
(aqsgd.compress.gradient.GradCompressionConfig), `train`, `data`, `dist`, `compute`
(aqsgd.train.replay.ComputeConfig: real, or a profile replayed), `output`. Files and
dicts are checked by specfile against the dataclasses' type hints: unknown keys and
values of the wrong type are rejected with the full key path (`train.lr: expected a
number, got 'fast'`). Each setting is declared once in aqsgd.train.settings (type,
range, default, help), checked in files and in code (`train: total_steps must be >= 1,
got 0`). `RunConfig.to_dict()` is the resolved
configuration.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import Field

from aqsgd.compress.gradient import GradCompressionConfig
from aqsgd.compress.ingraph import boundary_width
from aqsgd.compress.message import GRADIENT_MODES, CompressionConfig
from aqsgd.compress.plugins import Plugin, PluginError
from aqsgd.compress.registry import require_plugins
from aqsgd.model.config import PRESETS, ModelConfig
from aqsgd.train.replay import ComputeConfig
from aqsgd.train.settings import (
    ClipNorm,
    DataName,
    DataPath,
    DistBackend,
    DistDevice,
    DropoutMasks,
    EvalAtStart,
    EvalBatches,
    EvalEvery,
    EvalSamples,
    InitFrom,
    LearningRate,
    LrWarmupSteps,
    MaxSamples,
    MicroBatchSize,
    NumMicroBatches,
    Precision,
    Replicas,
    Schedule,
    Seed,
    Stages,
    TextField,
    Threads,
    TimeoutS,
    Tokenizer,
    TotalSteps,
    WeightDecay,
)
from specfile import SPEC_CONFIG, SpecError, check_fields, raising, read_file, setting, validate

__all__ = [
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


_AtLeast0 = Annotated[int, Field(ge=0)]


# Each setting is declared once, in aqsgd.train.settings (type, range, default, help);
# a field here is `setting(Declaration)`, so the harness's Workload, which builds its
# fields from the same declarations, cannot disagree with it.


@dataclass(frozen=True)
class PipelineConfig:
    stages: Stages = setting(Stages)
    replicas: Replicas = setting(Replicas)
    micro_batch_size: MicroBatchSize = setting(MicroBatchSize)
    num_micro_batches: NumMicroBatches = setting(NumMicroBatches)
    schedule: Schedule = setting(Schedule)

    def __post_init__(self):
        check_fields(self)

    @property
    def world_size(self) -> int:
        return self.stages * self.replicas

    @property
    def samples_per_step(self) -> int:
        return self.replicas * self.num_micro_batches * self.micro_batch_size


@dataclass(frozen=True)
class TrainConfig:
    total_steps: TotalSteps = setting(TotalSteps)
    lr: LearningRate = setting(LearningRate)
    weight_decay: WeightDecay = setting(WeightDecay)
    clip: ClipNorm = setting(ClipNorm)
    lr_warmup_steps: LrWarmupSteps = setting(LrWarmupSteps)
    seed: Seed = setting(Seed)
    init_from: InitFrom = setting(InitFrom)
    threads: Threads = setting(Threads)
    eval_every: EvalEvery = setting(EvalEvery)
    eval_batches: EvalBatches = setting(EvalBatches)
    eval_at_start: EvalAtStart = setting(EvalAtStart)
    dropout_masks: DropoutMasks = setting(DropoutMasks)
    precision: Precision = setting(Precision)
    # Test hooks (not for experiments): raise inside step `fail_at_step` on rank
    # `fail_rank`; write every rank's gradients after the first step to OUTPUT_DIR/grads.
    fail_at_step: _AtLeast0 | None = None
    fail_rank: int = 0
    dump_grads: bool = False

    def __post_init__(self):
        check_fields(self)
        _require(self.lr_warmup_steps <= self.total_steps, "lr_warmup_steps",
                 f"in [0, total_steps={self.total_steps}]", self.lr_warmup_steps)  # fmt: skip
        _require(not self.eval_at_start or self.eval_batches >= 1, "eval_at_start",
                 "false when eval_batches is 0 (no evaluation)", self.eval_at_start)


@dataclass(frozen=True)
class DataConfig:
    name: DataName = setting(DataName)
    path: DataPath = setting(DataPath)  # local file or directory for file-backed data sets
    max_samples: MaxSamples = setting(MaxSamples)
    eval_samples: EvalSamples = setting(EvalSamples)
    text_field: TextField = setting(TextField)
    # None: the suite's BPE of model.vocab_size (aqsgd.model.source.run_tokenizer)
    tokenizer: Tokenizer = setting(Tokenizer)

    def __post_init__(self):
        check_fields(self)


@dataclass(frozen=True)
class DistConfig:
    backend: DistBackend = setting(DistBackend)
    device: DistDevice = setting(DistDevice)
    timeout_s: TimeoutS = setting(TimeoutS)

    def __post_init__(self):
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
    # real compute, or a profile's times replayed by stand-in stages (aqsgd.train.replay)
    compute: ComputeConfig = field(default_factory=ComputeConfig)
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
        try:  # an in-graph half's k fits the width (aqsgd.compress.ingraph)
            boundary_width(self.forward, self.model.n_embd)
        except ValueError as err:
            raise ValueError(f"forward.{str(err).removeprefix('CompressionConfig.')} "
                             f"(model.n_embd {self.model.n_embd})") from None
        self._check_replay()

    def _check_replay(self) -> None:
        c = self.compute
        if not c.replayed:
            return
        if len(c.stages) != self.pipeline.stages:
            raise ValueError(f"compute.stages has {len(c.stages)} entries, one per stage of "
                             f"pipeline.stages={self.pipeline.stages} expected")
        if c.precision != self.train.precision:
            raise ValueError(f"compute.precision {c.precision!r} (profile {c.profile!r}) "
                             f"differs from train.precision {self.train.precision!r}: the "
                             f"profile's times stand for its own precision")
        want = self.pipeline.stages if self.pipeline.replicas > 1 else 0
        if len(c.grad_params) != want:  # the record of what the replicas exchange
            raise ValueError(f"compute.grad_params has {len(c.grad_params)} entries: one "
                             f"per stage with replicas, none without (pipeline.stages="
                             f"{self.pipeline.stages}, replicas={self.pipeline.replicas})")
        if c.coding == "replay":  # aqsgd.train.replay_coding: sizes known before coding
            for name, comp in (("forward", self.forward), ("backward", self.backward)):
                if comp.sized_by_data or comp.widths:
                    raise ValueError(f"{name}.mode {comp.mode!r}"
                                     f"{' with widths' if comp.widths else ''} under "
                                     f"compute.coding 'replay': its message size is chosen "
                                     f"while coding, which replayed coding does not run")

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


# Keys that were renamed: an old file is told the new name, not only "unknown key".
_RENAMED = {("train", "steps"): "train.total_steps (every optimizer step, warm-up included)"}


def _no_old_keys(data: Any) -> Any:
    for (section, key), new in _RENAMED.items():
        if isinstance(data, dict) and isinstance(data.get(section), dict) \
                and key in data[section]:
            raise SpecError(f"renamed: write {new}, got {data[section][key]!r}",
                            f"{section}.{key}")
    return data


def config_from_dict(data: dict) -> RunConfig:
    with raising(ConfigError, render=_message):
        return validate(RunConfig, _with_preset(_with_plugins(_no_old_keys(data))))


def load_config(path: str | Path) -> RunConfig:
    """Read a RunConfig from a .yaml/.yml or .json file."""
    data = read_file(path, error=ConfigError, what="run config")
    with raising(ConfigError, source=str(path), render=_message):
        return validate(RunConfig, _with_preset(_with_plugins(_no_old_keys(data or {}))))


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
