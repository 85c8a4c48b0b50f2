"""What `python -m bench run` runs on a scenario by default (bench.harness.defaults)."""

from __future__ import annotations

import dataclasses

import pytest

from bench.harness.defaults import bench_workload
from bench.harness.modes import DEFAULT_GRID, parse_mode
from bench.harness.preflight import place_cells
from bench.harness.sweep import SweepSpec, Workload
from bench.net.scenario import load_scenario


def _cells(scenario: str, **given):
    sc = load_scenario(scenario)
    workload = bench_workload(sc, Workload(), **given)
    spec = SweepSpec(name="b", scenarios=(scenario,),
                     modes=tuple(parse_mode(m) for m in DEFAULT_GRID), workload=workload)
    return spec.cells(), sc


def test_a_four_host_scenario_runs_four_stages_and_its_dp_cells_on_the_same_hosts():
    cells, sc = _cells("100mbps")
    shapes = {c.name: (c.workload.stages, c.workload.replicas, c.workload.preset)
              for c in cells}
    assert shapes["100mbps__fp32"] == (4, 1, "tiny-4")
    assert shapes["100mbps__aqsgd-fw2-bw4"] == (4, 1, "tiny-4")
    # aqsgd+gc and its fp32 reference: 2 stages x 2 replicas, the same preset, 4 hosts
    assert shapes["100mbps__aqsgd+gc-qadam-fw2-bw4-dp2"] == (2, 2, "tiny-4")
    assert shapes["100mbps__fp32-dp2"] == (2, 2, "tiny-4")
    placements = place_cells(cells, {"100mbps": sc})
    assert {p.world_size for p in placements.values()} == {4}


def test_heterogeneous_default_crosses_its_slow_link():
    cells, sc = _cells("heterogeneous")
    fp32 = next(c for c in cells if c.name == "heterogeneous__fp32")
    placement = place_cells([fp32], {"heterogeneous": sc})[fp32.name]
    used = {(link.src, link.dst): link.rate_mbit for link in placement.links}
    assert used[(1, 2)] == 100 and used[(2, 1)] == 100  # the inter-site link
    slowest = placement.slowest_link()
    # host 3's 50 Mbit/s uplink carries stage 3's gradients back: slower still
    assert (slowest.src, slowest.dst, slowest.rate_mbit) == (3, 2, 50)


def test_the_command_line_wins_and_an_unsized_depth_is_refused():
    sc = load_scenario("100mbps")
    two = bench_workload(sc, Workload(), stages=2)
    assert (two.stages, two.preset, two.gc_stages) == (2, "tiny", 0)  # 2 x 2 fits 4 hosts
    assert bench_workload(sc, Workload(), stages=4, preset="tiny-8").preset == "tiny-8"
    with pytest.raises(ValueError, match=r"scenario '100mbps' \(layout 3 stages\): no tiny "
                                         r"preset is sized for 3 stages.*--preset"):
        bench_workload(sc, Workload(), stages=3)
    two_replicas = bench_workload(sc, dataclasses.replace(Workload(), replicas=2))
    assert (two_replicas.stages, two_replicas.preset) == (2, "tiny")  # 2 x 2 on 4 hosts
    narrow = dataclasses.replace(Workload(), gc_replicas=4)  # 4 hosts / 4 replicas = 1 stage
    assert bench_workload(sc, narrow).gc_stages == 1


def test_eight_host_scenarios_run_eight_stages():
    w = bench_workload(load_scenario("wan-worldwide"), Workload())
    assert (w.stages, w.preset, w.gc_stages) == (8, "tiny-8", 4)
