"""Compute precision as a workload setting (bench.harness.workload): declared once (a
sweep key, a `bench run` flag, the config.yaml key), in a cell's name and identity only
when not fp32, so cells recorded before it existed keep their key, and a bf16-compute
cell never reads as the bf16 wire mode."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from bench.harness.cells import run_config
from bench.harness.modes import ModeSpec, parse_mode
from bench.harness.sweep import CellSpec, Workload, load_sweep
from specfile import add_flags

# CellSpec.key of these cells at commit 8648945, before the field existed
RECORDED = {("100mbps", "fp32", 0, ""): "52b7671a5e1e887a",
            ("loopback", "aqsgd:2/4", 3, "dropout0"): "3166bbcc804c8f78"}


@pytest.mark.parametrize(("scenario", "mode", "seed", "variant"), list(RECORDED))
def test_fp32_cells_keep_the_key_they_had_before_precision_existed(scenario, mode, seed,
                                                                   variant):
    workload = dataclasses.replace(Workload(), seed=seed, variant=variant)
    cell = CellSpec(scenario, parse_mode(mode), workload, seed_in_name=bool(seed))
    assert cell.key == RECORDED[scenario, mode, seed, variant]
    assert "compute" not in cell.name


def test_another_precision_is_in_the_name_the_key_and_the_run_config(tmp_path):
    fp32 = CellSpec("100mbps", ModeSpec("fp32"))
    bf16 = CellSpec("100mbps", ModeSpec("fp32"), Workload(precision="bf16"))
    wire = CellSpec("100mbps", ModeSpec("bf16"))  # the bf16 wire mode, fp32 compute
    assert bf16.name == "100mbps__fp32__bf16-compute" and wire.name == "100mbps__bf16"
    assert len({fp32.key, bf16.key, wire.key}) == 3
    both = Workload(precision="fp16", variant="dropout0")
    assert CellSpec("x", ModeSpec("fp32"), both).name == "x__fp32__dropout0+fp16-compute"
    assert run_config(bf16, tmp_path).train.precision == "bf16"
    assert run_config(fp32, tmp_path).train.precision == "fp32"
    with pytest.raises(ValueError, match=r"Workload\.precision must be one of "
                                         r"fp32\|bf16\|fp16, got 'fp8'"):
        Workload(precision="fp8")


def test_precision_is_a_flag_with_its_choices():
    parser = argparse.ArgumentParser()
    add_flags(parser, Workload, ("precision",))
    assert parser.parse_args([]).precision == "fp32"
    assert parser.parse_args(["--precision", "fp16"]).precision == "fp16"
    with pytest.raises(SystemExit):
        parser.parse_args(["--precision", "fp8"])


def test_a_variant_of_precision_alone_needs_no_name(tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text("name: prec\nscenarios: [loopback]\nmodes: [fp32]\nseeds: [1]\n"
                    "variants:\n  - {modes: [fp32], workload: {precision: bf16}}\n"
                    "  - {name: masks, modes: [fp32], workload: {precision: fp16}}\n")
    names = [c.name for c in load_sweep(path).cells()]
    assert names == ["loopback__fp32__s1", "loopback__fp32__bf16-compute__s1",
                     "loopback__fp32__masks+fp16-compute__s1"]


def test_the_precision_sweep_runs_each_precision_at_three_seeds():
    from bench import REPO_ROOT

    cells = load_sweep(REPO_ROOT / "scenarios" / "sweeps" / "precision.yaml").cells()
    assert sorted((c.workload.precision, c.workload.seed) for c in cells) == sorted(
        (p, s) for p in ("fp32", "bf16", "fp16") for s in (1, 2, 3))
    assert {c.mode.name for c in cells} == {"fp32"}  # fp32 on the wire in all three
