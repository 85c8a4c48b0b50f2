"""Bytes a token each way, measured (bench.report.wire): steady state only (the last
epoch's training steps, warm-up and evaluations left out), forward from the stages that
send activations, backward from those that send gradients, a series the mean of its
cells."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from bench.report.wire import bytes_a_token, bytes_text, with_bytes


def _record(cell, stage, epoch, act, grad, kind="train", warmup=False, stages=3):
    return {"cell_dir": cell, "rank": stage, "stage": stage, "stages": stages,
            "kind": kind, "warmup": warmup, "epoch": epoch, "tokens": 1024,
            "bytes_sent_activation": act, "bytes_sent_gradient": grad}


def _metrics():
    rows = []
    for stage in range(3):
        act = 0 if stage == 2 else 1024 * 32 + 152  # a header of 152 bytes a message
        grad = 0 if stage == 0 else 1024 * 64 + 152
        rows += [
            # warm-up (raw fp32) and the first compressed epoch (first visits raw) differ
            _record("a", stage, 0, 4 * act, 4 * grad, warmup=True),
            _record("a", stage, 1, 3 * act, grad),
            _record("a", stage, 2, act, grad), _record("a", stage, 2, act, grad),
            _record("a", stage, 2, 9 * act, 9 * grad, kind="eval"),
        ]
    rows += [_record("b", stage, 1, 0 if stage == 1 else 2048, 0 if stage == 0 else 4096,
                     stages=2) for stage in range(2)]
    return pd.DataFrame(rows)


def test_a_cells_bytes_a_token_are_its_steady_steps_with_headers():
    per_cell = bytes_a_token(_metrics()).set_index("cell_dir")
    assert per_cell.loc["a", "fw_bytes_a_token"] == pytest.approx(32 + 152 / 1024)
    assert per_cell.loc["a", "bw_bytes_a_token"] == pytest.approx(64 + 152 / 1024)
    assert per_cell.loc["b", "fw_bytes_a_token"] == pytest.approx(2.0)
    assert per_cell.loc["b", "bw_bytes_a_token"] == pytest.approx(4.0)


def test_a_series_takes_the_mean_of_its_cells_and_a_table_row_says_it():
    cells = pd.DataFrame({"cell_dir": ["a", "b", "c"], "series": ["x", "x", "y"],
                          "preset": "tiny", "stages": 2, "step": 0})
    per_cell = pd.DataFrame({"cell_dir": ["a", "b", "c"], "fw_bytes_a_token": [32.0, 34.0, 8.0],
                             "bw_bytes_a_token": [64.0, 64.0, math.nan]})
    table = pd.DataFrame({"series": ["y", "x"], "preset": "tiny", "stages": 2})
    out = with_bytes(table, cells, per_cell).set_index("series")
    assert out.loc["x", "fw_bytes_a_token"] == 33.0 and out.loc["y", "fw_bytes_a_token"] == 8.0
    assert bytes_text(out.loc["x"]) == "33.0 / 64.0"
    assert bytes_text(out.loc["y"]) == "8.0 / -"
    # a row of another preset of the same series is not this one's
    other = pd.DataFrame({"series": ["x"], "preset": "w256-2", "stages": 2})
    assert math.isnan(with_bytes(other, cells, per_cell)["fw_bytes_a_token"].iloc[0])
