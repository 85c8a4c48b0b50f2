"""Projection: predicted throughput against bandwidth per mode for a model on the
hardware a profile describes, and the paper's published claims judged on it.

    table = project(configs, profile, base_scenario)    # configs: {mode label: RunConfig}
    verdicts = judge_claims(table, claims)

Every link of the base scenario (placed for the configs' stages and replicas) is set to
each rate of RATES_MBIT in turn, delays unchanged. Speed-up: throughput over fp32's at the
same rate and replicas (`speedup_vs_fp32`), and over bf16's (`speedup_vs_bf16`, NaN
without a bf16 config: every SPEEDUP_REFERENCES mode); `rel_fp32_fastest`: over fp32's
at the fastest rate.
"""

from __future__ import annotations

import re

import pandas as pd

from aqsgd.compress.registry import SPEEDUP_REFERENCES
from aqsgd.train.config import RunConfig
from bench.net.scenario import NetworkScenario
from bench.perfmodel.predict import predict, with_rate
from bench.perfmodel.profile import Profile
from bench.perfmodel.whatif import scenario_for, workload_on

__all__ = ["RATES_MBIT", "CLAIM_TOLERANCE", "family", "project", "judge_claims"]

RATES_MBIT = (10_000.0, 5_000.0, 2_000.0, 1_000.0, 500.0, 300.0, 200.0, 100.0, 50.0)
# A published figure is reproduced when the model's is within this share of it.
CLAIM_TOLERANCE = 0.20


def family(label: str) -> str:
    """'aqsgd' for 'aqsgd:4/8', 'fp32' for 'fp32 dp2', 'bf16' for 'bf16 dp2', 'aqsgd+gc'
    for 'aqsgd+gc/ef21:2/4' (a series in the legends' spelling, bench.report.summary.
    series_text)."""
    return re.sub(r" dp\d+$", "", label.split(":")[0].split("/")[0])


def project(configs: dict[str, RunConfig], profile: Profile, base: NetworkScenario,
            rates_mbit=RATES_MBIT) -> pd.DataFrame:
    rows = []
    for mode, config in configs.items():
        p = config.pipeline
        work = workload_on(config, scenario_for(base, p.stages, p.replicas), profile)
        for rate in rates_mbit:
            pred = predict(with_rate(work, rate), profile)
            rows.append({"mode": mode, "family": family(mode),
                         "replicas": p.replicas, "rate_mbit": rate, "step_s": pred.step_s,
                         "throughput_samples_s": pred.throughput_samples_s,
                         "bytes_per_step": pred.bytes_per_step})
    table = pd.DataFrame(rows)
    key = pd.MultiIndex.from_frame(table[["replicas", "rate_mbit"]])
    for reference in SPEEDUP_REFERENCES:
        tp = table[table["family"] == reference].set_index(
            ["replicas", "rate_mbit"])["throughput_samples_s"]
        table[f"speedup_vs_{reference}"] = (table["throughput_samples_s"].to_numpy()
                                            / tp.reindex(key).to_numpy())
    base_tp = table[table["family"] == "fp32"].set_index(
        ["replicas", "rate_mbit"])["throughput_samples_s"]
    fastest = max(rates_mbit)
    ref = {r: base_tp.loc[(r, fastest)] for r in table["replicas"].unique()
           if (r, fastest) in base_tp.index}
    table["rel_fp32_fastest"] = [row.throughput_samples_s / ref.get(row.replicas, float("nan"))
                                 for row in table.itertuples()]
    return table


def _verdict(value: float, low: float, high: float) -> bool:
    return low * (1 - CLAIM_TOLERANCE) <= value <= high * (1 + CLAIM_TOLERANCE)


def judge_claims(table: pd.DataFrame, claims: list[dict], paper_bits: str = "4/8"
                 ) -> list[dict]:
    """The throughput claims (speed-up "up to", the 500 Mbit/s slowdown) against the
    projection of the modes at the paper's bits (fw 4 / bw 8 for GPT-2): the model's
    figure, where it occurs, and whether it is within CLAIM_TOLERANCE of the published
    one."""
    out = []
    at_bits = table[table["mode"].str.endswith(f":{paper_bits}")]
    for claim in claims:
        rows = at_bits[at_bits["family"] == claim.get("mode")]
        if rows.empty:
            continue
        if claim["metric"] == "speedup_vs_fp32":
            best = rows.loc[rows["speedup_vs_fp32"].idxmax()]
            value, published = float(best["speedup_vs_fp32"]), claim["value"]
            where = f"{best['mode']} at {best['rate_mbit']:g} Mbit/s"
            ok = _verdict(value, published, published)
            text = f"{published:g}x"
        elif claim["metric"] == "throughput_rel_fp32_fastest":
            at = rows[rows["rate_mbit"] == claim["rate_mbit"]]
            if at.empty:
                continue
            best = at.loc[at["rel_fp32_fastest"].idxmax()]
            value = float(best["rel_fp32_fastest"])
            where = f"{best['mode']} at {claim['rate_mbit']:g} Mbit/s"
            ok = _verdict(value, claim["value_low"], claim["value_high"])
            text = f"{claim['value_low']:g}-{claim['value_high']:g}"
        else:
            continue
        out.append({"id": claim["id"], "claim": claim["text"], "published": text,
                    "model": value, "where": where, "reproduced": ok})
    return out
