"""Replay from a profile's FLOP rate (bench.perfmodel.replay.replay_compute on a profile
without the measured cut) and replayed coding in the harness: the times are the
performance model's own derivation and the record says so; the coding setting reaches
the worker's compute section, refused where the profile cannot give it."""

from __future__ import annotations

import pytest

from aqsgd.model.config import PRESETS
from aqsgd.train.config import PipelineConfig, RunConfig, TrainConfig
from aqsgd.train.replay import ReplayStage
from bench.harness.cells import run_config
from bench.harness.sweep import CellSpec, Workload, parse_mode
from bench.perfmodel.profile import ProfileError, load_profile
from bench.perfmodel.replay import replay_compute
from bench.perfmodel.workload import _stage_work, stage_params

A100 = "replay:a100-bf16"


def _model_times(model, stages: int, micro_batch_size: int) -> list[tuple]:
    config = RunConfig(model=model, pipeline=PipelineConfig(
        stages=stages, micro_batch_size=micro_batch_size), train=TrainConfig(eval_batches=0))
    return [(w.forward_s, w.backward_s, w.optimizer_s)
            for w in _stage_work(config, load_profile("a100-bf16"))]


def test_a_cut_of_the_published_profile_is_derived_from_its_flop_rate_as_the_model_does():
    model = PRESETS["nanogpt-8x1024"]
    compute = replay_compute(A100, model, 8, 8, "bf16")
    times = [(t.forward_s, t.backward_s, t.optimizer_s) for t in compute.stages]
    assert times == _model_times(model, 8, 8)
    assert all(b == 2 * f for f, b, _ in times) and times[0][0] > 0
    assert compute.derived.startswith("from flop_rate_tflops 125.0")
    assert "optimizer_gbyte_s 1400.0" in compute.derived
    # the stand-in waits what was derived: the last stage (its head) is the slowest
    stage = ReplayStage(compute.stages[-1], first=False, last=True, n_embd=model.n_embd)
    assert stage.times.forward_s == times[-1][0] == max(t[0] for t in times)


def test_a_measured_cut_stays_measured():
    compute = replay_compute("replay:cpu-2core", PRESETS["tiny-4"], 4, 16, "fp32")
    assert compute.derived is None


def test_the_nanogpt_cell_replays_without_a_gpu_and_its_run_config_says_derived(tmp_path):
    w = Workload(preset="nanogpt-8x1024", stages=8, micro_batch_size=8, precision="bf16",
                 compute=A100, init_from=None, train_samples=64)
    config = run_config(CellSpec("loopback-8hosts", parse_mode("aqsgd:2/4"), w), tmp_path)
    recorded = config.to_dict()["compute"]
    assert recorded["derived"].startswith("from flop_rate_tflops")
    assert [s["forward_s"] for s in recorded["stages"]] == \
        [t[0] for t in _model_times(config.model, 8, 8)]
    assert recorded["coding"] == "real" and recorded["coding_rates"] is None


def test_a_profile_with_neither_the_cut_nor_a_flop_rate_is_refused():
    with pytest.raises(ProfileError, match=r"cpu-2core.yaml: field 'compute.stages'.*no "
                                           r"compute.flop_rate_tflops"):
        replay_compute("replay:cpu-2core", PRESETS["tiny"], 2, 8, "fp32")


def test_replayed_coding_takes_the_profile_s_rates_of_the_cell_s_modes(tmp_path):
    w = Workload(compute="replay:cpu-2core", coding="replay", init_from=None,
                 train_samples=64)
    assert w.label == "replay-cpu-2core+replay-coding"
    assert "coding" in w.identity() and "coding" not in Workload().identity()
    config = run_config(CellSpec("100mbps", parse_mode("aqsgd:2/4"), w), tmp_path)
    profile = load_profile("cpu-2core")
    rates = config.compute.coding_rates
    assert config.compute.coding == "replay"
    assert rates.forward_encode_s == profile.compress.encode_s_per_element["aqsgd"]
    assert rates.backward_decode_s == profile.compress.decode_s_per_element["directq"]
    with pytest.raises(ValueError, match=r"Workload.coding 'replay' .* needs compute replay"):
        Workload(coding="replay")


def test_a_mode_the_profile_has_no_coding_entry_for_is_refused_naming_file_field_mode():
    # a built-in mode's entry is required by the profile's loader; a plug-in's may lack one
    with pytest.raises(ProfileError, match=r"cpu-2core.yaml: field 'compress."
                                           r"encode_s_per_element': no entry for mode "
                                           r"'my-plugin-mode'"):
        replay_compute("replay:cpu-2core", PRESETS["tiny"], 2, 16, "fp32", coding="replay",
                       modes=("my-plugin-mode", "none"))


def test_a_replicated_replayed_cell_records_each_stage_s_exchanged_parameters(tmp_path):
    w = Workload(compute="replay:cpu-2core", replicas=2, init_from=None, train_samples=64)
    config = run_config(CellSpec("loopback", parse_mode("aqsgd+gc/qadam:2/4"), w), tmp_path)
    assert config.pipeline.replicas == 2
    assert list(config.compute.grad_params) == stage_params(config.model, 2)
    single = run_config(CellSpec("loopback", parse_mode("aqsgd:2/4"),
                                 Workload(compute="replay:cpu-2core", init_from=None,
                                          train_samples=64)), tmp_path / "one")
    assert single.compute.grad_params == ()

