"""Paper-style figures with the published claims drawn beside the measurements, and
paper.md, a table of each claim against what the results measured. Made from result
files only (bench.harness.paper runs the sweep first).

    figures = draw_paper_figures(Path("results/paper"), Path("results/paper/paper"),
                                 conv_dir=Path("results/convergence"))
    python -m bench paper --no-run --results results/paper     # the same, from the shell

Figures: paper_throughput, paper_speedup (and paper_speedup_vs_bf16), paper_loss (from
the convergence cells; without them paper.md judges no quality claim). The claims are
data (results/reference/claims.yaml, GPT2-XL on 8 GPUs): the figures compare shapes of
curves, not absolute values. What each figure draws: docs/results-schema.md, "Figures".
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from aqsgd.filecache import atomic_write_text
from bench import REPO_ROOT
from bench.report.claims import CLAIMS_FILE, find_claim, load_claims
from bench.report.convergence import Convergence, analyse
from bench.report.convergence_plots import BAND, draw_epoch_curves, draw_relative_final
from bench.report.markdown import markdown_table
from bench.report.plots import plot_rate_lines, plt, save, series_color, series_labels
from bench.report.repeats import over_repeats
from bench.report.summary import SPEEDUP_REFERENCES, summarize

__all__ = ["relative_throughput", "claims_table", "draw_paper_figures", "write_model_report",
           "rate_axes", "draw_slowdown_claim", "draw_speedup_claims"]


def _shaped_ok(summary: pd.DataFrame) -> pd.DataFrame:
    ok = summary[(summary["status"] == "ok") & summary["rate_mbit"].notna()
                 & summary["shaped"].astype(bool)].copy()
    ok["series"] = series_labels(ok)
    return ok


def relative_throughput(summary: pd.DataFrame) -> pd.DataFrame:
    """Shaped cells with `rel_fp32_fastest`: throughput over fp32's at the
    fastest shaped link of the same replicas (the paper's 10 Gbps reference)."""
    ok = _shaped_ok(summary)
    fp32 = ok[ok["mode"] == "fp32"]
    ref = {}
    for replicas, rows in fp32.groupby("replicas"):
        rate = rows["rate_mbit"].max()  # its repeats there: their median
        ref[replicas] = (float(rows[rows["rate_mbit"] == rate]["throughput_samples_s"].median()),
                         rate)
    ok["rel_fp32_fastest"] = [r["throughput_samples_s"] / ref[r["replicas"]][0]
                              if r["replicas"] in ref else math.nan for _, r in ok.iterrows()]
    ok["fastest_rate_mbit"] = [ref.get(r["replicas"], (0, math.nan))[1]
                               for _, r in ok.iterrows()]
    return ok


def _fig_throughput(summary: pd.DataFrame, claims: list[dict], out: Path) -> list[Path]:
    ok = relative_throughput(summary)
    if ok.empty:
        return []
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    plot_rate_lines(ax, ok, "rel_fp32_fastest")
    draw_slowdown_claim(ax, claims)
    rate_axes(ax, "throughput / fp32 throughput at the fastest link",
               "Throughput against bandwidth (paper-style)")
    return save(fig, out, "paper_throughput")


def draw_slowdown_claim(ax, claims: list[dict]) -> None:
    """The published "AQ-SGD at 500 Mbit/s about 31% slower than fp32 at 10 Gbit/s" as a
    star with its reading's range, on an axis of throughput over fp32's at the fastest
    link."""
    claim = find_claim(claims, "slowdown_500mbps")
    if claim:
        ax.errorbar([claim["rate_mbit"]], [(claim["value_low"] + claim["value_high"]) / 2],
                    yerr=[[(claim["value_high"] - claim["value_low"]) / 2]], fmt="*",
                    color="black", markersize=12, capsize=5,
                    label="paper: AQ-SGD @500 Mbps ~31% slower\nthan fp32 @10 Gbps (GPT2-XL)")


def draw_speedup_claims(ax, claims: list[dict]) -> None:
    """The published "up to" speed-ups over fp32 as horizontal lines."""
    for claim_id, style in (("max_speedup", "--"), ("max_speedup_gc", ":")):
        claim = find_claim(claims, claim_id)
        if claim:
            ax.axhline(claim["value"], color="black", linestyle=style, linewidth=1,
                       label=f"paper: up to {claim['value']}x ({claim['mode']}, GPT2-XL)")


def rate_axes(ax, ylabel: str, title: str) -> None:
    """Log link-rate axis decreasing to the right, as in the paper; y from 0."""
    ax.set_xscale("log")
    ax.invert_xaxis()
    ax.set_xlabel("link rate (Mbit/s configured, log scale, decreasing)")
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title)


def _fig_speedup(summary: pd.DataFrame, claims: list[dict], out: Path,
                 reference: str = "fp32") -> list[Path]:
    """Speed-up over `reference` against bandwidth; the published claims (over fp32)
    drawn on the fp32 figure only."""
    column = f"speedup_vs_{reference}"
    ok = _shaped_ok(summary)
    ok = ok[(ok["mode"] != reference) & ok[column].notna()]
    if ok.empty:
        return []
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    plot_rate_lines(ax, ok, column)
    if reference == "fp32":
        draw_speedup_claims(ax, claims)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    if reference == "fp32":
        rate_axes(ax, "speed-up over fp32 at the same link (x)",
                   "Speed-up over uncompressed training")
        return save(fig, out, "paper_speedup")
    rate_axes(ax, f"speed-up over {reference} at the same link (x)",
               f"Speed-up over {reference} on the wire (the half-precision baseline)")
    return save(fig, out, f"paper_speedup_vs_{reference}")


def _fig_loss(conv: Convergence, claims: list[dict], out: Path) -> list[Path]:
    """Held-out loss against epochs and final loss over fp32's, default variant."""
    if not conv.has_cells:
        return []
    default = conv.quality[conv.quality["variant"] == ""]
    order = list(default["series"])
    fig, (ax_epoch, ax_rel) = plt.subplots(1, 2, figsize=(14, 5), layout="constrained")
    colors = draw_epoch_curves(ax_epoch, conv.bands[conv.bands["variant"] == ""], order)
    ax_epoch.legend(fontsize=7)
    claim = find_claim(claims, "quality_2_4_bits")
    draw_relative_final(ax_rel, default, colors, claim["value"] if claim else None)
    fig.suptitle(f"Model quality over seeds (convergence cells, {BAND})")
    return save(fig, out, "paper_loss")


def _quality_measured(conv: Convergence, claim_id: str) -> str:
    if not conv.has_cells:
        return f"not judged: no convergence cells under {conv.conv_dir} (make convergence)"
    verdict = next((v for v in conv.verdicts if v.claim_id == claim_id), None)
    if verdict is None:
        return "not judged: no rule for this claim"
    return f"{verdict.label}: " + "; ".join(verdict.evidence)


def _band(row, column: str) -> str:
    """' [1.71-2.02 over 3 repeats]' for a repeated row, '' for one measurement."""
    if row["n_repeats"] <= 1:
        return ""
    return f" [{row[column + '_lo']:.2f}-{row[column + '_hi']:.2f} over {row['n_repeats']} repeats]"


# what pairs a cell of one mode with the same cell of another
_PAIRED = ["scenario", "fw_bits", "bw_bits", "stages", "replicas", "launcher_label"]


def _over_mode(ok: pd.DataFrame, mode: str, over: str) -> str:
    """A mode's samples/s over another's at the same bits, scenario and layout (medians
    over repeats; the band pairs one's min with the other's max and the reverse): the
    best pair, and how many pairs there are and how many reach 1x."""
    pairs = ok[ok["mode"] == mode].merge(ok[ok["mode"] == over], on=_PAIRED,
                                         suffixes=("", "_over"))
    if pairs.empty:
        return f"-: no {mode} and {over} cells at the same bits and scenario"
    ratio = pairs["throughput_samples_s"] / pairs["throughput_samples_s_over"]
    best = pairs.loc[ratio.idxmax()]
    band = ""
    if best["n_repeats"] > 1 or best["n_repeats_over"] > 1:
        lo = best["throughput_samples_s_lo"] / best["throughput_samples_s_hi_over"]
        hi = best["throughput_samples_s_hi"] / best["throughput_samples_s_lo_over"]
        band = f" [{lo:.2f}-{hi:.2f} over {best['n_repeats']} repeats]"
    bound = best["compute_bound"] or best["compute_bound_over"]
    return (f"{ratio.max():.2f}x{band} ({best['series']} over {best['series_over']} @ "
            f"{best['scenario']}{', compute-bound here' if bound else ''}); "
            f"{int((ratio >= 1).sum())} of {len(ratio)} pairs at 1x or more, "
            f"median {ratio.median():.2f}x")


def claims_table(summary: pd.DataFrame, claims: list[dict],
                 conv: Convergence) -> tuple[list[str], list[list]]:
    """(headers, rows): each published claim beside the value measured here; speed claims
    from the throughput cells (`summary`), quality claims from the convergence cells."""
    # judged on the median over a cell's repeats, its min..max beside it (the best of
    # several repeats would pick the luckiest run)
    ok = over_repeats(summary)
    ok["series"] = series_labels(ok)
    rel = relative_throughput(summary)
    rows = []
    for claim in claims:
        mode = claim.get("mode")
        mine = ok[ok["mode"] == mode]
        measured = "-"
        if claim["metric"] == "speedup_vs_fp32" and mine["speedup_vs_fp32"].notna().any():
            best = mine.loc[mine["speedup_vs_fp32"].idxmax()]
            band = _band(best, "speedup_vs_fp32")
            measured = (f"{best['speedup_vs_fp32']:.2f}x steady state{band}"
                        f" ({best['series']} @ {best['scenario']}"
                        f"{', compute-bound here' if best['compute_bound'] else ''})")
            if not math.isnan(best["speedup_vs_bf16"]):  # the same cell over bf16
                measured += (f"; {best['speedup_vs_bf16']:.2f}x over bf16 there"
                             f"{_band(best, 'speedup_vs_bf16')}")
            paper = f"up to {claim['value']}x"
        elif claim["metric"] == "speedup_vs_fp32":
            paper = f"up to {claim['value']}x"
        elif claim["metric"] == "throughput_rel_fp32_fastest":
            paper = f"{claim['value_low']:.2f}-{claim['value_high']:.2f}"
            at = rel[(rel["mode"] == mode) & (rel["rate_mbit"] == claim["rate_mbit"])]
            if len(at):
                stats = at.groupby("series", sort=False).agg(
                    median=("rel_fp32_fastest", "median"), lo=("rel_fp32_fastest", "min"),
                    hi=("rel_fp32_fastest", "max"), n=("rel_fp32_fastest", "count"),
                    fastest=("fastest_rate_mbit", "first"))
                measured = ", ".join(
                    f"{r['median']:.2f}"
                    + (f" [{r['lo']:.2f}-{r['hi']:.2f} over {int(r['n'])}]" if r["n"] > 1 else "")
                    + f" ({series}, vs fp32 @ {r['fastest']:.0f} Mbit/s)"
                    for series, r in stats.iterrows())
        elif claim["metric"] == "speedup_vs_mode":
            paper = f"up to {claim['value']}x"
            measured = _over_mode(ok, mode, claim["over"])
        else:  # final_loss_rel_fp32: judged on the convergence cells
            paper = f"{'~' if 'bound' not in claim else '>'}{claim['value']}"
            measured = _quality_measured(conv, claim["id"])
        rows.append([claim["text"], paper, measured])
    return ["published claim (GPT2-XL, GPUs)", "paper", "measured here (tiny, CPU)"], rows


def draw_paper_figures(results: Path, out: Path, *, conv_dir: Path,
                       claims_path: Path = CLAIMS_FILE) -> list[Path]:
    """All paper figures and paper.md: speed from the throughput cells under `results`,
    quality from the convergence cells under `conv_dir`."""
    claims = load_claims(claims_path)
    summary = summarize([results])
    conv = analyse(Path(conv_dir), Path(results), claims)
    figures = _fig_throughput(summary, claims, out)
    for reference in SPEEDUP_REFERENCES:
        figures += _fig_speedup(summary, claims, out, reference)
    figures += _fig_loss(conv, claims, out)
    headers, rows = claims_table(summary, claims, conv)
    quality = (f"Quality claims: the convergence cells under `{conv_dir}` (held-out loss, "
               f"uncompressed, over seeds; rules in docs/convergence.md)." if conv.has_cells
               else f"Quality claims: not judged. There are no convergence cells under "
                    f"`{conv_dir}`; `make convergence` runs them.")
    lines = ["# Published claims beside this run", "",
             f"Results: `{results}`; claims: `{claims_path.relative_to(REPO_ROOT)}`"
             if claims_path.is_relative_to(REPO_ROOT) else f"Claims: `{claims_path}`", "",
             quality, "",
             "The paper measured GPT2-XL on 8 GPU stages; this suite runs a tiny GPT-2 on "
             "CPU processes whose compute-to-communication ratio was chosen to put it in "
             "the same communication-bound regime. Compare shapes, not absolute values.", "",
             markdown_table(headers, rows), ""]
    lines += [f"![{p.stem}]({p.name})" for p in figures if p.suffix == ".png"]
    atomic_write_text(out / "paper.md", "\n".join(lines) + "\n")
    return figures


# --------------------------------------------------------------- the performance model
def _fig_validation(table: pd.DataFrame, out: Path, target: float) -> list[Path]:
    """Predicted against measured step time, one point per cell, the target band."""
    fig, ax = plt.subplots(figsize=(6.5, 6))
    lo = 0.8 * min(table["measured_s"].min(), table["predicted_s"].min())
    hi = 1.25 * max(table["measured_s"].max(), table["predicted_s"].max())
    line = np.geomspace(lo, hi, 50)
    ax.fill_between(line, line * (1 - target), line * (1 + target), color="tab:green",
                    alpha=0.15, label=f"within {target:.0%}")
    ax.plot(line, line, color="grey", linewidth=0.8)
    for layout, rows in table.groupby(["stages", "replicas"]):
        ax.scatter(rows["measured_s"], rows["predicted_s"], s=18,
                   label=f"{layout[0]} stages x {layout[1]} replica(s)")
    if "predicted_profile_s" in table:
        ax.scatter(table["measured_s"], table["predicted_profile_s"], s=10, marker="x",
                   color="grey", alpha=0.6, label="compute from the profile alone")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured step time (s, median of measured steps)")
    ax.set_ylabel("predicted step time (s)")
    ax.set_title("Performance model against the measured cells")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    return save(fig, out, "model_validation")


def _references(proj: pd.DataFrame) -> list[str]:
    """The SPEEDUP_REFERENCES modes the projection has speed-ups over (fp32, bf16)."""
    return [r for r in SPEEDUP_REFERENCES
            if f"speedup_vs_{r}" in proj and proj[f"speedup_vs_{r}"].notna().any()]


def _fig_projection(proj: pd.DataFrame, claims: list[dict], out: Path) -> list[Path]:
    """Throughput and speed-up over fp32 (and bf16) against bandwidth, per projected
    model."""
    models = list(dict.fromkeys(proj["model"]))
    refs = _references(proj)
    fig, axes = plt.subplots(1 + len(refs), len(models),
                             figsize=(6.5 * len(models), 4.5 * (1 + len(refs))),
                             squeeze=False, layout="constrained")
    for col, name in enumerate(models):
        mine = proj[proj["model"] == name]
        for mode, rows in mine.groupby("mode", sort=False):
            rows = rows.sort_values("rate_mbit")
            color = series_color(mode)  # one colour per mode in every panel
            axes[0][col].plot(rows["rate_mbit"], rows["throughput_samples_s"], marker="o",
                              label=mode, color=color)
            for row, ref in enumerate(refs, start=1):
                if rows["family"].iloc[0] != ref:
                    axes[row][col].plot(rows["rate_mbit"], rows[f"speedup_vs_{ref}"],
                                        marker="o", label=mode, color=color)
        draw_speedup_claims(axes[1][col], claims)
        rate_axes(axes[0][col], "samples/s (predicted)", f"{name}: throughput")
        for row, ref in enumerate(refs, start=1):
            rate_axes(axes[row][col], f"speed-up over {ref} at the same link (x)",
                       f"{name}: speed-up over {ref}")
    return save(fig, out, "model_projection")


def _speedup_table(proj: pd.DataFrame, model: str, reference: str = "fp32"
                   ) -> tuple[list[str], list[list]]:
    """Rates x modes: the speed-up over `reference` ("-" where it has none)."""
    mine = proj[(proj["model"] == model) & (proj["family"] != reference)]
    modes = list(dict.fromkeys(mine["mode"]))
    rows = []
    for rate, at in mine.groupby("rate_mbit", sort=False):
        by_mode = at.set_index("mode")[f"speedup_vs_{reference}"]
        rows.append([f"{rate:g}"] + ["-" if math.isnan(by_mode[m]) else f"{by_mode[m]:.2f}x"
                                     for m in modes])
    return ["Mbit/s", *modes], rows


def write_model_report(out: Path, claims_path: Path = CLAIMS_FILE,
                       profile_note: str = "") -> list[Path]:
    """model.md and the model's figures from the files bench.harness.paper wrote under
    `out` (model_validation.csv, model_projection.csv, model_whatif.txt)."""
    from bench.perfmodel.project import judge_claims
    from bench.perfmodel.validate import TARGET, why_it_misses, worst_cell

    claims = load_claims(claims_path)
    lines = ["# The performance model", "", profile_note, ""]
    figures: list[Path] = []
    vpath = out / "model_validation.csv"
    if vpath.is_file():
        table = pd.read_csv(vpath)
        figures += _fig_validation(table, out, TARGET)
        worst = worst_cell(table)
        within = (table["error"].abs() <= TARGET).mean()
        alone = (table["error_profile"].abs() <= TARGET).mean()
        lines += ["## Validation", "",
                  f"{len(table)} cells; predicted within {TARGET:.0%} of the measured step "
                  f"time: {within:.0%} (compute measured in the cell), {alone:.0%} (compute "
                  f"from the profile alone). Worst: `{worst['cell']}`, {worst['error']:+.1%}: "
                  f"{why_it_misses(worst, worst['cores'])}.", ""]
        cols = ["cell", "measured_s", "predicted_s", "error", "predicted_profile_s",
                "error_profile", "compute_vs_layout"]
        lines += [markdown_table(cols, [[r[c] if c == "cell" else (
            f"{r[c]:+.1%}" if c.startswith("error") else f"{r[c]:.3f}") for c in cols]
            for _, r in table.iterrows()]), ""]
    proj = pd.read_csv(out / "model_projection.csv")
    figures += _fig_projection(proj, claims, out)
    lines += ["## Projection", ""]
    for model in dict.fromkeys(proj["model"]):
        for ref in _references(proj):
            headers, rows = _speedup_table(proj, model, ref)
            lines += [f"Speed-up over {ref} at the same link, {model}, 8 stages, micro-batch "
                      f"1, batch 32 (aqsgd+gc: 2 replicas, over {ref} with 2 replicas):", "",
                      markdown_table(headers, rows), ""]
    verdicts = judge_claims(proj[proj["model"] == "gpt2-xl"], claims)
    lines += ["## Published claims against the projection (GPT2-XL)", "",
              markdown_table(["claim", "paper", "model", "where", "reproduced"],
                             [[v["claim"], v["published"], f"{v['model']:.2f}", v["where"],
                               "yes" if v["reproduced"] else "no"] for v in verdicts]), ""]
    whatif = out / "model_whatif.txt"
    if whatif.is_file():
        lines += ["## What-if", "", "```", whatif.read_text().rstrip(), "```", ""]
    lines += [f"![{p.stem}]({p.name})" for p in figures if p.suffix == ".png"]
    atomic_write_text(out / "model.md", "\n".join(lines) + "\n")
    return figures
