"""The shipped replayed sweeps (scenarios/sweeps/paper-replay*.yaml, nanogpt*.yaml): what
their files run, the memory stated before the first cell (bench.harness.memory) and the
refusal when it would not fit, and the smoke sizes end to end through the real harness
and real workers, their measured peak memory against the estimate."""

from __future__ import annotations

import csv
import re
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from aqsgd.model.config import PRESETS
from bench import REPO_ROOT
from bench.__main__ import main
from bench.harness.memory import (
    RUNTIME_BYTES,
    MemoryRefusal,
    cell_memory,
    memory_line,
)
from bench.harness.modes import parse_mode
from bench.harness.sweep import CellSpec, SweepSpec, load_sweep
from bench.harness.workload import Workload
from bench.launch.choice import choose_launcher
from bench.net.scenario import load_scenario

SWEEPS = REPO_ROOT / "scenarios" / "sweeps"
GIB = 2**30
XL_REPLAY = Workload(preset="gpt2-xl", stages=8, micro_batch_size=1, num_micro_batches=32,
                     train_samples=32, steps=4, precision="bf16", init_from=None,
                     eval_samples=0, compute="replay:results/gpu/profile-bf16.yaml")


def _spec(name: str) -> SweepSpec:
    return load_sweep(SWEEPS / f"{name}.yaml")


def test_the_paper_replay_sweep_is_the_paper_s_setting_under_gpipe_and_1f1b():
    spec = _spec("paper-replay")
    cells = spec.cells()
    rates = {load_scenario(s).link.rate_mbit for s in spec.scenarios}
    assert rates == {10000, 1000, 500, 300, 100}
    assert all(load_scenario(s).layout.stages == 8 for s in spec.scenarios)
    for c in cells:
        w = c.workload
        assert (w.preset, w.stages, w.replicas, w.micro_batch_size, w.num_micro_batches) == (
            "gpt2-xl", 8, 1, 1, 32)
        assert (w.precision, w.compute, w.init_from) == (
            "bf16", "replay:results/gpu/profile-bf16.yaml", None)
        assert w.steps_per_epoch == 1 and w.warmup_steps == 1  # then steps over the same windows
    modes = {"fp32", "bf16", "directq:4/8", "aqsgd:4/8", "aqsgd:2/4"}
    for schedule in ("gpipe", "1f1b"):
        runs = {(c.scenario, str(c.mode)) for c in cells if c.workload.schedule == schedule}
        assert runs == {(s, m) for s in spec.scenarios for m in modes}, schedule


def test_aqsgd_gc_runs_in_its_own_sweep_of_2_replicas_with_its_references():
    spec = _spec("paper-replay-gc")
    cells = spec.cells()
    assert {str(c.mode) for c in cells} == {"fp32", "bf16", "aqsgd+gc/qadam:2/4"}
    assert {(c.workload.stages, c.workload.replicas) for c in cells} == {(8, 2)}
    for name in spec.scenarios:
        layout = load_scenario(name).layout
        assert (layout.stages, layout.replicas) == (8, 2)


def test_the_nanogpt_sweep_is_protocolnanogpt_s_setting_under_both_accountings():
    spec = _spec("nanogpt")
    assert set(spec.scenarios) == {"nanogpt-200mbps", "nanogpt-200mbps-inbound"}
    cells = spec.cells()
    assert {str(c.mode) for c in cells} == {"bf16", "aqsgd:2/4"}
    for c in cells:
        w = c.workload
        assert (w.preset, w.stages, w.micro_batch_size, w.num_micro_batches, w.schedule,
                w.precision, w.compute) == ("nanogpt-8x1024", 8, 8, 64, "1f1b", "bf16",
                                            "replay:a100-bf16")
        assert PRESETS[w.preset].n_layer == w.stages  # one layer a stage
        assert w.train_samples == w.global_batch  # each step revisits every window
        assert w.overrides["forward.cache_storage"] == "mmap"  # 14 GiB of caches: on disk


def test_aqsgd_s_caches_are_samples_x_seq_len_x_width_at_both_ends_of_every_boundary():
    fp32 = cell_memory(CellSpec("100mbps-8hosts", parse_mode("fp32"), XL_REPLAY))
    aq = cell_memory(CellSpec("100mbps-8hosts", parse_mode("aqsgd:2/4"), XL_REPLAY))
    assert fp32.caches == 0
    assert aq.caches == 2 * 7 * 32 * 1024 * 1600 * 2  # fp16 cache, forward only
    assert aq.runtime == 8 * RUNTIME_BYTES and aq.weights < 1e6  # stand-ins: no weights
    assert aq.total == aq.runtime + aq.weights + aq.activations + aq.caches + aq.messages
    # 1F1B holds at most S - stage micro-batches in flight, GPipe all 32; a middle stage
    # has two boundary sides, the first and the last one: 32 x 14 against 8 + 2 x 27 + 1
    one_f = cell_memory(CellSpec("100mbps-8hosts", parse_mode("aqsgd:2/4"),
                                 replace(XL_REPLAY, schedule="1f1b")))
    assert one_f.activations * 32 * 14 == aq.activations * 63
    # caches on disk leave memory
    disk = replace(XL_REPLAY, overrides={"forward.cache_storage": "mmap",
                                         "forward.cache_dir": "/var/tmp"})
    mm = cell_memory(CellSpec("100mbps-8hosts", parse_mode("aqsgd:2/4"), disk))
    assert mm.caches == 0 and mm.caches_on_disk == aq.caches


def test_real_weights_count_with_adam_s_state_and_replicated_stand_ins_hold_them_too():
    real = cell_memory(CellSpec("100mbps", parse_mode("fp32"), Workload(preset="tiny-4",
                                                                         stages=4)))
    assert real.weights == 20 * PRESETS["tiny-4"].num_parameters()
    gc = _spec("paper-replay-gc").cells()[-1]
    assert cell_memory(gc).weights == 2 * 44 * PRESETS["gpt2-xl"].num_parameters()


def test_the_largest_cell_is_stated_and_a_sweep_that_would_not_fit_is_refused():
    spec = _spec("paper-replay")
    todo = [c for c in spec.cells() if c.scenario == "100mbps-8hosts"]
    line = memory_line(spec, todo, machine=(20 * GIB, 23 * GIB))
    assert re.fullmatch(r"memory: the largest cell 100mbps-8hosts__aqsgd-fw4-bw8__\S+, about "
                        r"[\d.]+ GiB over its 8 ranks \(runtime [\d.]+, weights [\d.]+, "
                        r"activations [\d.]+, AQ-SGD caches 1\.37, messages [\d.]+ GiB\) "
                        r"against this machine's 20\.0 GiB available of 23\.0 GiB", line)
    # 8.94 GiB against 8 available: the caches' 1.37 on disk would make it fit
    with pytest.raises(MemoryRefusal, match=r"sweep paper-replay: cell 100mbps-8hosts__aqsgd-"
                       r"fw4-bw8__\S+ needs about [\d.]+ GiB .* this machine has 8\.0 GiB "
                       r"available of 23\.0 GiB: put AQ-SGD's caches on disk \(workload "
                       r"overrides: forward.cache_storage: mmap"):
        memory_line(spec, todo, machine=(8 * GIB, 23 * GIB))
    # against 2 they would not: the fix offered is a smaller cell or more hosts
    with pytest.raises(MemoryRefusal, match=r"available of 4\.0 GiB: run fewer train_samples"):
        memory_line(spec, todo, machine=(2 * GIB, 4 * GIB))
    # a launcher that runs every rank here is held to this machine's memory; one whose
    # ranks run on their own hosts (ssh) only hears the estimate
    with pytest.raises(MemoryRefusal):
        memory_line(spec, todo, choose_launcher("local"), machine=(2 * GIB, 4 * GIB))
    line = memory_line(spec, todo, SimpleNamespace(name="ssh"), machine=(2 * GIB, 4 * GIB))
    assert line.endswith("(launcher ssh runs the ranks on their own hosts)")


def test_the_dry_run_states_time_and_memory_and_refuses_what_would_not_fit(tmp_path, capsys):
    assert main(["sweep", str(SWEEPS / "paper-replay.yaml"), "--dry-run", "--out",
                 str(tmp_path / "p")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"sweep paper-replay: 50 of 50 cells to run, about [\d.]+ min", out)
    assert re.search(r"memory: the largest cell \S+, about [\d.]+ GiB over its 8 ranks", out)
    assert main(["sweep", str(SWEEPS / "paper-replay-gc.yaml"), "--dry-run", "--out",
                 str(tmp_path / "gc")]) == 2
    err = capsys.readouterr().err
    assert re.search(r"error: sweep paper-replay-gc: cell \S+ needs about [\d.]+ GiB "
                     r"\(runtime [\d.]+, weights [\d.]+", err)


def _summary(out: Path) -> list[dict]:
    with open(out / "summary.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(900)  # 2 cells of 4 ranks each: 42-78 s here, far more beside a loaded CI
@pytest.mark.parametrize("name, schedules", [("paper-replay-smoke", {"gpipe", "1f1b"}),
                                             ("nanogpt-smoke", {"1f1b"})])
def test_smoke_sizes_end_to_end_with_memory_measured_against_the_estimate(
        tmp_path, capsys, name, schedules):
    out = tmp_path / name
    args = ["sweep", str(SWEEPS / f"{name}.yaml"), "--out", str(out), "--launcher", "local",
            "--quiet"]
    code = main(args)
    text = capsys.readouterr().out
    assert code == 0, text  # a failed cell's reason is in the table printed
    assert re.search(rf"sweep {name}: 2 of 2 cells to run, about [\d.]+ min", text)
    stated = re.search(r"memory: the largest cell (\S+), about ([\d.]+) GiB", text)
    assert stated is not None
    rows = _summary(out)
    assert len(rows) == 2 and {r["status"] for r in rows} == {"ok"}
    assert {r["schedule"] for r in rows} == schedules
    spec = _spec(name)
    for row, cell in zip(sorted(rows, key=lambda r: r["spec_name"]),
                         sorted(spec.cells(), key=lambda c: c.name), strict=True):
        assert row["spec_name"] == cell.name
        assert float(row["bytes_per_step"]) > 0 and float(row["step_time_s"]) > 0
        measured = float(row["peak_rss_total_bytes"])
        estimate = cell_memory(cell).total
        # the estimate is of the right size: within a factor of 1.5 of the measured peak
        assert estimate / 1.5 < measured < estimate * 1.5, (cell.name, measured, estimate)
        assert float(row["peak_rss_max_bytes"]) * cell.world_size >= measured
