"""The claims verdicts of the performance model (bench.perfmodel.project)."""

from __future__ import annotations

import pandas as pd

from bench.perfmodel.project import judge_claims


def test_claims_are_judged_at_the_paper_bits_within_the_tolerance():
    table = pd.DataFrame([
        {"mode": "aqsgd:4/8", "family": "aqsgd", "rate_mbit": 100.0, "speedup_vs_fp32": 4.0,
         "rel_fp32_fastest": 0.2},
        {"mode": "aqsgd:4/8", "family": "aqsgd", "rate_mbit": 500.0, "speedup_vs_fp32": 3.0,
         "rel_fp32_fastest": 0.4},
        {"mode": "aqsgd:2/4", "family": "aqsgd", "rate_mbit": 100.0, "speedup_vs_fp32": 9.0,
         "rel_fp32_fastest": 0.9},
    ])
    claims = [{"id": "max_speedup", "text": "up to 4.3x", "metric": "speedup_vs_fp32",
               "mode": "aqsgd", "value": 4.3},
              {"id": "slowdown", "text": "31% slower", "metric": "throughput_rel_fp32_fastest",
               "mode": "aqsgd", "rate_mbit": 500, "value_low": 0.69, "value_high": 0.763}]
    got = {v["id"]: v for v in judge_claims(table, claims)}
    assert got["max_speedup"]["model"] == 4.0 and got["max_speedup"]["reproduced"]
    assert "100 Mbit/s" in got["max_speedup"]["where"]
    assert got["slowdown"]["model"] == 0.4 and not got["slowdown"]["reproduced"]
