"""Every setting of a run, declared once: its type, range, default and one line of help.

    from aqsgd.train.settings import Stages
    stages: Stages = setting(Stages)          # in a dataclass: the declared default
    declared_default(Stages)                  # 2

The worker's config (aqsgd.train.config: the `pipeline`, `train`, `data` and `dist`
sections) and the harness's Workload (bench.harness.workload) build their fields from
these, so a setting they share has one range, one help line and one default; the
command-line flags and the sweep file's schema come from Workload's fields, the model's
shape from aqsgd.model.config. A setting with two meanings has two names: `TotalSteps`
(every optimizer step, the worker's) and the harness's measured steps after the warm-up.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from aqsgd.data.sources import DATASETS
from aqsgd.model.dropout import DROPOUT_MASKS
from aqsgd.model.gpt2 import PRECISIONS
from aqsgd.train.schedule import SCHEDULES
from specfile import Default

__all__ = [
    "ClipNorm", "Coding", "Compute", "DataName", "DataPath", "DistBackend", "DistDevice",
    "DropoutMasks",
    "EvalAtStart", "EvalBatches", "EvalEvery", "EvalSamples", "InitFrom", "LearningRate",
    "LrWarmupSteps", "MaxSamples", "MicroBatchSize", "NumMicroBatches", "Precision",
    "Replicas", "Schedule", "Seed", "Stages", "TARGET_EVAL_CADENCE", "TextField", "Threads",
    "TimeoutS",
    "Tokenizer", "TotalSteps", "WeightDecay",
]

# ---------------------------------------------------------------- the pipeline
Stages = Annotated[int, Field(ge=1, description="pipeline stages"), Default(2)]
Replicas = Annotated[int, Field(ge=1, description="data-parallel replicas of the pipeline"),
                     Default(1)]
# tiny's micro-batch (aqsgd.model.config.TINY_PIPELINE): comm-bound at 100 Mbit/s
MicroBatchSize = Annotated[int, Field(ge=1, description="samples per micro-batch"), Default(16)]
NumMicroBatches = Annotated[int, Field(ge=1, description=(
    "micro-batches per optimizer step and replica")), Default(4)]
Schedule = Annotated[Literal[tuple(SCHEDULES)], Field(description=(
    "pipeline schedule: gpipe (all forwards, then all backwards) or 1f1b (one forward, "
    "one backward in the steady state; fewer activations held)")), Default("gpipe")]

# ---------------------------------------------------------------- training
TotalSteps = Annotated[int, Field(ge=1, description=(
    "optimizer steps of the whole run, warm-up included")), Default(20)]
# the paper fine-tunes a pre-trained model at a small rate
LearningRate = Annotated[float, Field(gt=0, lt=1, description="peak learning rate (AdamW)"),
                         Default(1e-4)]
WeightDecay = Annotated[float, Field(ge=0, description="AdamW weight decay"), Default(0.01)]
ClipNorm = Annotated[float, Field(ge=0, description=(
    "max global gradient norm across the pipeline (0: no clipping)")), Default(1.0)]
LrWarmupSteps = Annotated[int, Field(ge=0, description=(
    "steps of linear warm-up to lr, then linear decay to 0 at the last step")), Default(0)]
Seed = Annotated[int, Field(ge=0, description="seed of data order, dropout and init"),
                 Default(0)]
# AQ-SGD relies on slowly changing activations: the paper's task is fine-tuning
InitFrom = Annotated[str, Field(description=(
    "starting weights: 'pretrained' (the cached starting checkpoint, built once), none "
    "(random init from the seed) or a state-dict file or Hugging Face model folder")),
    Default("pretrained")] | None
Threads = Annotated[int, Field(ge=1, description="torch threads of each worker process"),
                    Default(1)]
EvalEvery = Annotated[int, Field(ge=0, description=(
    "steps between evaluations (0: only after the last step)")), Default(0)]
# The fewest steps between evaluations that count towards steps to a target held-out loss
# (ProtocolNanoGPT's rule: evaluating more often would credit a method with a finer clock).
TARGET_EVAL_CADENCE = 25
EvalBatches = Annotated[int, Field(ge=0, description=(
    "micro-batches per replica in one evaluation (0: none)")), Default(2)]
EvalAtStart = Annotated[bool, Field(description=(
    "also evaluate before the first step (an eval record at step 0)")), Default(False)]
# Note: "random" is the reference behaviour; "per_sample" repeats a sample's masks at
# every visit (aqsgd.model.dropout, docs/dropout-and-deltas.md)
DropoutMasks = Annotated[Literal[DROPOUT_MASKS], Field(description=(
    "dropout masks in training: random (torch's RNG) or per_sample (seeded by seed, "
    "sample and module)")), Default("random")]
# weights, optimizer and the wire stay as they are (docs/precision.md)
Precision = Annotated[Literal[tuple(PRECISIONS)], Field(description=(
    "compute precision of every stage: fp32, or torch.autocast to bf16 or fp16 (fp16 with "
    "dynamic loss scaling)")), Default("fp32")]

# the stand-in stages and the profile's cut: aqsgd.train.replay (check_compute: its
# spelling), docs/replay.md
Compute = Annotated[str, Field(min_length=1, description=(
    "stage compute: real, or replay:PROFILE (a profile file, or a name under profiles/) "
    "whose measured forward, backward and optimizer times each stage waits instead; the "
    "messages stay real")), Default("real")]
# under replayed compute only: the boundary coders and the gradient codec either run
# (real) or wait the profile's seconds a coded element (aqsgd.train.replay_coding)
Coding = Annotated[Literal["real", "replay"], Field(description=(
    "coding under replayed compute: real (the compressors run) or replay (each message "
    "waits the profile's encode/decode seconds an element and carries a payload of the "
    "real coded size; values synthetic)")), Default("real")]

# ---------------------------------------------------------------- data
DataName = Annotated[Literal[(*DATASETS, "synthetic")], Field(description=(
    f"data set: {', '.join(DATASETS)}, or synthetic (random tokens; tests, benchmarks)")),
    Default("pydoc")]
DataPath = Annotated[str, Field(description=(
    "the data's file, folder or data set id in the local Hugging Face caches (text, "
    "wikitext)")), Default(None)] | None
MaxSamples = Annotated[int, Field(ge=1, description=(
    "training windows (none: all the data gives)")), Default(None)] | None
EvalSamples = Annotated[int, Field(ge=0, description=(
    "held-out windows, never trained on (0: no evaluation)")), Default(128)]
TextField = Annotated[str, Field(min_length=1, description=(
    "column of parquet, arrow or JSON records that holds the text")), Default("text")]
Tokenizer = Annotated[str, Field(description=(
    "tokenizer files: a tokenizer.json, a vocab.json with merges.txt beside it, or a "
    "folder or cached model id holding them (none: the model folder's own, else the "
    "suite's BPE of the model's vocabulary)")), Default(None)] | None

# ---------------------------------------------------------------- torch.distributed
DistBackend = Annotated[Literal["auto", "gloo", "nccl"], Field(description=(
    "torch.distributed backend (auto: nccl on cuda, else gloo)")), Default("auto")]
DistDevice = Annotated[Literal["auto", "cpu", "cuda"], Field(description=(
    "where a stage computes (auto: cuda when there is one)")), Default("auto")]
TimeoutS = Annotated[float, Field(gt=0, description=(
    "seconds init_process_group and every p2p or collective wait may take")), Default(60.0)]
