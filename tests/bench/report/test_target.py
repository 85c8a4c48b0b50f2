"""Steps to a target held-out loss (bench.report.target): the first evaluation at or below
the target counts, a seed that never reaches it is censored, the cadence rule holds."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from bench.report.target import steps_to_target, target_rows, target_table
from bench.report.wire import with_bytes


def _curves(losses: dict[tuple[str, int], list[tuple[int, float]]]) -> pd.DataFrame:
    rows = []
    for (series, seed), points in losses.items():
        for step, loss in points:
            rows.append({"series": series, "mode": series.split(":")[0], "seed": seed,
                         "cell_dir": f"{series}-s{seed}", "preset": "tiny", "stages": 2,
                         "replicas": 1, "variant": "", "step": step, "eval_loss": loss})
    return pd.DataFrame(rows)


CURVES = _curves({
    ("fp32", 1): [(25, 4.0), (50, 3.1), (75, 2.95), (100, 2.9)],
    ("fp32", 2): [(25, 4.1), (50, 2.99), (75, 2.9), (100, 2.8)],
    ("fp32", 3): [(25, 4.0), (50, 3.2), (75, 3.0), (100, 2.9)],   # exactly at: counts
    ("aqsgd:2/4", 1): [(25, 4.2), (50, 3.3), (75, 3.05), (100, 2.97)],
    ("aqsgd:2/4", 2): [(25, 4.2), (50, 3.3), (75, 3.1), (100, 3.02)],  # never reaches
    ("aqsgd:2/4", 3): [(25, 4.2), (50, 3.3), (75, 2.99), (100, 2.9)],
})


def _with_bytes(cells: pd.DataFrame) -> pd.DataFrame:
    # what each cell sent a token, as bench.report.wire.bytes_a_token measures it
    sent = {"fp32": (512.15, 512.15), "aqsgd:2/4": (32.4, 64.4)}
    per_cell = pd.DataFrame([{"cell_dir": d, "fw_bytes_a_token": sent[s][0],
                              "bw_bytes_a_token": sent[s][1]}
                             for d, s in zip(cells["cell_dir"], cells["series"], strict=True)])
    return with_bytes(target_table(cells), cells, per_cell)


def test_the_first_evaluation_at_or_below_the_target_counts():
    cells = steps_to_target(CURVES, 3.0).set_index("cell_dir")
    assert cells.loc["fp32-s1", "steps"] == 75
    assert cells.loc["fp32-s2", "steps"] == 50
    assert cells.loc["fp32-s3", "steps"] == 75
    assert math.isnan(cells.loc["aqsgd:2/4-s2", "steps"])
    assert cells.loc["aqsgd:2/4-s2", "last_step"] == 100
    assert (cells["cadence"] == 25).all()


def test_a_series_with_a_censored_seed_is_a_lower_bound_with_its_interval():
    table = target_table(steps_to_target(CURVES, 3.0)).set_index("series")
    fp32, aq = table.loc["fp32"], table.loc["aqsgd:2/4"]
    assert fp32["reached"] == 3 and not fp32["censored"]
    assert fp32["mean"] == pytest.approx(200 / 3)
    # t(0.975, 2) = 4.303; sd of (75, 50, 75) = 14.434
    half = 4.302653 * 14.433757 / math.sqrt(3)
    assert fp32["lo"] == pytest.approx(200 / 3 - half, rel=1e-4)
    assert fp32["hi"] == pytest.approx(200 / 3 + half, rel=1e-4)
    assert aq["reached"] == 2 and aq["censored"] and aq["steps"] == {1: 100, 2: None, 3: 75}
    assert aq["ratio_to_fp32"] == pytest.approx(87.5 / (200 / 3))
    headers, rows = target_rows(_with_bytes(steps_to_target(CURVES, 3.0)))
    by_series = {r[0]: dict(zip(headers, r, strict=True)) for r in rows}
    assert by_series["aqsgd:2/4"]["bytes a token fw / bw"] == "32.4 / 64.4"
    assert by_series["fp32"]["bytes a token fw / bw"] == "512.1 / 512.1"
    assert by_series["aqsgd:2/4"]["seeds at target"] == "2/3"
    assert by_series["aqsgd:2/4"]["steps to target (mean [95%])"].startswith(">= 88 [")
    assert by_series["aqsgd:2/4"]["vs fp32"] == ">= 1.31x"
    assert by_series["aqsgd:2/4"]["per seed"] == "s1: 100, s2: -, s3: 75"


def test_a_series_that_never_reaches_the_target_says_so():
    headers, rows = target_rows(_with_bytes(steps_to_target(CURVES, 2.0)))
    column = headers.index("steps to target (mean [95%])")
    assert {r[column] for r in rows} == {"not reached in 100"}
