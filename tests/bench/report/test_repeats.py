"""Repeated cells as one row, on hand-made cells: the median over repeats and its band,
speed-ups paired with the reference of the same repeat, the compute-bound mark; and the
sweep's interleaved order of repeats."""

from __future__ import annotations

import pandas as pd
import pytest
from report_fixtures import write_fixture_cell

from bench.harness.modes import ModeSpec
from bench.harness.sweep import SweepSpec, Workload
from bench.report.repeats import COMPUTE_BOUND_SHARE, link_shares, over_repeats
from bench.report.summary import summarize
from bench.results.files import load_metas

# repeat -> step time (s) of fp32 and of AQ-SGD 2/4; 64 samples a step
STEP_S = {0: (0.40, 0.20), 1: (0.50, 0.20), 2: (0.40, 0.10)}


@pytest.fixture
def sweep_dir(tmp_path):
    for repeat, (fp32_s, aqsgd_s) in STEP_S.items():
        write_fixture_cell(tmp_path, repeat=repeat, step_time_s=fp32_s)
        write_fixture_cell(tmp_path, mode="aqsgd", fw=2, bw=4, repeat=repeat,
                           step_time_s=aqsgd_s)
    return tmp_path


def test_repeats_become_one_row_with_median_and_band(sweep_dir):
    summary = summarize([sweep_dir])
    assert sorted(summary["repeat"]) == [0, 0, 1, 1, 2, 2]
    rows = over_repeats(summary, pd.Series(dtype=float)).set_index("label")
    assert list(rows.index) == ["fp32", "aqsgd-fw2-bw4"]
    fp32, aqsgd = rows.loc["fp32"], rows.loc["aqsgd-fw2-bw4"]
    assert fp32["n_repeats"] == 3
    assert fp32["cells"] == "100mbps__fp32__s0, 100mbps__fp32__s0__r2, 100mbps__fp32__s0__r3"
    assert fp32["throughput_samples_s"] == pytest.approx(64 / 0.4)
    assert (fp32["throughput_samples_s_lo"], fp32["throughput_samples_s_hi"]) == \
        pytest.approx((64 / 0.5, 64 / 0.4))
    # each repeat over the fp32 of its own pass: 2.0, 2.5, 4.0 -> median 2.5
    assert (aqsgd["speedup_vs_fp32_lo"], aqsgd["speedup_vs_fp32"],
            aqsgd["speedup_vs_fp32_hi"]) == pytest.approx((2.0, 2.5, 4.0))


def test_a_cell_whose_link_allows_twice_its_throughput_is_compute_bound(sweep_dir):
    summary = summarize([sweep_dir])
    names = summary.set_index("label")["cell"]
    shares = pd.Series({n: 0.9 for n in names["fp32"]} |
                       {n: COMPUTE_BOUND_SHARE - 0.1 for n in names["aqsgd-fw2-bw4"]})
    rows = over_repeats(summary, shares).set_index("label")
    assert not rows.loc["fp32", "compute_bound"]
    assert rows.loc["aqsgd-fw2-bw4", "compute_bound"]
    assert rows.loc["fp32", "link_share"] == pytest.approx(0.9)
    # the fixtures carry no per-peer bytes: no link bound to share, so compute-bound
    assert link_shares(load_metas([sweep_dir]), summary).empty
    assert over_repeats(summary, link_shares(load_metas([sweep_dir]), summary))[
        "compute_bound"].all()


def test_failed_cells_are_left_out_and_nothing_finished_is_an_empty_frame(tmp_path):
    write_fixture_cell(tmp_path, status="failed")
    rows = over_repeats(summarize([tmp_path]), pd.Series(dtype=float))
    assert rows.empty and "throughput_samples_s_hi" in rows.columns


def test_a_sweeps_repeats_are_interleaved_and_the_first_keeps_its_name():
    spec = SweepSpec(name="r", scenarios=("100mbps", "10gbps"),
                     modes=(ModeSpec("fp32"), ModeSpec("aqsgd", 2, 4)),
                     workload=Workload(), repeats=2, reference_scenario="loopback")
    assert [c.name for c in spec.cells()] == [
        "100mbps__fp32", "100mbps__aqsgd-fw2-bw4",
        "100mbps__fp32__r2", "100mbps__aqsgd-fw2-bw4__r2",
        "10gbps__fp32", "10gbps__aqsgd-fw2-bw4",
        "10gbps__fp32__r2", "10gbps__aqsgd-fw2-bw4__r2",
        "loopback__fp32", "loopback__fp32__r2"]
    keys = {c.key for c in spec.cells()}
    assert len(keys) == 10  # a repeat is its own cell
    with pytest.raises(ValueError, match="SweepSpec.repeats must be"):
        SweepSpec(name="r", scenarios=("100mbps",), modes=(ModeSpec("fp32"),), repeats=0)
