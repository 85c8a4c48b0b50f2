"""The replay-against-real benchmark (bench.harness.replay_check): its in-situ profile
scales each stage's times to the compute a real cell's rank recorded. The timed
comparison itself is a benchmark that prints its figures (`make replay-check`), not a
test: on a shared machine its outcome depends on the load."""

from __future__ import annotations

import json

import pytest

from bench.harness.replay_check import MICRO_BATCHES, in_situ
from bench.perfmodel.profile import ComputeProfile, Profile, StageCost, load_profile, write_profile


def _profile(path):
    costs = tuple(StageCost(preset="tiny", stages=2, stage=s, micro_batch_size=16,
                            forward_s=0.01, backward_s=0.02, optimizer_s=0.005)
                  for s in range(2))
    return write_profile(Profile(name="here", device="test", source="test",
                                 date="2026-12-07", kind="measured", cores=2,
                                 compute=ComputeProfile(stages=costs)), path)


def _cell(tmp_path, compute_s):
    cell = tmp_path / "cell"
    (cell / "metrics").mkdir(parents=True)
    for rank, seconds in enumerate(compute_s):
        records = [{"kind": "train", "warmup": step == 0, "compute_s": 99.0 if step == 0
                    else seconds} for step in range(5)]
        (cell / "metrics" / f"rank{rank}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in records))
    return cell


def test_in_situ_scales_each_stage_to_the_compute_its_rank_recorded(tmp_path):
    profile = _profile(tmp_path / "here.yaml")
    alone = MICRO_BATCHES * (0.01 + 0.02) + 0.005          # a step's compute, measured alone
    cell = _cell(tmp_path, [2 * alone, 3 * alone])          # the warm-up step is left out
    scaled = load_profile(in_situ(profile, cell, tmp_path / "own.yaml")).compute.stages
    assert [c.forward_s for c in scaled] == pytest.approx([0.02, 0.03])
    assert [c.backward_s for c in scaled] == pytest.approx([0.04, 0.06])
    assert [c.optimizer_s for c in scaled] == pytest.approx([0.01, 0.015])
