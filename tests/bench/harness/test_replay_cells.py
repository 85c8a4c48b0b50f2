"""Replayed compute in the harness: a profile resolved into the worker's compute section
(bench.perfmodel.replay.replay_compute), its errors naming the file, the field and the
value, the replayed cell's label, and speed-ups that never divide a replayed row by a
measured one."""

from __future__ import annotations

import math

import pytest
import yaml
from report_fixtures import write_fixture_cell

from aqsgd.model.config import PRESETS
from bench.harness.cells import run_config
from bench.harness.sweep import CellSpec, Workload, parse_mode
from bench.perfmodel.profile import PROFILE_DIR, ProfileError, load_profile
from bench.perfmodel.replay import replay_compute
from bench.report.summary import summarize

CPU = "replay:cpu-2core"


def test_the_profile_s_times_of_the_cut_become_the_compute_section_in_stage_order():
    compute = replay_compute(CPU, PRESETS["tiny-4"], 4, 16, "fp32")
    profile = load_profile("cpu-2core")
    measured = profile.compute.measured("tiny-4", 4, 16)
    assert compute.profile == "cpu-2core" and compute.precision == "fp32"
    assert [(t.forward_s, t.backward_s, t.optimizer_s) for t in compute.stages] == \
        [(c.forward_s, c.backward_s, c.optimizer_s) for c in measured]
    assert not replay_compute("real", PRESETS["tiny"], 2, 16, "fp32").replayed


def test_the_gpu_profile_replays_gpt2_xl_in_8_stages():
    compute = replay_compute("replay:results/gpu/profile-bf16.yaml", PRESETS["gpt2-xl"], 8, 1,
                             "bf16")
    assert len(compute.stages) == 8 and compute.precision == "bf16"


def test_a_cut_the_profile_lacks_is_refused_naming_file_field_and_what_it_has():
    with pytest.raises(ProfileError) as err:
        replay_compute(CPU, PRESETS["tiny"], 2, 8, "fp32")
    text = str(err.value)
    assert str(PROFILE_DIR / "cpu-2core.yaml") in text and "'compute.stages'" in text
    assert "micro-batch 8" in text and "tiny in 2 stages, micro-batch 16" in text
    # another shape under the preset's name does not match either
    with pytest.raises(ProfileError, match="'n_embd': 96"):
        replay_compute(CPU, PRESETS["tiny"].replace(n_embd=96), 2, 16, "fp32")


def test_a_precision_other_than_the_profile_s_is_refused():
    with pytest.raises(ProfileError, match=r"field 'precision'.* bf16 compute.*'fp32'"):
        replay_compute("replay:results/gpu/profile-bf16.yaml", PRESETS["gpt2-xl"], 8, 1,
                       "fp32")


def test_a_bad_profile_file_is_refused_naming_the_file_the_field_and_the_value(tmp_path):
    raw = yaml.safe_load((PROFILE_DIR / "cpu-2core.yaml").read_text())
    raw["compute"]["stages"][2]["backward_s"] = -0.5
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(raw))
    with pytest.raises(ProfileError, match=r"bad.yaml: field 'compute.stages\[2\].backward_s'"
                                           r".*got -0.5"):
        replay_compute(f"replay:{bad}", PRESETS["tiny"], 2, 16, "fp32")
    raw["compute"]["stages"][2]["backward_s"] = 0.01
    raw["compute"]["stages"][0]["preset"] = "tiny-99"
    bad.write_text(yaml.safe_dump(raw))
    with pytest.raises(ProfileError, match=r"field 'compute.stages\[0\].preset'.*'tiny-99'"):
        replay_compute(f"replay:{bad}", PRESETS["tiny"], 2, 16, "fp32")
    with pytest.raises(ProfileError, match="no-such-profile"):
        replay_compute("replay:no-such-profile", PRESETS["tiny"], 2, 16, "fp32")


def test_the_workload_names_the_profile_in_its_label_and_builds_no_checkpoint():
    w = Workload(compute="replay:results/gpu/profile-bf16.yaml", schedule="1f1b")
    assert w.label == "1f1b+replay-profile-bf16"
    assert w.checkpoint_preset is None
    assert "compute" in w.identity() and "compute" not in Workload().identity()
    with pytest.raises(ValueError, match=r"Workload.compute must be 'real' or 'replay:PROFILE'"):
        Workload(compute="gpu")


def test_a_replayed_cell_s_run_config_carries_the_profile_s_times(tmp_path):
    cell = CellSpec("100mbps", parse_mode("aqsgd:2/4"),
                    Workload(compute=CPU, init_from=None, train_samples=64))
    config = run_config(cell, tmp_path)
    assert config.compute.replayed and config.compute.profile == "cpu-2core"
    assert len(config.compute.stages) == 2
    # stand-in stages read token ids only: synthetic windows, no tokenizer
    assert config.data.name == "synthetic" and config.data.tokenizer is None


def test_a_speed_up_never_divides_a_replayed_row_by_a_measured_one(tmp_path):
    write_fixture_cell(tmp_path, step_time_s=0.8)  # measured fp32
    write_fixture_cell(tmp_path, mode="aqsgd", fw=2, bw=4, step_time_s=0.2,
                       variant="replay-cpu-2core")
    rows = {r["variant"]: r for r in summarize([tmp_path]).to_dict("records")}
    assert math.isnan(rows["replay-cpu-2core"]["speedup_vs_fp32"])
    assert rows[""]["speedup_vs_fp32"] == pytest.approx(1.0)
    assert rows[""]["coding_comm_ratio"] == 0.0  # the fixture codes in no time
    write_fixture_cell(tmp_path, step_time_s=0.4, variant="replay-cpu-2core")  # its own
    rows = [r for r in summarize([tmp_path]).to_dict("records") if r["mode"] == "aqsgd"]
    assert rows[0]["speedup_vs_fp32"] == pytest.approx(2.0)
