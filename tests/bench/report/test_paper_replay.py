"""The paper's throughput figure from replayed cells (bench.report.paper_replay) and its
command (`python -m bench paper-replay`)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from aqsgd.train.replay import ComputeConfig, StageTimes
from bench.__main__ import main
from bench.harness.paper import model_configs
from bench.report.paper_replay import draw_replay_figures, model_curves, replay_rows
from tests.report_fixtures import write_fixture_cell

WAITED = (StageTimes(0.030, 0.050, 0.004), StageTimes(0.030, 0.050, 0.004))


def _replayed_cell(root, mode: str, text: str, fw, bw, rate: float, step_s: float):
    """A finished fixture cell whose run config replays cpu-2core's times (WAITED)."""
    cell = write_fixture_cell(root, mode=mode, fw=fw, bw=bw, rate_mbit=rate,
                              scenario=f"r{rate:g}", step_time_s=step_s)
    meta = json.loads((cell / "meta.json").read_text())
    config = model_configs("tiny", 2, 1, 16, 4, [text])[text]
    config = dataclasses.replace(config, compute=ComputeConfig(
        source="replay:cpu-2core", profile="cpu-2core", precision="fp32", stages=WAITED))
    meta["run_config"] = json.loads(json.dumps(config.to_dict()))
    for link in meta["placement"]["links"]:  # the fixture places on 100mbps: move the links
        link["rate_mbit"] = rate
    (cell / "meta.json").write_text(json.dumps(meta))
    return cell


@pytest.fixture
def replayed(tmp_path):
    root = tmp_path / "results"
    for rate, fp32_s, aq_s in ((1000.0, 0.40, 0.35), (100.0, 1.60, 0.50)):
        _replayed_cell(root, "fp32", "fp32", None, None, rate, fp32_s)
        _replayed_cell(root, "aqsgd", "aqsgd:4/8", 4, 8, rate, aq_s)
    write_fixture_cell(root, mode="fp32", rate_mbit=100.0, scenario="real")  # real compute
    return root


def test_speedups_divide_replayed_by_replayed_of_the_same_rate(replayed):
    table, real = replay_rows(replayed)
    assert real == 1  # the cell of real compute is left out, and counted
    assert set(table["profile"]) == {"cpu-2core"}
    aq = table[table["series"] == "aqsgd:4/8"].set_index("rate_mbit")
    assert aq.loc[100.0, "samples_s_vs_fp32"] == pytest.approx(1.60 / 0.50)
    assert aq.loc[1000.0, "samples_s_vs_fp32"] == pytest.approx(0.40 / 0.35)
    # against fp32 at the fastest link (the paper's 10 Gbit/s reference)
    assert aq.loc[100.0, "samples_s_vs_fp32_fastest"] == pytest.approx(0.40 / 0.50)
    # the model's figure: the cell's own step from the waited times, on its links
    fp32 = table[table["series"] == "fp32"].set_index("rate_mbit")
    assert fp32.loc[1000.0, "model_samples_s"] > fp32.loc[100.0, "model_samples_s"]


def test_the_model_curve_falls_with_the_rate_and_compression_pays_on_slow_links(replayed):
    curves = model_curves(replayed, rates=(10_000.0, 100.0, 10.0))
    fp32 = curves[curves["series"] == "fp32"].set_index("rate_mbit")["samples_s"]
    assert fp32[10_000.0] > fp32[100.0] > fp32[10.0]
    aq = curves[curves["series"] == "aqsgd:4/8"].set_index("rate_mbit")["vs_fp32"]
    assert aq[10.0] > aq[10_000.0] and aq[10.0] > 2.0


def test_the_figure_and_table_name_the_profile_and_the_claims(replayed, tmp_path):
    out = tmp_path / "fig"
    paths = draw_replay_figures(replayed, out)
    assert (out / "paper_replay.png").is_file() and (out / "paper-replay.md") in paths
    text = (out / "paper-replay.md").read_text()
    assert "cpu-2core" in text and "3.20x" in text  # aqsgd:4/8 over fp32 at 100 Mbit/s
    assert "Up to 4.3x" in text and "1 cell(s) of real compute" in text


def test_the_command_draws_from_cells_and_refuses_an_empty_folder(replayed, tmp_path):
    assert main(["paper-replay", "--no-run", "--results", str(replayed)]) == 0
    assert (replayed / "paper" / "paper-replay.md").is_file()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["paper-replay", "--no-run", "--results", str(empty)]) == 2
