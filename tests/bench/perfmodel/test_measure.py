"""The performance model's profile (bench.perfmodel.measure), which times with bench.micro.timing,
measured at its smallest size."""

from __future__ import annotations

import pytest

from aqsgd.model.config import TINY_FAMILY
from bench.perfmodel.measure import measure_profile
from bench.perfmodel.profile import load_profile, write_profile


@pytest.mark.slow
def test_the_measured_profile_has_every_stage_and_codec_and_its_file_reads_back(tmp_path):
    profile = measure_profile(repeats=1, name="smoke")
    want = [(preset, depth, s) for preset, n in TINY_FAMILY.items()
            for depth in sorted({n, max(1, n // 2)}) for s in range(depth)]
    assert [(c.preset, c.stages, c.stage) for c in profile.compute.stages] == want
    assert all(c.forward_s > 0 and c.backward_s > 0 and c.optimizer_s > 0
               for c in profile.compute.stages)
    compress = profile.compress
    assert sorted(compress.encode_s_per_element) == sorted(compress.decode_s_per_element)
    assert all(v > 0 for v in compress.encode_s_per_element.values())
    assert compress.grad_s_per_element["fp32"] == 0.0
    assert all(v > 0 for k, v in compress.grad_s_per_element.items() if k != "fp32")
    path = write_profile(profile, tmp_path / "smoke.yaml")
    assert load_profile(path).to_dict() == profile.to_dict()
