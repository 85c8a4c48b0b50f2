"""Paper-style figures with the published claims drawn beside the measurements, and
paper.md, a table of each claim against what the results measured. Made from result
files only (bench.harness.paper runs the sweep first).

    figures = draw_paper_figures(Path("results/paper"), Path("results/paper/paper"))
    python -m bench paper --no-run --results results/paper     # the same, from the shell

- paper_throughput: throughput relative to fp32 at the fastest link, against
  bandwidth (decreasing to the right, as in the paper), with the published
  "AQ-SGD at 500 Mbps is about 31% slower than fp32 at 10 Gbps" as a band;
- paper_speedup: speed-up over fp32 at the same bandwidth, with the published
  "up to 4.3x" (aqsgd) and "up to 4.9x" (aqsgd+gc) as lines;
- paper_loss: loss against step and wall time at the slowest link, and final
  loss relative to fp32 per mode, with "2-4 bits without loss of quality".
The claims are data (results/reference/claims.yaml), measured on GPT2-XL over
8 GPUs; the suite's numbers come from a tiny model on CPUs, so the figures
compare shapes of curves, not absolute values.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from aqsgd.filecache import atomic_write_text
from bench import REPO_ROOT
from bench.report.plots import (
    mode_order,
    plot_loss_curves,
    plot_rate_lines,
    plt,
    save,
    series_labels,
)
from bench.report.summary import summarize
from bench.report.tables import markdown_table
from bench.results.files import load_results

__all__ = ["CLAIMS_FILE", "load_claims", "relative_throughput", "claims_table",
           "draw_paper_figures"]

CLAIMS_FILE = REPO_ROOT / "results" / "reference" / "claims.yaml"


def load_claims(path: str | Path = CLAIMS_FILE) -> list[dict]:
    """The `claims` entries of a claims file (each with an `id`); ValueError naming the
    file when it holds none."""
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    claims = data.get("claims") if isinstance(data, dict) else None
    if not isinstance(claims, list) or not all(isinstance(c, dict) and "id" in c
                                               for c in claims):
        raise ValueError(f"{path}: expected a mapping with a list `claims` of entries "
                         f"with an `id`")
    return claims


def _claim(claims: list[dict], claim_id: str) -> dict | None:
    return next((c for c in claims if c["id"] == claim_id), None)


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
        fastest = rows.sort_values("rate_mbit").iloc[-1]
        ref[replicas] = (fastest["throughput_samples_s"], fastest["rate_mbit"])
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
    claim = _claim(claims, "slowdown_500mbps")
    if claim:
        ax.errorbar([claim["rate_mbit"]], [(claim["value_low"] + claim["value_high"]) / 2],
                    yerr=[[(claim["value_high"] - claim["value_low"]) / 2]], fmt="*",
                    color="black", markersize=12, capsize=5,
                    label="paper: AQ-SGD @500 Mbps ~31% slower\nthan fp32 @10 Gbps (GPT2-XL)")
    _rate_axes(ax, "throughput / fp32 throughput at the fastest link",
               "Throughput against bandwidth (paper-style)")
    return save(fig, out, "paper_throughput")


def _rate_axes(ax, ylabel: str, title: str) -> None:
    """Log link-rate axis decreasing to the right, as in the paper; y from 0."""
    ax.set_xscale("log")
    ax.invert_xaxis()
    ax.set_xlabel("link rate (Mbit/s configured, log scale, decreasing)")
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title)


def _fig_speedup(summary: pd.DataFrame, claims: list[dict], out: Path) -> list[Path]:
    ok = _shaped_ok(summary)
    ok = ok[ok["mode"] != "fp32"]
    if ok.empty:
        return []
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    plot_rate_lines(ax, ok, "speedup_vs_fp32")
    for claim_id, style in (("max_speedup", "--"), ("max_speedup_gc", ":")):
        claim = _claim(claims, claim_id)
        if claim:
            ax.axhline(claim["value"], color="black", linestyle=style, linewidth=1,
                       label=f"paper: up to {claim['value']}x ({claim['mode']}, GPT2-XL)")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    _rate_axes(ax, "speed-up over fp32 at the same link (x)",
               "Speed-up over uncompressed training")
    return save(fig, out, "paper_speedup")


def _fig_loss(summary: pd.DataFrame, metrics: pd.DataFrame, claims: list[dict],
              out: Path) -> list[Path]:
    ok = summary[summary["status"] == "ok"]
    if ok.empty or metrics.empty:
        return []
    slowest = ok.sort_values("rate_mbit").iloc[0]["scenario"]
    rows = metrics[(metrics["scenario"] == slowest) & (metrics["kind"] == "train")
                   & metrics["loss"].notna()].copy()
    rows["series"] = series_labels(rows)
    fig, (ax_step, ax_time, ax_rel) = plt.subplots(1, 3, figsize=(15, 4.5),
                                                  layout="constrained")
    colors = plot_loss_curves(ax_step, ax_time, rows)
    here = ok[ok["scenario"] == slowest].copy()
    fp32_loss = here.loc[here["mode"] == "fp32", "final_loss"]
    if len(fp32_loss):
        here["rel"] = here["final_loss"] / fp32_loss.iloc[0]
        here["series"] = series_labels(here)
        order = mode_order(here["series"])
        here = here.set_index("series").reindex(order)
        ax_rel.bar(order, here["rel"], color=[colors.get(s, "grey") for s in order])
        claim = _claim(claims, "quality_2_4_bits")
        if claim:
            ax_rel.axhline(claim["value"], color="black", linestyle="--",
                           label="paper: 2-4 bits, no loss of quality")
        ax_rel.set_ylabel("final loss / fp32 final loss")
        ax_rel.tick_params(axis="x", rotation=30)
        ax_rel.legend(fontsize=8)
        lo = np.nanmin(here["rel"].to_numpy(dtype=float))
        ax_rel.set_ylim(bottom=min(0.9, lo - 0.02))
    ax_step.legend(fontsize=8)
    fig.suptitle(f"Convergence at the slowest link ({slowest})")
    return save(fig, out, "paper_loss")


def claims_table(summary: pd.DataFrame, claims: list[dict]) -> tuple[list[str], list[list]]:
    """(headers, rows): each published claim beside the value measured here."""
    ok = summary[summary["status"] == "ok"]
    rel = relative_throughput(summary)
    rows = []
    for claim in claims:
        mode = claim.get("mode")
        mine = ok[ok["mode"] == mode]
        measured = "-"
        if claim["metric"] == "speedup_vs_fp32" and mine["speedup_vs_fp32"].notna().any():
            best = mine.loc[mine["speedup_vs_fp32"].idxmax()]
            measured = f"{best['speedup_vs_fp32']:.2f}x ({best['label']} @ {best['scenario']})"
            paper = f"up to {claim['value']}x"
        elif claim["metric"] == "speedup_vs_fp32":
            paper = f"up to {claim['value']}x"
        elif claim["metric"] == "throughput_rel_fp32_fastest":
            paper = f"{claim['value_low']:.2f}-{claim['value_high']:.2f}"
            at = rel[(rel["mode"] == mode) & (rel["rate_mbit"] == claim["rate_mbit"])]
            if len(at):
                measured = ", ".join(f"{r['rel_fp32_fastest']:.2f} ({r['label']}, vs fp32 @ "
                                     f"{r['fastest_rate_mbit']:.0f} Mbit/s)"
                                     for _, r in at.iterrows())
        else:  # final_loss_rel_fp32
            paper = f"{'~' if 'bound' not in claim else '>'}{claim['value']}"
            parts = []
            for scenario, rows_s in ok.groupby("scenario"):
                fp32 = rows_s.loc[rows_s["mode"] == "fp32", "final_loss"]
                if fp32.empty:
                    continue
                for _, r in rows_s[rows_s["mode"] == mode].iterrows():
                    parts.append((scenario, r["label"], r["final_loss"] / fp32.iloc[0]))
            if parts:
                slow = min(parts, key=lambda p: ok.loc[ok["scenario"] == p[0],
                                                       "rate_mbit"].fillna(0).max())[0]
                measured = ", ".join(f"{label}: {value:.3f}" for s, label, value in parts
                                     if s == slow) + f" (@ {slow})"
        rows.append([claim["text"], paper, measured])
    return ["published claim (GPT2-XL, GPUs)", "paper", "measured here (tiny, CPU)"], rows


def draw_paper_figures(results: Path, out: Path, claims_path: Path = CLAIMS_FILE) -> list[Path]:
    """All paper figures and paper.md from the cells under `results`."""
    claims = load_claims(claims_path)
    summary = summarize([results])
    metrics = load_results([results])
    figures = (_fig_throughput(summary, claims, out) + _fig_speedup(summary, claims, out)
               + _fig_loss(summary, metrics, claims, out))
    headers, rows = claims_table(summary, claims)
    lines = ["# Published claims beside this run", "",
             f"Results: `{results}`; claims: `{claims_path.relative_to(REPO_ROOT)}`"
             if claims_path.is_relative_to(REPO_ROOT) else f"Claims: `{claims_path}`", "",
             "The paper measured GPT2-XL on 8 GPU stages; this suite runs a tiny GPT-2 on "
             "CPU processes whose compute-to-communication ratio was chosen to put it in "
             "the same communication-bound regime. Compare shapes, not absolute values.", "",
             markdown_table(headers, rows), ""]
    lines += [f"![{p.stem}]({p.name})" for p in figures if p.suffix == ".png"]
    atomic_write_text(out / "paper.md", "\n".join(lines) + "\n")
    return figures
