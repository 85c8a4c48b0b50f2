"""Sweep specs (bench.harness.sweep): workload and cell validation, bad sweep files, the
cross of bit widths, the shipped sweeps, a scenario given as a file path."""

from __future__ import annotations

import pytest

from bench.harness.modes import parse_mode
from bench.harness.sweep import CellSpec, Workload, load_sweep
from bench.net.scenario import load_scenario

pytestmark = pytest.mark.timeout(60)


def test_workload_and_cell_validation_name_the_field():
    with pytest.raises(ValueError, match=r"Workload.stages must be >= 1, got 0"):
        Workload(stages=0)
    with pytest.raises(ValueError, match=r"Workload.lr must be in \(0, 1\)"):
        Workload(lr=3.0)
    with pytest.raises(ValueError, match="needs Workload.replicas >= 2"):
        CellSpec("100mbps", parse_mode("aqsgd+gc"), Workload(replicas=1))


@pytest.mark.parametrize("body, match", [
    ("name: x\nscenarios: [100mbps]\nmodes: [fp32]\nsteps: 3\n", "unknown key.*steps"),
    ("name: x\nscenarios: [100mbps]\n", "missing field 'modes'"),
    ("name: x\nscenarios: [100mbps]\nmodes: [fp32]\nworkload: {stepz: 3}\n",
     "unknown workload field.*stepz"),
    ("name: x\nscenarios: [100mbps]\nmodes: [aqsgd]\nbits: [[2, 4, 8]]\n",
     r"bits must be a list of \[forward, backward\] pairs"),
    ("name: x\nscenarios: [100mbps]\nmodes: [\"aqsgd:2/9\"]\n", "bw_bits must be in 1..8"),
    ("name: x\nscenarios: [100mbps]\nmodes: [fp32]\nworkload: {steps: 0}\n",
     "Workload.steps must be >= 1, got 0"),
])
def test_bad_sweep_file_names_file_and_field(tmp_path, body, match):
    path = tmp_path / "bad.yaml"
    path.write_text(body)
    with pytest.raises((ValueError, TypeError), match=match) as err:
        load_sweep(path)
    assert "bad.yaml" in str(err.value)


def test_sweep_crosses_bits_bumps_gc_replicas_and_adds_reference(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nscenarios: [1gbps, 100mbps]\nmodes: [fp32, aqsgd, aqsgd+gc]\n"
                    "bits: [[2, 4], [4, 8]]\nreference: loopback\n")
    cells = load_sweep(path).cells()
    names = [c.name for c in cells]
    assert names[:6] == ["1gbps__fp32", "1gbps__aqsgd-fw2-bw4", "1gbps__aqsgd-fw4-bw8",
                         "1gbps__fp32-dp2", "1gbps__aqsgd+gc-qadam-fw2-bw4-dp2",
                         "1gbps__aqsgd+gc-qadam-fw4-bw8-dp2"]
    assert names[-1] == "loopback__fp32" and len(cells) == 13
    assert cells[4].world_size == 4
    path.write_text(path.read_text() + "gc_reference: false\n")
    assert len(load_sweep(path).cells()) == 11


def test_shipped_sweep_files_load():
    for name in ("paper", "regress", "convergence", "convergence-smoke"):
        spec = load_sweep(f"scenarios/sweeps/{name}.yaml")
        assert spec.name == name and spec.cells()


def test_scenario_given_as_a_file_path_names_cells_by_its_stem():
    cell = CellSpec("scenarios/100mbps.yaml", parse_mode("fp32"))
    assert cell.name == "100mbps__fp32" and cell.scenario_name == "100mbps"
    assert load_scenario("scenarios/100mbps.yaml").name == "100mbps"
