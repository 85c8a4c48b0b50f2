"""The performance model's files and commands: the profile format, the step-time
statistic against the reports', the what-if command, the claims verdicts, and a smoke
validation on real cells measured through network namespaces."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
import yaml

from aqsgd.model.config import TINY_FAMILY, TINY_PIPELINE
from aqsgd.train.config import config_from_dict
from bench.__main__ import main
from bench.harness.run import run_sweep
from bench.harness.sweep import SweepSpec, Workload, parse_mode
from bench.perfmodel.profile import ProfileError, load_profile
from bench.perfmodel.project import judge_claims
from bench.perfmodel.validate import in_situ, load_cells, measured_step_s, validate_cells
from bench.perfmodel.workload import step_workload
from bench.report.summary import summarize_cell


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


def _frame() -> pd.DataFrame:
    """Two ranks, a warm-up step and three measured steps of uneven times."""
    rows = []
    times = {0: (9.0, 9.0), 1: (0.30, 0.20), 2: (0.25, 0.40), 3: (0.10, 0.35)}
    for step, pair in times.items():
        for rank, t in enumerate(pair):
            rows.append({"kind": "train", "warmup": step == 0, "step": step, "rank": rank,
                         "stage": rank, "step_time_s": t, "samples": 64, "tokens": 4096,
                         "compute_s": 0.1, "comm_wait_s": 0.0, "loss": 1.0,
                         "bytes_sent_total": 10, "bytes_sent_activation": 10,
                         "bytes_sent_gradient": 0, "bytes_sent_dp": 0})
    return pd.DataFrame(rows)


def test_the_measured_step_time_is_the_reports_statistic():
    frame = _frame()
    assert measured_step_s(frame) == pytest.approx(summarize_cell(frame)["step_time_s"])
    assert measured_step_s(frame) == pytest.approx(0.35)  # median of the slowest ranks


def test_whatif_prints_every_mode_with_its_bound(capsys):
    assert main(["model", "--preset", "tiny", "--stages", "2", "--micro-batch-size", "16",
                 "--micro-batches", "4", "--profile", "cpu-2core", "--scenario",
                 "100mbps"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines()
            if line.split() and line.split()[0] in ("fp32", "directq:4/8", "aqsgd:4/8",
                                                     "aqsgd:2/4")}
    assert set(rows) == {"fp32", "directq:4/8", "aqsgd:4/8", "aqsgd:2/4"}
    assert "communication" in rows["fp32"] and "comm-bound below" in out
    # fp32 carries 4.2 MB a step at 100 Mbit/s: 8x the bytes of 4/8-bit AQ-SGD
    assert " 4.2 " in rows["fp32"] and " 0.8 " in rows["aqsgd:4/8"]


def test_claims_are_judged_at_the_paper_bits_within_the_tolerance():
    table = pd.DataFrame([
        {"mode": "aqsgd:4/8", "family": "aqsgd", "rate_mbit": 100.0, "speedup_vs_fp32": 4.0,
         "rel_fp32_fastest": 0.2},
        {"mode": "aqsgd:4/8", "family": "aqsgd", "rate_mbit": 500.0, "speedup_vs_fp32": 3.0,
         "rel_fp32_fastest": 0.4},
        {"mode": "aqsgd:2/4", "family": "aqsgd", "rate_mbit": 100.0, "speedup_vs_fp32": 9.0,
         "rel_fp32_fastest": 0.9},
    ])
    claims = [{"id": "max_speedup", "text": "up to 4.3x", "metric": "speedup_vs_fp32",
               "mode": "aqsgd", "value": 4.3},
              {"id": "slowdown", "text": "31% slower", "metric": "throughput_rel_fp32_fastest",
               "mode": "aqsgd", "rate_mbit": 500, "value_low": 0.69, "value_high": 0.763}]
    got = {v["id"]: v for v in judge_claims(table, claims)}
    assert got["max_speedup"]["model"] == 4.0 and got["max_speedup"]["reproduced"]
    assert "100 Mbit/s" in got["max_speedup"]["where"]
    assert got["slowdown"]["model"] == 0.4 and not got["slowdown"]["reproduced"]


SMOKE = Workload(steps=3, train_samples=64, timeout_s=150, dist_timeout_s=60, init_from=None)


@pytest.mark.slow
@pytest.mark.netns
@pytest.mark.workers
@pytest.mark.timeout(300)
def test_smoke_validation_on_real_cells(tmp_path):
    """Two real cells at 100 Mbit/s: the model's bytes are the measured bytes exactly, and
    its step time is near the measured one (loosely: three measured steps on a shared
    machine; the full validation is `make paper`'s table)."""
    spec = SweepSpec("smoke", ("100mbps",), (parse_mode("fp32"), parse_mode("aqsgd:2/4")),
                     SMOKE)
    out = tmp_path / "results"
    outcomes = run_sweep(spec, out, launcher="netns", quiet=True, echo=lambda s: None)
    assert [o.status for o in outcomes] == ["ok", "ok"]
    profile = load_profile("cpu-2core")
    cells = load_cells([out])
    table = validate_cells(cells, profile).set_index("label")
    assert (table["bytes_predicted"] == table["bytes_measured"]).all(), table
    assert (table["error"].abs() < 0.30).all(), table[["measured_s", "predicted_s"]]
    # in situ, each stage's compute per step is the cell's own
    for cell in cells:
        work = in_situ(step_workload(config_from_dict(cell.meta["run_config"]),
                                     cell.meta["placement"], profile), cell)
        for s, st in enumerate(work.stage):
            assert work.micro_batches * (st.forward_s + st.backward_s) + st.optimizer_s == (
                pytest.approx(cell.compute_s[s] + cell.other_s[s]))


def test_the_gpu_checks_stage_timing_writes_a_profile_the_model_reads(tmp_path):
    from bench.micro.gpu_check import stage_profile

    prof = stage_profile(torch.device("cpu"), "tiny-4", 4, 2, "fp32", repeats=1)
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(prof))
    loaded = load_profile(path)
    rows = loaded.compute.measured("tiny-4", 4, 2)
    assert [r.stage for r in rows] == [0, 1, 2, 3]
    assert rows[2].forward_s == rows[1].forward_s > 0  # middle stages share a shape
