"""Gaps with their intervals across shapes: AQ-SGD against DirectQ and TAH-Quant at equal
bits and against every other compressor (ssn, bottleneck, a plug-in) at about equal bytes a
token, and every mode's gap to fp32 against pipeline depth and model size. Made from
bench.report.quality.quality_table with bench.report.wire's bytes (result files only).

    pairs = pair_table(with_bytes(quality, curves, per_cell))   # AQ-SGD over each rival
    depth = shape_gaps(quality, "stages")   # one row per (mode, stages) with its interval
    size = shape_gaps(quality, "preset")    # the same against the model preset
    headers, rows = shape_rows(depth, "stages")   # markdown: a mode per row, a column per x

A rival's gap is AQ-SGD's final held-out loss minus the rival's, in percent of the
rival's mean, paired on seeds (bench.report.significance.gap_interval); its words are
the two-sided `equivalent`. A rival that is not a quantizer of the same bits is paired
with the AQ-SGD series of the same layout nearest to it in forward bytes a token (by
ratio): ssn:15 (32.1 bytes at width 128) with AQ-SGD 2/4 (32.4), ssn:3 (8.1) too, a
quarter of its bytes. docs/convergence.md, "Verdicts with their significance".
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from aqsgd.model.config import PRESETS
from bench.report.quality import LAYOUT, TOLERANCE_PCT
from bench.report.significance import equivalent, gap_interval
from bench.report.summary import series_text

__all__ = ["RIVALS", "pair_table", "pair_rows", "preset_size", "shape_gaps", "shape_rows",
           "gap_cell"]

# the modes AQ-SGD is compared with at equal bits (TAH-Quant as the suite reads the paper
# and as its authors' code runs it)
RIVALS = ("directq", "tahquant", "tahquant-pub")
# what is compared with nothing: the references themselves
_UNCOMPRESSED = ("fp32", "bf16", "fp16")
_SHAPE_X = {"stages": "stages", "preset": "preset"}


def _bits(row) -> tuple:
    return (row["fw_bits"], row["bw_bits"])


def _pair(aq, rival, matched: str) -> dict:
    iv = gap_interval(aq["finals"], rival["finals"], rival["mean"])
    lower = ("neither shown" if not iv.known or iv.lo <= 0 <= iv.hi
             else aq["series"] if iv.hi < 0 else rival["series"])
    return {"series": aq["series"], "rival": rival["series"], "matched": matched,
            "gap_pct": iv.estimate, "lo": iv.lo, "hi": iv.hi, "n": iv.n,
            "method": iv.method, "verdict": equivalent(iv, TOLERANCE_PCT), "lower": lower}


def _bytes_text(row) -> str:
    return f"{row['fw_bytes_a_token']:.1f}"


def pair_table(quality: pd.DataFrame) -> pd.DataFrame:
    """One row per AQ-SGD series and rival series of the same LAYOUT: a quantizer of
    RIVALS at the same bits (`matched` 'bits'), any other compressed series with the
    AQ-SGD series nearest in forward bytes a token (`matched` '32.1 vs 32.4 bytes');
    `series`, `rival`, `gap_pct` (AQ-SGD minus the rival, percent of the rival's mean),
    `lo`, `hi`, `n`, `method`, `verdict` (equivalent's words) and `lower` (the series
    whose loss is lower at the interval's confidence, or 'neither shown'). `quality`
    carries bench.report.wire's BYTES_COLUMNS."""
    columns = ["series", "rival", "matched", "gap_pct", "lo", "hi", "n", "method", "verdict",
               "lower"]
    if quality.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    aqsgd = quality[quality["mode"] == "aqsgd"]
    rivals = quality[quality["mode"].isin(RIVALS)]
    for _, aq in aqsgd.iterrows():
        for _, rival in rivals.iterrows():
            if _bits(rival) == _bits(aq) and all(rival[k] == aq[k] for k in LAYOUT):
                rows.append(_pair(aq, rival, "bits"))
    others = quality[~quality["mode"].isin(("aqsgd", *RIVALS, *_UNCOMPRESSED))]
    for _, other in others.iterrows():
        mine = aqsgd[(aqsgd[list(LAYOUT)] == other[list(LAYOUT)]).all(axis=1)
                     & (aqsgd["fw_bytes_a_token"] > 0)]
        if mine.empty or not other["fw_bytes_a_token"] > 0:
            continue
        distance = (np.log(mine["fw_bytes_a_token"] / other["fw_bytes_a_token"])).abs()
        aq = mine.loc[distance.idxmin()]
        rows.append(_pair(aq, other, f"{_bytes_text(other)} vs {_bytes_text(aq)} bytes"))
    return pd.DataFrame(rows, columns=columns)


def _pct(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:+.2f}"


def pair_rows(pairs: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """The pair table as (headers, rows) for markdown_table and rich."""
    headers = ["AQ-SGD", "against", "matched on", "gap (%)", "95% interval (%)", "seeds",
               "verdict", "lower loss"]
    rows = [[p["series"], p["rival"], p["matched"], _pct(p["gap_pct"]),
             "-" if math.isnan(p["lo"]) else f"{_pct(p['lo'])}..{_pct(p['hi'])}",
             f"{p['n']} ({'no interval' if p['method'] == 'none' else p['method']})",
             p["verdict"], p["lower"]] for _, p in pairs.iterrows()]
    return headers, rows


def preset_size(name: str) -> int | None:
    """A preset's parameter count (head untied, as the suite trains it); None for a name
    the suite does not know (a result folder from another version)."""
    return PRESETS[name].num_parameters() if name in PRESETS else None


def _mode_keys(rows: pd.DataFrame, x: str) -> list[str]:
    """The series without its variant (a depth or size variant names the shape), and
    whatever else of the shape varies among `rows` ('aqsgd:2/4 [tiny-8]', '... [4 stages]',
    '... [dropout 0]'), so that one mode's line holds one shape but x."""
    spell = {"preset": str, "stages": lambda v: f"{v} stages",
             "dropout": lambda v: f"dropout {v:g}", "dropout_masks": lambda v: f"{v} masks"}
    varying = [k for k in spell if k != x and rows[k].nunique() > 1]
    return [series_text({**row, "variant": ""})
            + "".join(f" [{spell[k](row[k])}]" for k in varying)
            for _, row in rows.iterrows()]


def shape_gaps(quality: pd.DataFrame, x: str) -> pd.DataFrame:
    """Every compressed series with an fp32 reference, as `mode` (its spelling without
    variant), `x` (stages or preset), `gap_pct`, `gap_lo`, `gap_hi`, `gap_n`, `verdict`,
    `params` (of the preset); rows sorted by x (presets by size). Empty when the cells
    hold fewer than two values of x for one mode: nothing to draw against."""
    if x not in _SHAPE_X:
        raise ValueError(f"shape_gaps: x must be one of {', '.join(_SHAPE_X)}, got {x!r}")
    columns = ["mode", x, "gap_pct", "gap_lo", "gap_hi", "gap_n", "verdict", "params"]
    if quality.empty:
        return pd.DataFrame(columns=columns)
    rows = quality[(quality["mode"] != "fp32") & quality["fp32_mean"].notna()]
    out = pd.DataFrame({"mode": _mode_keys(rows, x),
                        x: rows[x].to_numpy(), "gap_pct": rows["gap_pct"].to_numpy(),
                        "gap_lo": rows["gap_lo"].to_numpy(),
                        "gap_hi": rows["gap_hi"].to_numpy(),
                        "gap_n": rows["gap_n"].to_numpy(), "verdict": rows["verdict"].to_numpy(),
                        "params": [preset_size(p) for p in rows["preset"]]},
                       columns=columns)
    if out.empty or out.groupby("mode")[x].nunique().max() < 2:
        return pd.DataFrame(columns=columns)
    order = out["params"].fillna(0) if x == "preset" else out[x]
    return out.assign(_o=order).sort_values(["_o", "mode"], kind="stable").drop(
        columns="_o").reset_index(drop=True)


def gap_cell(row) -> str:
    """'+0.67% [-0.16, +1.49] cannot tell with 3 seeds'."""
    iv = "" if math.isnan(row["gap_lo"]) else f" [{_pct(row['gap_lo'])}, {_pct(row['gap_hi'])}]"
    return f"{_pct(row['gap_pct'])}%{iv} {row['verdict']}"


def shape_rows(gaps: pd.DataFrame, x: str) -> tuple[list[str], list[list[str]]]:
    """A mode per row, one column per value of x (in the order of shape_gaps)."""
    xs = list(dict.fromkeys(gaps[x]))
    names = {v: (f"{v} stages" if x == "stages" else
                 f"{v} ({preset_size(v) / 1e6:.2f} M params)" if preset_size(v) else str(v))
             for v in xs}
    rows = []
    for mode in dict.fromkeys(gaps["mode"]):
        mine = gaps[gaps["mode"] == mode].drop_duplicates(x).set_index(x)
        rows.append([mode, *[gap_cell(mine.loc[v]) if v in mine.index else "-" for v in xs]])
    return ["gap to fp32 (95% interval)", *[names[v] for v in xs]], rows
