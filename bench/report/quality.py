"""Model quality from convergence cells: held-out loss curves, their statistics over
seeds, the gap of each mode to fp32, and the verdicts on the published quality claims.
Made from result files only (docs/results-schema.md).

    curves = eval_curves(load_results(["results/convergence"]))
    bands = seed_bands(curves)          # per series and eval step: mean, sd, min, max
    table = quality_table(curves)       # per series: final loss over seeds, gap to fp32
    verdicts = judge_claims(table, load_claims())

A series is one mode at one bit width, gradient compressor, layout and variant (its
cells differ only by seed); the spread is the sample sd of the final held-out loss,
bands min..max; the gap is to fp32 of the same preset, layout and variant, in percent,
in pooled seed spreads and as a 95% interval over seeds (bench.report.significance) with
its words; verdicts follow `judge_width` and `RULES`. The definitions in full:
docs/convergence.md, "How to read the report" and "Verdicts with their significance".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from bench.report.claims import find_claim
from bench.report.significance import LEVEL, Interval, gap_interval, noninferior
from bench.report.summary import MODE_RANK, UNKNOWN_RANK, series_text

__all__ = ["TOLERANCE_PCT", "NOISE_SPREADS", "EDGE_PCT", "LAYOUT", "RULES", "Verdict",
           "series_name", "eval_curves", "seed_bands", "quality_table", "with_intervals",
           "relative_final", "judge_width", "margin_pct", "at_edge", "interval_text",
           "significance_of", "judge_claims"]

# Within 1% of fp32's final held-out loss is "the same quality" (also the target of
# time-to-quality); a gap within 2 pooled seed spreads cannot be told from seed noise.
TOLERANCE_PCT = 1.0
NOISE_SPREADS = 2.0
# How far the same cells' gap to fp32 moves between runs, in percentage points: the same
# commit's AQ-SGD 2/4 read +1.00% on one CPU model and +1.08% on another (0.08 points);
# on one machine a rerun of the same cells, on the local or the netns launcher, gives the
# same losses to the last digit (docs/convergence.md, "Verdicts at the edge"). A verdict
# whose gap lies within EDGE_PCT of TOLERANCE_PCT could flip on another machine: it is
# reported "at the edge", with its margin.
EDGE_PCT = 0.1
# what makes two cells' final losses comparable: a gap is to fp32 of the same of these
LAYOUT = ("preset", "stages", "replicas", "variant")

_IDENTITY = ("mode", "label", "grad_mode", "fw_bits", "bw_bits", "preset", "stages", "replicas",
             "variant", "dropout", "dropout_masks", "epochs", "steps_per_epoch",
             "warmup_epochs", "eval_windows")


def series_name(row) -> str:
    """'aqsgd:2/4', 'fp32 dp2', 'aqsgd+gc/ef21:2/4 dp2', 'directq:2/4 [dropout0]'
    (bench.report.summary.series_text: the legends' spelling)."""
    return series_text(row)


def eval_curves(metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per cell and eval step: the cell's identity, `series`, `seed`, `cell_dir`,
    `step`, `epoch_done` and `eval_loss`. `metrics` is bench.results.files.load_results."""
    if metrics.empty:
        return pd.DataFrame(columns=[*_IDENTITY, "series", "seed", "cell_dir", "step",
                                     "epoch_done", "eval_loss"])
    # the last stage's records carry the loss (a diverged run's NaN stays NaN)
    last_stage = pd.to_numeric(metrics["stage"]) == pd.to_numeric(metrics["stages"]) - 1
    evals = metrics[(metrics["kind"] == "eval") & last_stage].copy()
    evals["eval_loss"] = pd.to_numeric(evals["eval_loss"], errors="coerce")
    if evals.empty:
        return pd.DataFrame(columns=[*_IDENTITY, "series", "seed", "cell_dir", "step",
                                     "epoch_done", "eval_loss"])
    keys = ["cell_dir", "step"]
    curves = evals.groupby(keys, as_index=False).agg(
        eval_loss=("eval_loss", lambda v: v.mean(skipna=False)), seed=("seed", "first"),
        **{k: (k, "first") for k in _IDENTITY})
    curves["variant"] = curves["variant"].fillna("")
    curves["series"] = curves.apply(series_name, axis=1)
    curves["epoch_done"] = curves["step"] / curves["steps_per_epoch"]
    return curves.sort_values(["series", "seed", "step"]).reset_index(drop=True)


def _first(group: pd.DataFrame) -> dict:
    return {k: group[k].iloc[0] for k in _IDENTITY}


def seed_bands(curves: pd.DataFrame) -> pd.DataFrame:
    """Per series and eval step: `mean`, `sd` (ddof 1), `lo`, `hi` (min, max) over seeds,
    `n_seeds`, with the series identity and `epoch_done`."""
    rows = []
    for (series, step), group in curves.groupby(["series", "step"], sort=True):
        losses = group["eval_loss"].to_numpy(dtype=float)
        rows.append({"series": series, "step": int(step), **_first(group),
                     "epoch_done": float(group["epoch_done"].iloc[0]),
                     "mean": float(losses.mean()),
                     "sd": float(losses.std(ddof=1)) if len(losses) > 1 else math.nan,
                     "lo": float(losses.min()), "hi": float(losses.max()),
                     "n_seeds": len(losses)})
    return pd.DataFrame(rows)


def quality_table(curves: pd.DataFrame) -> pd.DataFrame:
    """Per series: `n_seeds`, `seeds`, `finals` ({seed: final held-out loss}), final
    held-out loss `mean`, `sd`, `lo`, `hi`, `start_mean` (step 0, when evaluated),
    `diverged` (a seed ended non-finite or above its own start), and against fp32 of the
    same preset, stages, replicas and variant: `fp32_mean`, `gap` (mean - fp32_mean),
    `gap_pct`, `gap_spreads` (gap over the pooled spread; NaN with fewer than two seeds on
    either side or zero spread), and the gap's confidence interval (with_intervals)."""
    rows = []
    for (series, _, _), group in curves.groupby(["series", "preset", "stages"], sort=False,
                                                   dropna=False):
        by_seed = group.sort_values("step").groupby("seed")["eval_loss"]
        last = by_seed.agg(lambda v: v.iloc[-1])
        start = group[group["step"] == 0].set_index("seed")["eval_loss"]
        diverged = bool((~np.isfinite(last)).any() or (last > start.reindex(last.index)).any())
        final = last.to_numpy(dtype=float)
        rows.append({"series": series, **_first(group), "n_seeds": len(final),
                     "seeds": sorted(int(s) for s in last.index),
                     "finals": {int(s): float(v) for s, v in last.items()},
                     "mean": float(final.mean()),
                     "sd": float(final.std(ddof=1)) if len(final) > 1 else math.nan,
                     "lo": float(final.min()), "hi": float(final.max()),
                     "start_mean": float(start.mean()) if len(start) else math.nan,
                     "diverged": diverged})
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    fp32 = table[table["mode"] == "fp32"].set_index(list(LAYOUT))
    ref = fp32.reindex(pd.MultiIndex.from_frame(table[list(LAYOUT)]))
    table["fp32_mean"] = ref["mean"].to_numpy(dtype=float)
    table["gap"] = table["mean"] - table["fp32_mean"]
    table["gap_pct"] = 100.0 * table["gap"] / table["fp32_mean"]
    pooled = np.sqrt((table["sd"] ** 2 + ref["sd"].to_numpy(dtype=float) ** 2) / 2)
    table["gap_spreads"] = table["gap"] / pooled.where(pooled > 0)
    return _ordered(with_intervals(table, list(ref["finals"])))


def with_intervals(table: pd.DataFrame, ref_finals: list) -> pd.DataFrame:
    """`table` with each compressed series' gap to its fp32 reference (`ref_finals`, one
    {seed: loss} or NaN per row) as a LEVEL confidence interval in percent of fp32's mean:
    `gap_lo`, `gap_hi`, `gap_n`, `gap_method` (significance.gap_interval) and `verdict`
    (significance.noninferior: 'within 1%', 'beyond 1%', 'cannot tell with N seeds';
    'diverged' when a seed diverged; '' for fp32 and a series without reference)."""
    out = table.copy()
    cols = {k: [] for k in ("gap_lo", "gap_hi", "gap_n", "gap_method", "verdict")}
    for (_, row), ref in zip(out.iterrows(), ref_finals, strict=True):
        if row["mode"] == "fp32" or not isinstance(ref, dict):
            iv, verdict = Interval(math.nan, math.nan, math.nan, 0, "none", math.nan), ""
        else:
            iv = gap_interval(row["finals"], ref, row["fp32_mean"])
            verdict = "diverged" if row["diverged"] else noninferior(iv, TOLERANCE_PCT)
        for key, value in (("gap_lo", iv.lo), ("gap_hi", iv.hi), ("gap_n", iv.n),
                           ("gap_method", iv.method), ("verdict", verdict)):
            cols[key].append(value)
    return out.assign(**cols)


def relative_final(quality: pd.DataFrame) -> pd.DataFrame:
    """Per series with an fp32 reference: final held-out loss over fp32's mean of the same
    stages, replicas and variant: `rel` (mean), `rel_lo`, `rel_hi` (min, max over seeds)."""
    rows = quality[quality["fp32_mean"].notna()]
    return pd.DataFrame({"series": rows["series"], "rel": rows["mean"] / rows["fp32_mean"],
                         "rel_lo": rows["lo"] / rows["fp32_mean"],
                         "rel_hi": rows["hi"] / rows["fp32_mean"]}).reset_index(drop=True)


def _ordered(table: pd.DataFrame) -> pd.DataFrame:
    """Default variant first, then by replicas, mode, bits, gradient compressor."""
    key = table.assign(_m=table["mode"].map(MODE_RANK).fillna(UNKNOWN_RANK),
                       _fw=table["fw_bits"].fillna(0), _v=table["variant"] != "")
    key = key.sort_values(["_v", "variant", "replicas", "_m", "_fw", "grad_mode"],
                          kind="stable")
    return key.drop(columns=["_m", "_fw", "_v"]).reset_index(drop=True)


# ----------------------------------------------------------------------- verdicts
def judge_width(row, claim: str) -> str:
    """One bit width's judgement of a claim, from its gap to fp32:
    - "no_loss" (AQ-SGD keeps fp32's quality): `matched` when the gap is at most
      TOLERANCE_PCT percent of fp32's loss (better than fp32 included); else
      `inconclusive` when it is within NOISE_SPREADS pooled seed spreads (or there is no
      spread to tell); else `not matched` (also when a seed diverged).
    - "worse" (DirectQ loses quality or diverges): `matched` when a seed diverged, or
      the gap exceeds TOLERANCE_PCT percent and NOISE_SPREADS spreads; `not matched` when
      it is at most TOLERANCE_PCT percent; else `inconclusive`.
    `not judged` when there is no fp32 reference."""
    if claim not in ("no_loss", "worse"):
        raise ValueError(f"judge_width: claim must be no_loss or worse, got {claim!r}")
    gap_pct, spreads = row["gap_pct"], row["gap_spreads"]
    if row["diverged"]:  # a diverged seed loses quality, whatever the mean says
        return "matched" if claim == "worse" else "not matched"
    if math.isnan(gap_pct):
        return "not judged"
    beyond_noise = not math.isnan(spreads) and spreads > NOISE_SPREADS
    if claim == "no_loss":
        if gap_pct <= TOLERANCE_PCT:
            return "matched"
        return "not matched" if beyond_noise else "inconclusive"
    if gap_pct > TOLERANCE_PCT and beyond_noise:
        return "matched"
    return "not matched" if gap_pct <= TOLERANCE_PCT else "inconclusive"


def margin_pct(row, claim: str) -> float:
    """The gap's distance to the TOLERANCE_PCT line in percentage points, positive on the
    claim's side: TOLERANCE_PCT - gap_pct for "no_loss" (room left under the line),
    gap_pct - TOLERANCE_PCT for "worse" (how far above it). NaN without a reference."""
    if claim not in ("no_loss", "worse"):
        raise ValueError(f"margin_pct: claim must be no_loss or worse, got {claim!r}")
    gap_pct = float(row["gap_pct"])
    return TOLERANCE_PCT - gap_pct if claim == "no_loss" else gap_pct - TOLERANCE_PCT


def at_edge(row, claim: str) -> bool:
    """True when a width's judgement hangs on the 1% line: its gap is within EDGE_PCT of
    it (what another machine's run of the same cells moves it by) and no seed diverged
    (a divergence decides the judgement whatever the gap)."""
    if row["diverged"]:
        return False
    margin = margin_pct(row, claim)
    return not math.isnan(margin) and abs(margin) <= EDGE_PCT


# claim id -> (mode, forward bit widths judged, per-width rule, how widths combine):
# "all" = the claim speaks of every width (matched only when all are), "any" = of some
# aggressive width (matched when one is). DirectQ's "aggressive" widths are those below
# 4 bits: at 4/8 it should be close to fp32, and judging it there would test nothing.
RULES = {
    "quality_2_4_bits": ("aqsgd", (2, 3, 4), "no_loss", "all"),
    "directq_worse": ("directq", (2, 3), "worse", "any"),
    "tahquant_quality_3_4_bits": ("tahquant", (3, 4), "no_loss", "all"),
}


@dataclass(frozen=True)
class Verdict:
    """A published claim judged on the convergence cells."""

    claim_id: str
    text: str
    verdict: str  # matched | not matched | partly matched | inconclusive | not judged
    rule: str
    evidence: tuple[str, ...]  # one line per bit width: numbers, margin and its judgement
    # a judged width's gap lies within EDGE_PCT of the 1% line: the verdict could read
    # otherwise on another machine
    at_edge: bool = False
    # the claim judged at the intervals' confidence (significance_of): matched | not
    # matched | cannot tell with N seeds | not judged
    significance: str = "not judged"

    def __post_init__(self):
        allowed = ("matched", "not matched", "partly matched", "inconclusive", "not judged")
        if self.verdict not in allowed:
            raise ValueError(f"Verdict.verdict must be one of {allowed}, got {self.verdict!r}")

    @property
    def label(self) -> str:
        """The verdict as tables print it: 'matched', 'not matched (at the edge)'."""
        return f"{self.verdict} (at the edge)" if self.at_edge else self.verdict


def _rule_text(mode: str, widths: tuple[int, ...], claim: str, combine: str) -> str:
    bits = ", ".join(str(b) for b in widths)
    noise = f"{NOISE_SPREADS:g} pooled seed spreads"
    if claim == "no_loss":
        each = (f"a width holds when {mode}'s mean final held-out loss is within "
                f"{TOLERANCE_PCT:g}% of fp32's (inconclusive when above that but within "
                f"{noise})")
    else:
        each = (f"a width holds when {mode}'s mean final held-out loss is more than "
                f"{TOLERANCE_PCT:g}% and more than {noise} above fp32's, or a seed diverged "
                f"(not matched within {TOLERANCE_PCT:g}%)")
    whole = ("every width must hold" if combine == "all" else
             "matched when every width holds, partly matched when some do")
    return f"forward {bits} bits, default variant, one replica; {each}; {whole}"


def _combine(judged: list[str], combine: str) -> str:
    if not judged or all(j == "not judged" for j in judged):
        return "not judged"
    if combine == "all":
        if all(j == "matched" for j in judged):
            return "matched"
        return "not matched" if "not matched" in judged else "inconclusive"
    if all(j == "matched" for j in judged):
        return "matched"
    if "matched" in judged:
        return "partly matched"
    return "not matched" if all(j == "not matched" for j in judged) else "inconclusive"


def _evidence(row, judged: str, claim: str) -> str:
    """'aqsgd 2/4: 4.1234 vs fp32 4.0826 (+1.00%, +3.1 spreads, 3 seeds): matched, 0.00
    points under the 1% line (at the edge: within 0.1 points, what another machine moves
    a gap by)'."""
    spreads = "-" if math.isnan(row["gap_spreads"]) else f"{row['gap_spreads']:+.1f}"
    text = (f"{row['series']}: {row['mean']:.4f} vs fp32 {row['fp32_mean']:.4f} "
            f"({row['gap_pct']:+.2f}%, {spreads} spreads, {row['n_seeds']} seeds"
            f"{', diverged' if row['diverged'] else ''}): {judged}")
    if judged == "not judged" or row["diverged"]:
        return text
    margin = margin_pct(row, claim)
    side = "under" if float(row["gap_pct"]) <= TOLERANCE_PCT else "over"
    text += f", {abs(margin):.2f} points {side} the {TOLERANCE_PCT:g}% line"
    if not math.isnan(row["gap_spreads"]):
        text += (f" and {abs(row['gap_spreads'] - NOISE_SPREADS):.1f} spreads "
                 f"{'beyond' if row['gap_spreads'] > NOISE_SPREADS else 'within'} "
                 f"the {NOISE_SPREADS:g}-spread noise line")
    if at_edge(row, claim):
        text += (f" (at the edge: within {EDGE_PCT:g} points, what another machine's run "
                 f"of the same cells moves a gap by)")
    return text + f"; {interval_text(row)}"


def interval_text(row) -> str:
    """'95% interval +0.33% [+0.10, +0.56] (paired, 3 seeds): within 1%', or 'no 95%
    interval: cannot tell with 1 seed'."""
    iv = Interval(row["gap_pct"], row["gap_lo"], row["gap_hi"], int(row["gap_n"]),
                  row["gap_method"], math.nan)
    if iv.method == "none":  # one seed, or a non-finite loss: nothing to build one from
        return f"no {LEVEL:.0%} interval: {row['verdict']}"
    return f"{LEVEL:.0%} interval {iv.text()} ({iv.method}, {iv.n} seeds): {row['verdict']}"


def significance_of(words: list[str], claim: str, combine: str) -> str:
    """A claim judged at the intervals' confidence from each width's words (the quality
    table's `verdict`, 'not judged' for a width without cells or reference): for
    "no_loss" a width holds when 'within 1%' and fails when 'beyond 1%' or 'diverged';
    for "worse" the other way round; widths combine as in RULES ('all': every width must
    hold, one failing fails the claim; 'any': one holding is enough, all failing fails
    it). Returns 'matched', 'not matched', 'cannot tell with N seeds' (N of the first
    width that cannot tell) or 'not judged'."""
    within = f"within {TOLERANCE_PCT:g}%"
    worse = {f"beyond {TOLERANCE_PCT:g}%", "diverged"}
    holds = [(w == within) if claim == "no_loss" else (w in worse) for w in words]
    fails = [(w in worse) if claim == "no_loss" else (w == within) for w in words]
    if words and (all if combine == "all" else any)(holds):
        return "matched"
    if words and (any if combine == "all" else all)(fails):
        return "not matched"
    return next((w for w in words if w.startswith("cannot tell")), "not judged")


def judge_claims(table: pd.DataFrame, claims: list[dict]) -> list[Verdict]:
    """A Verdict for every claim of RULES present in `claims`, from quality_table."""
    verdicts = []
    for claim_id, (mode, widths, claim, combine) in RULES.items():
        published = find_claim(claims, claim_id)
        if published is None:
            continue
        rows = table[(table["mode"] == mode) & (table["variant"] == "")
                     & (table["replicas"] == 1)
                     & table["fw_bits"].isin(widths)] if not table.empty else table
        rows = rows.sort_values("fw_bits") if not rows.empty else rows
        judged = [judge_width(r, claim) for _, r in rows.iterrows()]
        evidence = tuple(_evidence(r, j, claim) for (_, r), j in zip(rows.iterrows(), judged,
                                                                     strict=True))
        edge = any(j != "not judged" and at_edge(r, claim)
                   for (_, r), j in zip(rows.iterrows(), judged, strict=True))
        missing = sorted(set(widths) - {int(b) for b in rows["fw_bits"]}) if len(rows) \
            else list(widths)
        if missing:  # a width without cells counts as not judged
            evidence += (f"no {mode} cells at forward {', '.join(map(str, missing))} bits",)
            judged += ["not judged"] * len(missing)
        words = [r["verdict"] or "not judged" for _, r in rows.iterrows()]
        significance = significance_of(words + ["not judged"] * len(missing), claim, combine)
        verdicts.append(Verdict(claim_id, published["text"], _combine(judged, combine),
                                _rule_text(mode, widths, claim, combine), evidence,
                                at_edge=edge, significance=significance))
    return verdicts
