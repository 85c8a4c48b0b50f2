"""AQ-SGD against its rivals at equal bits and the gaps against depth and model size, on
hand-made cells whose intervals are worked out by hand; the convergence report prints
the verdict words and draws both figures."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest
from report_fixtures import write_fixture_cell

from bench.report.convergence import analyse, write_convergence_report
from bench.report.convergence_plots import plot_gap_shape
from bench.report.gaps import pair_table, shape_gaps, shape_rows
from bench.report.quality import eval_curves, quality_table
from bench.report.wire import bytes_a_token, with_bytes
from bench.results.files import load_results

pytestmark = pytest.mark.timeout(120)

FP32 = (3.00, 3.02, 2.98)  # seeds 1, 2, 3; every shape
# (mode, fw, bw) -> per-seed difference to fp32 on 2 stages and on 4 stages
DIFFS = {("aqsgd", 2, 4): ((0.01, 0.03, 0.02), (0.003, 0.003, 0.003)),
         ("directq", 2, 4): ((0.10, 0.11, 0.10), (0.20, 0.21, 0.20))}


def _cells(root, *, stages=(2, 4), presets=("tiny",)):
    for preset in presets:
        for depth, at in zip((2, 4), (0, 1), strict=True):
            if depth not in stages:
                continue
            variant = "".join([f"stages{depth}" if depth != 2 else "",
                               "" if preset == "tiny" else preset.replace("-", "")])
            for seed, base in zip((1, 2, 3), FP32, strict=True):
                kw = {"stages": depth, "variant": variant, "preset": preset, "seed": seed,
                      "scenario": "local", "rate_mbit": None, "launcher": "local"}
                write_fixture_cell(root, eval_losses=[4.0, 3.5, base], **kw)
                for (mode, fw, bw), diffs in DIFFS.items():
                    write_fixture_cell(root, mode=mode, fw=fw, bw=bw, **kw,
                                       eval_losses=[4.0, 3.5, base + diffs[at][seed - 1]])
    return root


@pytest.fixture(scope="module")
def depth_dir(tmp_path_factory):
    return _cells(tmp_path_factory.mktemp("depth"))


def _quality(root):
    metrics = load_results([root])
    curves = eval_curves(metrics)
    return with_bytes(quality_table(curves), curves, bytes_a_token(metrics))


def test_gap_intervals_against_fp32_by_hand(depth_dir):
    q = _quality(depth_dir).set_index("series")
    # differences 0.01, 0.03, 0.02 over fp32's 3.00: +0.67% [-0.16, +1.49] (t 4.3027, 2 df)
    aq = q.loc["aqsgd:2/4"]
    assert (aq["gap_pct"], aq["gap_lo"], aq["gap_hi"]) == pytest.approx(
        (0.666667, -0.161379, 1.494713), abs=1e-6)
    assert (aq["gap_n"], aq["gap_method"], aq["verdict"]) == (3, "paired",
                                                              "cannot tell with 3 seeds")
    # the same difference every seed: no spread, an exact +0.10%
    deep = q.loc["aqsgd:2/4 [stages4]"]
    assert (deep["gap_lo"], deep["gap_hi"]) == pytest.approx((0.1, 0.1))
    assert deep["verdict"] == "within 1%"
    # 0.10, 0.11, 0.10: mean 0.103333, half width 4.302653 x 0.0033333 = 0.014342
    dq = q.loc["directq:2/4"]
    assert (dq["gap_lo"], dq["gap_hi"]) == pytest.approx((2.966372, 3.922517), abs=1e-5)
    assert dq["verdict"] == "beyond 1%"
    assert q.loc["fp32", "verdict"] == ""


def test_aqsgd_against_directq_at_equal_bits(depth_dir):
    pairs = pair_table(_quality(depth_dir)).set_index("rival")
    # AQ-SGD minus DirectQ per seed: -0.09, -0.08, -0.08 over DirectQ's mean 3.103333
    two = pairs.loc["directq:2/4"]
    assert two["series"] == "aqsgd:2/4"
    assert (two["gap_pct"], two["lo"], two["hi"]) == pytest.approx(
        (-2.685285, -3.147447, -2.223123), abs=1e-5)
    assert (two["verdict"], two["lower"], two["method"]) == ("beyond 1%", "aqsgd:2/4",
                                                            "paired")
    assert pairs.loc["directq:2/4 [stages4]", "series"] == "aqsgd:2/4 [stages4]"


def test_depth_table_has_a_column_per_stage_count(depth_dir):
    gaps = shape_gaps(_quality(depth_dir), "stages")
    headers, rows = shape_rows(gaps, "stages")
    assert headers == ["gap to fp32 (95% interval)", "2 stages", "4 stages"]
    assert rows[0] == ["aqsgd:2/4", "+0.67% [-0.16, +1.49] cannot tell with 3 seeds",
                       "+0.10% [+0.10, +0.10] within 1%"]
    assert rows[1][0] == "directq:2/4" and rows[1][2].endswith("beyond 1%")
    assert shape_gaps(_quality(depth_dir), "preset").empty  # one preset: no size table


def test_size_table_orders_presets_by_parameters(tmp_path):
    gaps = shape_gaps(_quality(_cells(tmp_path, stages=(2,), presets=("tiny-8", "tiny"))),
                      "preset")
    headers, rows = shape_rows(gaps, "preset")
    assert [h.split(" ")[0] for h in headers[1:]] == ["tiny", "tiny-8"]
    assert headers[1].endswith("M params)")
    assert rows[0][1] == rows[0][2] == "+0.67% [-0.16, +1.49] cannot tell with 3 seeds"
    paths = plot_gap_shape(gaps, "preset", tmp_path / "out")
    assert [p.name for p in paths] == ["convergence_gap_size.png", "convergence_gap_size.svg"]
    svg = paths[1].read_text()
    assert "M params" in svg and "model size" in svg


def test_the_report_prints_the_verdicts_and_draws_the_depth_figure(depth_dir, tmp_path,
                                                                    capsys):
    assert analyse(depth_dir, tmp_path / "none", []).depth["stages"].tolist() == [
        2, 2, 4, 4]
    text = write_convergence_report(depth_dir, tmp_path / "none", tmp_path / "out").read_text()
    assert "## Gap to fp32 against pipeline depth" in text
    assert ("| aqsgd:2/4 | +0.67% [-0.16, +1.49] cannot tell with 3 seeds | "
            "+0.10% [+0.10, +0.10] within 1% |") in text
    assert ("| aqsgd:2/4 | directq:2/4 | bits | -2.69 | -3.15..-2.22 | 3 (paired) | beyond 1% | "
            "aqsgd:2/4 |") in text
    assert "95% interval +3.44% [+2.97, +3.92] (paired, 3 seeds): beyond 1% |" in text
    assert "![convergence_gap_stages](convergence_gap_stages.png)" in text
    svg = (tmp_path / "out" / "convergence_gap_stages.svg").read_text()
    assert "95% interval" in svg and "compressed boundaries" in svg
    assert not (tmp_path / "out" / "convergence_gap_size.png").exists()
    out = capsys.readouterr().out
    assert "cannot tell with 3 seeds" in out and "within 1%" in out


def test_a_sweep_run_in_parts_reads_as_one(depth_dir, tmp_path):
    parts = [tmp_path / "s1", tmp_path / "rest"]
    for cell in depth_dir.iterdir():  # seed 1 in one folder, seeds 2 and 3 in another
        target = parts[0] if "__s1" in cell.name else parts[1]
        shutil.copytree(cell, target / cell.name)
    whole = analyse(depth_dir, tmp_path / "none", [])
    split = analyse(parts[0], tmp_path / "none", [], also=(parts[1],))
    pd.testing.assert_frame_equal(split.depth, whole.depth)
    assert split.quality["n_seeds"].tolist() == whole.quality["n_seeds"].tolist()


def test_other_compressors_pair_with_the_aqsgd_series_nearest_in_bytes(tmp_path):
    # bytes a step of 64 x 64 tokens: AQ-SGD 2/4 32.4 and 4/8 64.4 bytes a token forward;
    # a codec at 32.1 and one at 8.1 (a quarter): both nearest to 2/4 by ratio
    tokens = 64 * 64
    sent = {("aqsgd", 2, 4): 32.4, ("aqsgd", 4, 8): 64.4, ("ssn", None, None): 32.1,
            ("bottleneck", None, None): 8.1}
    finals = {("aqsgd", 2, 4): 0.01, ("aqsgd", 4, 8): 0.0, ("ssn", None, None): 0.20,
              ("bottleneck", None, None): 0.50}
    for seed, base in zip((1, 2, 3), FP32, strict=True):
        kw = {"seed": seed, "scenario": "local", "rate_mbit": None, "launcher": "local"}
        write_fixture_cell(tmp_path, eval_losses=[4.0, base], act_bytes=512 * tokens, **kw)
        for (mode, fw, bw), per_token in sent.items():
            write_fixture_cell(tmp_path, mode=mode, fw=fw, bw=bw, **kw,
                               act_bytes=round(per_token * tokens),
                               eval_losses=[4.0, base + finals[(mode, fw, bw)] + seed / 1e3])
    pairs = pair_table(_quality(tmp_path)).set_index("rival")
    assert set(pairs.index) == {"ssn", "bottleneck"}  # no quantizer at equal bits here
    assert pairs.loc["ssn", "series"] == pairs.loc["bottleneck", "series"] == "aqsgd:2/4"
    assert pairs.loc["ssn", "matched"] == "32.1 vs 32.4 bytes"
    assert pairs.loc["bottleneck", "matched"] == "8.1 vs 32.4 bytes"
    # AQ-SGD 2/4 minus ssn: -0.19 every seed over ssn's mean 3.202: -5.93%, no spread
    assert (pairs.loc["ssn", "gap_pct"], pairs.loc["ssn", "lo"]) == pytest.approx(
        (-0.19 / 3.202 * 100, -0.19 / 3.202 * 100), rel=1e-4)
    assert pairs.loc["ssn", "lower"] == "aqsgd:2/4"
