"""Time to fp32's quality on links that change (bench.report.timetoquality): the steps a
series needs walked through a dynamic cell's phases, warm-up at fp32's step times."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from bench.report.convergence import schedule_rows
from bench.report.timetoquality import ScheduleCell, time_to_quality_under_schedule

SERIES = ["fp32", "aqsgd 2/4", "directq 2/4", "aqsgd 4/8", "aqsgd 3/6"]


def _frames(reached: dict[str, int], warmup: dict[str, int]):
    quality = pd.DataFrame({"series": SERIES, "mode": ["fp32", "aqsgd", "directq", "aqsgd",
                                                       "aqsgd"],
                            "stages": 2, "replicas": 1, "variant": "", "fp32_mean": 3.0})
    bands = pd.DataFrame([{"series": s, "step": step, "mean": 3.0 if step >= reached[s]
                           else 4.0} for s in SERIES for step in (0, 4, 12, 20, 28)])
    facts = pd.DataFrame({"label": SERIES, "samples_per_step": 64.0,
                          "warmup_steps": [warmup[s] for s in SERIES]}, index=SERIES)
    return quality, bands, facts


def _cell(label: str, steps: tuple[float, float], samples: float = 64.0) -> ScheduleCell:
    return ScheduleCell(cell=f"swing__{label}", scenario="swing", label=label, stages=2,
                        replicas=1, samples_per_step=samples, loop=True,
                        phases=((10.0, steps[0]), (10.0, steps[1])))


def test_steps_walk_the_phases_warm_up_at_fp32s_times():
    quality, bands, facts = _frames(
        reached={"fp32": 20, "aqsgd 2/4": 20, "directq 2/4": 20, "aqsgd 4/8": 28,
                 "aqsgd 3/6": 12},
        warmup={"fp32": 0, "aqsgd 2/4": 4, "directq 2/4": 4, "aqsgd 4/8": 4, "aqsgd 3/6": 4})
    cells = [_cell("fp32", (1.0, 2.0)), _cell("aqsgd 2/4", (0.5, 0.5)),
             _cell("aqsgd 4/8", (0.5, math.nan)),  # ended before phase 1
             _cell("aqsgd 3/6", (0.5, math.nan)),
             _cell("directq 2/4", (0.5, 0.5), samples=32.0)]  # another batch: serves none
    out = time_to_quality_under_schedule(quality, bands, facts, cells).set_index("series")
    # fp32: 10 steps in phase 0 (10 s), 5 at 2 s in phase 1, 5 in the next lap's phase 0
    assert out.loc["fp32", "time_s"] == pytest.approx(25.0)
    # aqsgd 2/4: 4 warm-up steps at fp32's 1 s, then 12 steps in the 6 s left of phase 0
    # and 4 more at 0.5 s in phase 1
    assert out.loc["aqsgd 2/4", "time_s"] == pytest.approx(4.0 + 6.0 + 2.0)
    assert out.loc["aqsgd 2/4", "fp32_time_s"] == pytest.approx(25.0)
    assert out.loc["aqsgd 4/8", "status"] == "phase 1 not measured"
    assert math.isnan(out.loc["aqsgd 4/8", "time_s"])
    # 4 warm-up + 8 steps end at 8 s, inside the measured phase: known
    assert out.loc["aqsgd 3/6", "status"] == "reached"
    assert out.loc["aqsgd 3/6", "time_s"] == pytest.approx(8.0)
    assert out.loc["directq 2/4", "status"] == "no dynamic cell"
    headers, rows = schedule_rows(out.reset_index())
    assert headers == ["mode", "reached at step", "swing"]
    assert dict((r[0], r[2]) for r in rows)["aqsgd 2/4"] == "12.0 s (2.08x)"


def test_a_link_that_stays_down_and_a_series_that_never_reaches():
    quality, bands, facts = _frames(
        reached={"fp32": 20, "aqsgd 2/4": 99, "directq 2/4": 20, "aqsgd 4/8": 20,
                 "aqsgd 3/6": 20},
        warmup=dict.fromkeys(SERIES, 0))
    down = ScheduleCell(cell="cut__fp32", scenario="cut", label="fp32", stages=2, replicas=1,
                        samples_per_step=64.0, loop=False,
                        phases=((5.0, 1.0), (10.0, math.inf)))
    out = time_to_quality_under_schedule(quality, bands, facts, [down]).set_index("series")
    assert out.loc["fp32", "status"] == "never"
    assert out.loc["aqsgd 2/4", "status"] == "no dynamic cell"
    aq = _cell("aqsgd 2/4", (0.5, 0.5))
    out = time_to_quality_under_schedule(quality, bands, facts, [aq]).set_index("series")
    assert out.loc["aqsgd 2/4", "status"] == "not reached"
    assert time_to_quality_under_schedule(quality, bands, facts, []).empty
