"""Replayed compute's side of the profile: the times every stage of a cell's cut waits
and, under replayed coding, the seconds an element its coders wait.

    compute = replay_compute("replay:cpu-2core", model, stages=2, micro_batch_size=16,
                             precision="fp32")      # the run config's `compute` section

The harness calls it before any worker starts (bench.harness.cells), so a worker needs
no profile file. Which cut matches, what is derived from a FLOP rate and what is
refused: docs/replay.md.
"""

from __future__ import annotations

from pathlib import Path

from aqsgd.model.config import PRESETS, SHAPE_FIELDS, ModelConfig
from aqsgd.train.config import PipelineConfig, RunConfig, TrainConfig
from aqsgd.train.replay import CodingRates, ComputeConfig, StageTimes, profile_reference
from bench.perfmodel.profile import Profile, ProfileError, StageCost, load_profile, profile_path
from bench.perfmodel.workload import ADAM_BYTES_PER_PARAM, _stage_work, stage_params

__all__ = ["replay_compute"]


def _shape(model: ModelConfig) -> dict:
    return {k: getattr(model, k) for k in SHAPE_FIELDS}


def _cut_text(c: StageCost) -> str:
    return f"{c.preset} in {c.stages} stages, micro-batch {c.micro_batch_size}"


def replay_compute(source: str, model: ModelConfig, stages: int, micro_batch_size: int,
                   precision: str, coding: str = "real",
                   modes: tuple[str, str] = ("none", "none"),
                   replicas: int = 1) -> ComputeConfig:
    """The worker's compute section for `source` ('real', or 'replay:PROFILE'): the
    profile's measured times of every stage of this cut. A stage cost matches when its
    preset's shape is `model`'s (every SHAPE_FIELDS value), its stage count and its
    micro-batch are these, and the profile's precision is `precision`. A profile without
    that cut but with a `flop_rate_tflops` gives times derived from it, by the
    performance model's own rule (bench.perfmodel.workload), and says so in `derived`.
    `coding` 'replay' adds the profile's seconds an element for `modes` (the forward
    and the backward mode). With `replicas` > 1, `grad_params` records each stage's
    parameter count (bench.perfmodel.workload.stage_params), which the stand-ins'
    gradient exchange moves. ProfileError naming the file, the field and the value
    otherwise."""
    reference = profile_reference(source)
    if reference is None:
        if coding != "real":
            raise ProfileError(f"field 'coding': {coding!r} replays the coding from a profile, "
                               f"which needs compute: replay:PROFILE (got {source!r})")
        return ComputeConfig(source=source)
    profile = load_profile(reference)
    path = profile_path(reference)
    if profile.precision != precision:
        raise ProfileError(f"{path}: field 'precision': the profile's times are for "
                           f"{profile.precision} compute, the run's precision is "
                           f"{precision!r}: set precision: {profile.precision}")
    for k, cost in enumerate(profile.compute.stages):
        if cost.preset not in PRESETS:
            raise ProfileError(f"{path}: field 'compute.stages[{k}].preset': expected one "
                               f"of {sorted(PRESETS)}, got {cost.preset!r}")
    rows = sorted((c for c in profile.compute.stages
                   if _shape(PRESETS[c.preset]) == _shape(model) and c.stages == stages
                   and c.micro_batch_size == micro_batch_size), key=lambda c: c.stage)
    derived = None
    if [c.stage for c in rows] == list(range(stages)):
        times = tuple(StageTimes(c.forward_s, c.backward_s, c.optimizer_s) for c in rows)
    elif profile.compute.flop_rate_tflops is not None:
        times, derived = _derived_times(profile, model, stages, micro_batch_size)
    else:
        have = sorted({_cut_text(c) for c in profile.compute.stages}) or ["none"]
        raise ProfileError(f"{path}: field 'compute.stages': no measured stage "
                           f"{sorted(set(range(stages)) - {c.stage for c in rows})} of a "
                           f"model of shape {_shape(model)} in {stages} stages with "
                           f"micro-batch {micro_batch_size} (measured cuts: "
                           f"{'; '.join(have)}) and no compute.flop_rate_tflops to derive "
                           f"them from; `python -m bench profile` measures them")
    rates = _coding_rates(profile, path, modes) if coding == "replay" else None
    grads = tuple(stage_params(model, stages)) if replicas > 1 else ()
    return ComputeConfig(source=source, profile=profile.name, precision=profile.precision,
                         stages=times, derived=derived, coding=coding, coding_rates=rates,
                         grad_params=grads)


def _derived_times(profile: Profile, model: ModelConfig, stages: int,
                   micro_batch_size: int) -> tuple[tuple[StageTimes, ...], str]:
    """Every stage's times from the profile's FLOP rate, by the performance model's rule
    (bench.perfmodel.workload: forward = stage FLOPs / rate, backward = 2 x forward,
    optimizer = 28 bytes a parameter / optimizer_gbyte_s), and the words that say so."""
    config = RunConfig(model=model, pipeline=PipelineConfig(
        stages=stages, micro_batch_size=micro_batch_size), train=TrainConfig(eval_batches=0))
    work = _stage_work(config, profile)
    c = profile.compute
    optimizer = (f"optimizer = {ADAM_BYTES_PER_PARAM} bytes a parameter / "
                 f"optimizer_gbyte_s {c.optimizer_gbyte_s}" if c.optimizer_gbyte_s
                 else "optimizer 0 (no optimizer_gbyte_s)")
    words = (f"from flop_rate_tflops {c.flop_rate_tflops}: forward = stage FLOPs / rate, "
             f"backward = 2 x forward, {optimizer} (bench.perfmodel.workload)")
    return tuple(StageTimes(w.forward_s, w.backward_s, w.optimizer_s) for w in work), words


def _coding_rates(profile: Profile, path: Path, modes: tuple[str, str]) -> CodingRates:
    """The profile's seconds an element of the forward and backward modes' coding;
    ProfileError naming the file, the table and the mode without an entry."""
    forward, backward = modes
    tables = profile.compress

    def rate(table: str, mode: str) -> float:
        entries = getattr(tables, table)
        if mode not in entries:
            raise ProfileError(f"{path}: field 'compress.{table}': no entry for mode "
                               f"{mode!r}, which coding: replay needs (profiled modes: "
                               f"{sorted(entries)})")
        return entries[mode]

    return CodingRates(rate("encode_s_per_element", forward),
                       rate("decode_s_per_element", forward),
                       rate("encode_s_per_element", backward),
                       rate("decode_s_per_element", backward))
