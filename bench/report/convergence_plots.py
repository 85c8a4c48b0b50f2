"""Figures of the convergence sweep, from the frames of bench.report.quality and
bench.report.timetoquality (result files only). Each is written as PNG and SVG.

- convergence_loss_epoch: held-out loss against epochs done, one line per series of the
  default variant (mean over seeds, band min..max over seeds);
- convergence_loss_time_<scenario>: the same against training time on that link (each
  series' time axis from its own throughput cell, named in the legend);
- time_to_quality: heatmap of the time to reach fp32's final held-out loss within 1%,
  series x link, coloured by the ratio to fp32's time on that link;
  time_to_quality_vs_bf16: the same coloured by the ratio to bf16's (when the cells have
  a bf16 series: every SPEEDUP_REFERENCES mode);
- convergence_dropout: per mode with variants, its curves under each variant;
- convergence_gap_stages, convergence_gap_size: the gap to fp32 against pipeline depth
  and against model size (bench.report.gaps.shape_gaps), one line per mode, the 95%
  interval over seeds as error bars.
`draw_epoch_curves` and `draw_relative_final` draw on a given axis (the paper figure
uses them too).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.colors import TwoSlopeNorm

from bench.report.plots import mode_colors, mode_order, plt, save
from bench.report.quality import TOLERANCE_PCT, relative_final
from bench.report.timetoquality import format_seconds

__all__ = ["BAND", "draw_epoch_curves", "draw_relative_final", "plot_loss_epoch",
           "plot_loss_time", "plot_time_to_quality", "plot_dropout", "plot_gap_shape"]

BAND = "band: min..max over seeds"


def _series_order(frame: pd.DataFrame) -> list[str]:
    """Series in the order of quality.quality_table (it sorts them) or of appearance."""
    return list(dict.fromkeys(frame["series"]))


def _curves(ax, bands: pd.DataFrame, x: str, order: list[str], colors: dict) -> None:
    for series in order:
        rows = bands[bands["series"] == series].sort_values(x)
        if rows.empty:
            continue
        seeds = int(rows["n_seeds"].min())
        line, = ax.plot(rows[x], rows["mean"], marker="o", markersize=3,
                        color=colors[series], label=f"{series} ({seeds} seeds)")
        ax.fill_between(rows[x], rows["lo"], rows["hi"], color=line.get_color(), alpha=0.15)


def draw_epoch_curves(ax, bands: pd.DataFrame, order: list[str]) -> dict[str, tuple]:
    """Held-out loss against epochs done per series in `order`; returns the colours."""
    colors = mode_colors(order)
    _curves(ax, bands, "epoch_done", order, colors)
    ax.set_xlabel("epochs done (optimizer steps / steps per epoch)")
    ax.set_ylabel("held-out loss (nats/token, uncompressed)")
    ax.grid(True, alpha=0.3)
    return colors


def draw_relative_final(ax, quality: pd.DataFrame, colors: dict[str, tuple],
                        claim_value: float | None) -> None:
    """Final held-out loss over fp32's (same stages, replicas and variant) per series:
    bar = mean over seeds, whisker = min..max over seeds; the claim's value as a line."""
    rel = relative_final(quality)
    names = list(rel["series"])
    err = np.vstack([rel["rel"] - rel["rel_lo"], rel["rel_hi"] - rel["rel"]])
    ax.bar(names, rel["rel"], yerr=err, capsize=3, color=[colors.get(n, "grey") for n in names])
    ax.axhspan(1 - TOLERANCE_PCT / 100, 1 + TOLERANCE_PCT / 100, color="green", alpha=0.1,
               label=f"within {TOLERANCE_PCT:g}% of fp32")
    if claim_value is not None:
        ax.axhline(claim_value, color="black", linestyle="--",
                   label="paper: 2-4 bits, no loss of quality")
    ax.set_ylabel("final held-out loss / fp32's (same layout)")
    ax.tick_params(axis="x", rotation=40)
    for tick in ax.get_xticklabels():
        tick.set_horizontalalignment("right")
    finite = rel["rel"][np.isfinite(rel["rel"])]
    if finite.size:
        ax.set_ylim(min(0.98, finite.min() - 0.01), max(1.02, finite.max() + 0.01))
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)


def plot_loss_epoch(bands: pd.DataFrame, order: list[str], out_dir: Path) -> list[Path]:
    default = bands[bands["variant"] == ""]
    if default.empty:
        return []
    fig, ax = plt.subplots(figsize=(9, 5.5))
    draw_epoch_curves(ax, default, [s for s in order if s in set(default["series"])])
    ax.legend(fontsize=7, ncol=2)
    ax.set_title(f"Held-out loss against epochs ({BAND})")
    return save(fig, out_dir, "convergence_loss_epoch")


def plot_loss_time(timed: pd.DataFrame, order: list[str], scenario: str,
                   out_dir: Path) -> list[Path]:
    if timed.empty:
        return []
    present = [s for s in order if s in set(timed["series"])]
    colors = mode_colors(present)
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for series in present:
        rows = timed[timed["series"] == series].sort_values("time_s")
        line, = ax.plot(rows["time_s"], rows["mean"], marker="o", markersize=3,
                        color=colors[series],
                        label=f"{series}: {rows['steady_step_s'].iloc[0]:.3f} s/step "
                              f"from {rows['source'].iloc[0]}")
        ax.fill_between(rows["time_s"], rows["lo"], rows["hi"], color=line.get_color(),
                        alpha=0.15)
    ax.set_xlabel(f"training time on {scenario} (s; measured step times, warm-up steps "
                  f"at their own)")
    ax.set_ylabel("held-out loss (nats/token, uncompressed)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=6)
    ax.set_title(f"Held-out loss against training time on {scenario} ({BAND})")
    return save(fig, out_dir, f"convergence_loss_time_{scenario}")


def plot_time_to_quality(ttq: pd.DataFrame, order: list[str], out_dir: Path,
                         reference: str = "fp32") -> list[Path]:
    """Heatmap: colour = time over `reference`'s time on the same link and layout (log
    scale, green faster, red slower), text = seconds, or why there is none. The target is
    fp32's final loss whatever the reference; none without a series of the reference."""
    if ttq.empty or not (ttq["status"] == "reached").any() or not (
            ttq["mode"] == reference).any():
        return []
    reached = ttq[ttq["status"] == "reached"]
    series = [s for s in order if s in set(ttq["series"])]
    links = list(dict.fromkeys(ttq["scenario"]))
    grid = ttq.set_index(["series", "scenario"])
    ratio = np.full((len(series), len(links)), np.nan)
    fig, ax = plt.subplots(figsize=(1.6 * len(links) + 3.5, 0.45 * len(series) + 1.8))
    ref = reached[reached["mode"] == reference].set_index(
        ["stages", "replicas", "scenario"])["time_s"]
    for i, s in enumerate(series):
        for j, link in enumerate(links):
            cell = grid.loc[(s, link)]
            key = (cell["stages"], cell["replicas"], link)
            if cell["status"] == "reached":
                ratio[i, j] = cell["time_s"] / ref[key] if key in ref.index else np.nan
                text = format_seconds(cell["time_s"])
            else:
                text = cell["status"]
            ax.text(j, i, text, ha="center", va="center", fontsize=7)
    logs = np.log10(ratio)
    span = max(0.1, float(np.nanmax(np.abs(logs)))) if np.isfinite(logs).any() else 1.0
    image = ax.imshow(np.ma.masked_invalid(logs), cmap="RdYlGn_r", aspect="auto",
                      norm=TwoSlopeNorm(vcenter=0.0, vmin=-span, vmax=span))
    ax.set_facecolor("lightgrey")
    bar = fig.colorbar(image, ax=ax)
    bar.set_label(f"log10(time / {reference}'s time, same link and layout)")
    limited = set(ttq.loc[ttq["host_limited"], "scenario"])
    ax.set_xticks(range(len(links)), [f"{x}\n(host-limited)" if x in limited else x
                                      for x in links])
    ax.set_yticks(range(len(series)), series)
    ax.set_xlabel("link (paper sweep)")
    against = "" if reference == "fp32" else f"colour: against {reference}; "
    ax.set_title(f"Time to reach fp32's final held-out loss within {TOLERANCE_PCT:g}% "
                 f"({against}grey: not reached or no cell)")
    return save(fig, out_dir, "time_to_quality" if reference == "fp32"
                else f"time_to_quality_vs_{reference}")


def plot_dropout(bands: pd.DataFrame, out_dir: Path) -> list[Path]:
    """One panel per mode label with a non-default variant: its curve per variant."""
    variant_labels = mode_order(bands.loc[bands["variant"] != "", "label"])
    if not len(variant_labels):
        return []
    fig, axes = plt.subplots(1, len(variant_labels), figsize=(5 * len(variant_labels), 4.2),
                             squeeze=False, sharey=True, layout="constrained")
    for ax, label in zip(axes[0], variant_labels, strict=True):
        mine = bands[(bands["label"] == label) & (bands["replicas"] == 1)]
        names = list(dict.fromkeys(mine.sort_values("variant")["series"]))
        draw_epoch_curves(ax, mine, names)
        ax.set_title(label)
        ax.legend(fontsize=7)
    fig.suptitle(f"Dropout and the delta: default, without dropout, per-sample masks ({BAND})")
    return save(fig, out_dir, "convergence_dropout")


_SHAPE_STEM = {"stages": "convergence_gap_stages", "preset": "convergence_gap_size"}


def plot_gap_shape(gaps: pd.DataFrame, x: str, out_dir: Path) -> list[Path]:
    """Gap to fp32 (%) against stages or model size (`gaps`: bench.report.gaps.shape_gaps
    with that x), one line per mode, error bars the 95% interval over seeds (none drawn
    where there is no interval), the 1% line dashed. Nothing without two x values."""
    if gaps.empty:
        return []
    xs = list(dict.fromkeys(gaps[x]))
    modes = list(dict.fromkeys(gaps["mode"]))
    colors = mode_colors(modes)
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, mode in enumerate(modes):
        rows = gaps[gaps["mode"] == mode].drop_duplicates(x)
        pos = np.array([xs.index(v) for v in rows[x]], dtype=float)
        pos += 0.06 * (i - (len(modes) - 1) / 2)  # side by side, so the bars do not hide
        mid = rows["gap_pct"].to_numpy(dtype=float)
        err = np.nan_to_num(np.vstack([mid - rows["gap_lo"].to_numpy(dtype=float),
                                       rows["gap_hi"].to_numpy(dtype=float) - mid]))
        seeds = int(rows["gap_n"].min())
        ax.errorbar(pos, mid, yerr=err, marker="o", markersize=4, capsize=3,
                    color=colors[mode], linestyle="-" if ":2/" in mode else "--",
                    label=f"{mode} ({seeds} seeds)")
    ax.axhline(TOLERANCE_PCT, color="black", linestyle=":", linewidth=1,
               label=f"+{TOLERANCE_PCT:g}% (the quality line)")
    ax.axhline(0.0, color="grey", linewidth=0.8)
    if x == "stages":
        ax.set_xticks(range(len(xs)), [
            f"{v}\n({int(v) - 1} compressed boundar{'y' if int(v) == 2 else 'ies'})"
            for v in xs])
        ax.set_xlabel("pipeline stages (the same model split over more stages)")
    else:
        size = dict(zip(gaps["preset"], gaps["params"], strict=False))
        ax.set_xticks(range(len(xs)), [f"{v}\n({size[v] / 1e6:.2f} M params)"
                                       if size.get(v) else str(v) for v in xs])
        ax.set_xlabel("model preset (by parameter count)")
    ax.set_ylabel("final held-out loss over fp32's (%, same shape)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7)
    what = "pipeline depth" if x == "stages" else "model size"
    ax.set_title(f"Gap to fp32 against {what} (mean over seeds, bars: 95% interval)")
    return save(fig, out_dir, _SHAPE_STEM[x])
