"""Profiles (bench.perfmodel.profile): the shipped ones, a bad one naming file and field, and
the GPU check's stage timing written as a profile the model reads."""

from __future__ import annotations

import pytest
import torch
import yaml

from aqsgd.model.config import TINY_FAMILY, TINY_PIPELINE
from bench.perfmodel.profile import ProfileError, load_profile


def test_shipped_profiles_load_and_cover_the_tiny_family():
    cpu = load_profile("cpu-2core")
    assert cpu.kind == "measured" and cpu.cores == 2
    for preset, depth in TINY_FAMILY.items():
        # its own depth, and half of it (bench run's data-parallel cells on the same hosts)
        for stages in {depth, depth // 2}:
            rows = cpu.compute.measured(preset, stages, TINY_PIPELINE.micro_batch_size)
            assert [r.stage for r in rows] == list(range(stages))
            assert all(r.forward_s > 0 and r.backward_s > 0 for r in rows)
    gpu = load_profile("a100-bf16")
    assert gpu.kind == "published" and gpu.cores is None
    assert gpu.compute.flop_rate_tflops > 0 and gpu.assumptions


@pytest.mark.parametrize("text,field", [
    ("comm: {overlapp: 1.0}\n", "comm.overlapp"),
    ("comm: {overlap: 1.5}\n", "overlap"),
    ("cores: 0\n", "cores"),
])
def test_a_bad_profile_names_the_file_and_the_field(tmp_path, text, field):
    good = load_profile("a100-bf16").to_dict()
    path = tmp_path / "mine.yaml"
    body = {k: v for k, v in good.items() if k not in ("comm", "cores")}
    path.write_text(yaml.safe_dump(body) + text)
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    assert str(path) in str(err.value) and field in str(err.value)


def test_the_gpu_checks_stage_timing_writes_a_profile_the_model_reads(tmp_path):
    from bench.micro.gpu_check import stage_profile

    prof = stage_profile(torch.device("cpu"), "tiny-4", 4, 2, "fp32", repeats=1)
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(prof))
    loaded = load_profile(path)
    rows = loaded.compute.measured("tiny-4", 4, 2)
    assert [r.stage for r in rows] == [0, 1, 2, 3]
    assert rows[2].forward_s == rows[1].forward_s > 0  # middle stages share a shape
