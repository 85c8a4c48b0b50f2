"""Mode syntax (NAME[/GRAD][:FW/BW]), seeds and variants of a sweep, the time stated up
front (bench.harness.modes, bench.harness.sweep)."""

from __future__ import annotations

import pytest

from aqsgd.compress.gradient import GradCompressionConfig
from aqsgd.train.config import load_config
from bench.harness.cells import run_config, write_run_config
from bench.harness.modes import DEFAULT_GRID, GRAD_COMPRESSORS, ModeSpec, parse_mode
from bench.harness.sweep import CellSpec, SweepSpec, Timing, Variant, Workload, load_sweep


@pytest.mark.parametrize("text, name, grad, label, canonical", [
    ("aqsgd+gc:2/4", "aqsgd+gc", "qadam", "aqsgd+gc-qadam-fw2-bw4", "aqsgd+gc/qadam:2/4"),
    ("aqsgd+gc", "aqsgd+gc", "qadam", "aqsgd+gc-qadam-fw2-bw4", "aqsgd+gc/qadam:2/4"),
    ("aqsgd+gc/ef21:2/4", "aqsgd+gc", "ef21", "aqsgd+gc-ef21-fw2-bw4", "aqsgd+gc/ef21:2/4"),
    ("aqsgd+gc/natural:3/6", "aqsgd+gc", "natural", "aqsgd+gc-natural-fw3-bw6",
     "aqsgd+gc/natural:3/6"),
    ("aqsgd+gc/powersgd:2/4", "aqsgd+gc", "powersgd", "aqsgd+gc-powersgd-fw2-bw4",
     "aqsgd+gc/powersgd:2/4"),
    ("aqsgd-lowbits", "aqsgd-lowbits", "qadam", "aqsgd-lowbits-fw2-bw4", "aqsgd-lowbits:2/4"),
    ("directq:2/4", "directq", "qadam", "directq-fw2-bw4", "directq:2/4"),
])
def test_mode_syntax_names_the_gradient_compressor(text, name, grad, label, canonical):
    mode = parse_mode(text)
    assert (mode.name, mode.grad_mode, mode.label, str(mode)) == (name, grad, label, canonical)
    assert parse_mode(str(mode)) == mode  # str reads back


@pytest.mark.parametrize("text, match", [
    ("aqsgd/ef21:2/4", r"only aqsgd\+gc selects a gradient compressor"),
    ("fp32/qadam", r"only aqsgd\+gc selects a gradient compressor"),
    ("aqsgd+gc/topk:2/4", "gradient compressor must be one of qadam, ef21, natural, powersgd"),
    ("aqsgd+gc/:2/4", "gradient compressor must be one of"),
])
def test_bad_gradient_compressor_is_refused(text, match):
    with pytest.raises(ValueError, match=match):
        parse_mode(text)


def test_grad_mode_belongs_to_aqsgd_gc_only():
    with pytest.raises(ValueError, match="selects the gradient compressor of aqsgd"):
        ModeSpec("aqsgd", 2, 4, grad_mode="ef21")
    assert set(GRAD_COMPRESSORS) == {"qadam", "ef21", "natural", "powersgd"}


def test_powersgd_runs_at_the_default_rank_unless_a_sweep_overrides_it(tmp_path):
    # the spelling's bits are the activations'; PowerSGD's rank is grad.powersgd_rank
    mode = parse_mode("aqsgd+gc/powersgd:2/4")
    grad = run_config(CellSpec("loopback", mode, Workload(replicas=2)), tmp_path).grad
    assert (grad.mode, grad.powersgd_rank) == ("powersgd", GradCompressionConfig.powersgd_rank)
    cell = CellSpec("loopback", mode, Workload(replicas=2,
                                               overrides={"grad.powersgd_rank": 8}))
    config = run_config(cell, tmp_path)
    assert (config.forward.bits, config.backward.bits, config.grad.powersgd_rank) == (2, 4, 8)
    assert load_config(write_run_config(config, tmp_path / "config.yaml")).grad == config.grad


def test_default_grid_has_directq_beside_aqsgd_at_2_4():
    grid = [parse_mode(m) for m in DEFAULT_GRID]
    assert ModeSpec("directq", 2, 4) in grid and ModeSpec("aqsgd", 2, 4) in grid
    assert [str(m) for m in grid] == list(DEFAULT_GRID)


def test_cell_names_are_unique_per_seed_and_variant():
    base = Workload(epochs=3, train_samples=256)
    modes = (parse_mode("fp32"), parse_mode("aqsgd:2/4"), parse_mode("aqsgd+gc/ef21:2/4"))
    spec = SweepSpec("c", ("loopback",), modes, base, seeds=(1, 2),
                     variants=(Variant((modes[1],), Workload(epochs=3, train_samples=256,
                                                             dropout=0.0,
                                                             variant="dropout0")),))
    cells = spec.cells()
    names = [c.name for c in cells]
    assert len(names) == len(set(names)) == 2 * 5  # fp32, aqsgd, fp32-dp2, gc, variant
    assert names[:5] == ["loopback__fp32__s1", "loopback__aqsgd-fw2-bw4__s1",
                         "loopback__fp32-dp2__s1", "loopback__aqsgd+gc-ef21-fw2-bw4-dp2__s1",
                         "loopback__aqsgd-fw2-bw4__dropout0__s1"]
    assert [c.workload.seed for c in cells] == [1] * 5 + [2] * 5
    assert len({c.key for c in cells}) == len(cells)
    # one seed, no seeds list: names as before (bench cells)
    assert CellSpec("100mbps", modes[1]).name == "100mbps__aqsgd-fw2-bw4"


def test_variant_file_merges_over_the_workload_and_names_its_fields(tmp_path):
    path = tmp_path / "v.yaml"
    head = ("name: v\nscenarios: [loopback]\nmodes: [fp32, \"aqsgd:2/4\"]\nseeds: [1, 2]\n"
            "workload: {epochs: 4, train_samples: 256, lr: 0.0003}\n")
    path.write_text(head + "variants:\n  - {name: dropout0, modes: [\"aqsgd:2/4\"], "
                           "workload: {dropout: 0.0}}\n")
    spec = load_sweep(path)
    (variant,) = spec.variants
    assert variant.workload.dropout == 0.0 and variant.workload.lr == 0.0003
    assert variant.workload.epochs == 4 and variant.workload.variant == "dropout0"
    for body, match in [
        ("{name: x, modes: [fp32], workload: {dropuot: 0.0}}",
         r"v\.yaml: field 'variants\[0\]\.workload\.dropuot': unknown workload field"),
        ("{name: x, modes: [fp32], workload: {dropout: 1.5}}",
         r"variants\[0\]\.workload.*dropout must be in \[0, 1\)"),
        ("{name: x, modes: [\"directq:2/4\"], workload: {}}", "names modes the sweep does not"),
        ("{name: x, modes: [\"aqsgd:2/9\"], workload: {}}", r"variants\[0\]\.modes\[0\]"),
        ("{name: \"Bad Name\", modes: [fp32], workload: {}}", "Workload.variant must be"),
        ("{name: x, modes: [fp32], workload: {dropout_masks: mask}}",
         "dropout_masks.: expected one of random\\|per_sample, got .mask."),
    ]:
        path.write_text(head + f"variants:\n  - {body}\n")
        with pytest.raises(ValueError, match=match):
            load_sweep(path)


def test_epochs_set_the_run_length_and_evaluations():
    w = Workload(epochs=10, warmup_epochs=1, train_samples=768, eval_each_epoch=True)
    assert (w.steps_per_epoch, w.warmup_steps, w.total_steps) == (12, 12, 120)
    assert w.evaluations == 11  # before the first step and after each of 10 epochs
    dp2 = Workload(epochs=10, train_samples=768, replicas=2)
    assert (dp2.steps_per_epoch, dp2.total_steps, dp2.evaluations) == (6, 60, 1)
    assert Workload().total_steps == 2 + 10  # bench cells: warm-up epoch, then `steps`
    with pytest.raises(ValueError, match="epochs must exceed warmup_epochs=1"):
        Workload(epochs=1)


@pytest.mark.parametrize("replicas, eval_samples, batches, windows", [
    (1, 128, 8, 128), (2, 128, 4, 128), (2, 100, 4, 128), (1, 0, 0, 0)])
def test_eval_windows_are_whole_micro_batches_of_every_replica(replicas, eval_samples,
                                                                 batches, windows):
    w = Workload(replicas=replicas, eval_samples=eval_samples)
    assert (w.eval_batches, w.eval_windows) == (batches, windows)
    assert w.eval_windows >= eval_samples


def test_timing_estimates_a_cell_from_measured_rates():
    t = Timing(start_s=5.0, step_s_per_rank=0.1, eval_s_per_window=0.01)
    cell = CellSpec("loopback", parse_mode("aqsgd:2/4"),
                    Workload(epochs=2, train_samples=128, eval_samples=128,
                             eval_each_epoch=True))
    # 4 steps x 2 ranks x 0.1 s + 3 evaluations x 128 windows x 0.01 s
    assert t.cell_s(cell) == pytest.approx(5.0 + 0.8 + 3.84)
    spec = SweepSpec("t", ("loopback",), (cell.mode,), cell.workload, timing=t)
    assert spec.estimate_s(spec.cells()) == pytest.approx(t.cell_s(cell))
    assert SweepSpec("t", ("loopback",), (cell.mode,)).estimate_s([cell]) is None
    with pytest.raises(ValueError, match="Timing.start_s must be a number of seconds"):
        Timing(start_s=-1.0, step_s_per_rank=0.1)


def test_shipped_convergence_sweep_covers_the_modes_seeds_and_dropout_knob():
    spec = load_sweep("scenarios/sweeps/convergence.yaml")
    labels = {c.mode.label for c in spec.cells()}
    assert labels >= {"fp32", "directq-fw2-bw4", "directq-fw3-bw6", "directq-fw4-bw8",
                      "aqsgd-fw2-bw4", "aqsgd-fw3-bw6", "aqsgd-fw4-bw8",
                      "aqsgd-lowbits-fw2-bw4", "aqsgd+gc-qadam-fw2-bw4",
                      "aqsgd+gc-ef21-fw2-bw4", "aqsgd+gc-natural-fw2-bw4",
                      "tahquant-fw2-bw4", "tahquant-fw3-bw6", "tahquant-fw4-bw8"}
    assert len(spec.seeds) >= 3 and spec.throughput == "paper"
    cells = spec.cells()
    assert any(c.workload.replicas == 2 and c.mode.name == "fp32" for c in cells)
    w = spec.workload
    assert w.epochs >= 10 and w.warmup_epochs == 1 and w.eval_each_epoch
    assert w.train_samples >= 6 * 128 and w.eval_windows >= 128
    for mode in ("fp32", "directq-fw2-bw4", "aqsgd-fw2-bw4"):
        kinds = {(c.workload.dropout, c.workload.dropout_masks)
                 for c in cells if c.mode.label == mode and c.workload.replicas == 1}
        assert kinds == {(None, "random"), (0.0, "random"), (None, "per_sample")}, mode
    # every mode the convergence sweep runs has throughput cells at every bandwidth
    paper = load_sweep("scenarios/sweeps/paper.yaml")
    assert labels <= {c.mode.label for c in paper.cells()}
    assert spec.timing is not None and paper.timing is not None


def test_estimate_scales_to_this_machine_by_the_cells_finished_here(tmp_path):
    from report_fixtures import fixture_meta

    from bench.harness.estimate import estimate_line, machine_factor
    from bench.results.files import write_json

    t = Timing(start_s=10.0, step_s_per_rank=0.0)
    spec = SweepSpec("t", ("loopback",), (parse_mode("fp32"), parse_mode("aqsgd:2/4")),
                     Workload(), timing=t)
    fp32, aqsgd = spec.cells()
    assert machine_factor(spec, tmp_path) is None
    assert "about 0.3 min (from the rates measured" in estimate_line(spec, [fp32, aqsgd],
                                                                      tmp_path)
    # fp32 finished here in 30 s where the rates say 10 s: the rest is scaled by 3
    write_json(tmp_path / fp32.name / "meta.json",
               {**fixture_meta(spec_key=fp32.key), "wall_s": 30.0})
    write_json(tmp_path / aqsgd.name / "meta.json",
               {**fixture_meta(spec_key="another spec"), "wall_s": 99.0})
    assert machine_factor(spec, tmp_path) == (3.0, 1)
    line = estimate_line(spec, [aqsgd], tmp_path)
    assert "1 of 2 cells to run, about 0.5 min" in line and "x 3.00" in line
