"""Figures of a sweep, drawn from its result files only (never live objects).

    python -m bench report results/100mbps       # table, report.md and figures/*.png|svg
    figures = make_figures(["results/100mbps"], "results/100mbps/figures")

Every figure is written as PNG and SVG with units on its axes:
- throughput_vs_bandwidth: samples/s against link rate (log x), one line per mode;
- speedup: throughput over fp32 at the same scenario, grouped by scenario;
  speedup_vs_bf16: the same over bf16 (when the cells have a bf16 reference);
- loss_<scenario>: training loss against step and against wall-clock time;
- bytes_per_step: bytes on the wire per optimizer step, stacked by kind.

Every figure names the launcher and shaping mechanisms its rows come from
(`launchers_line` under its title); where cells of several launchers are drawn, each
series names its own (`series_labels`: 'fp32 [docker (htb+netem)]').

Points measured on a host-limited link (the machine carried less than twice the
configured rate even unshaped; bench.net.probe.rate_verdict) stay at their
configured rate on the x axis, ringed in red and annotated with the rate the
link achieved.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display on CI or servers
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from aqsgd.filecache import atomic_write  # noqa: E402
from bench.report.summary import (  # noqa: E402
    MODE_RANK,
    SPEEDUP_REFERENCES,
    UNKNOWN_RANK,
    host_limited_flags,
    launcher_labels,
    summarize,
)
from bench.results.files import BYTE_KINDS, load_results  # noqa: E402

__all__ = [
    "FORMATS",
    "mode_order",
    "mode_colors",
    "series_labels",
    "launchers_line",
    "plot_rate_lines",
    "mark_host_limited",
    "plot_loss_curves",
    "print_figure_paths",
    "save",
    "plot_throughput_vs_bandwidth",
    "plot_speedup",
    "plot_loss",
    "plot_bytes_per_step",
    "make_figures",
]

FORMATS = ("png", "svg")


def _mode_of(label: str) -> str | None:
    """The registered mode a label or series starts with: 'aqsgd+gc' for
    'aqsgd+gc-qadam-fw2-bw4 x2 dp' and 'aqsgd+gc/ef21 2/4', the longest name that fits
    ('aqsgd-lowbits', not 'aqsgd'); None for a mode no longer registered."""
    fits = [name for name in MODE_RANK if label == name
            or any(label.startswith(name + sep) for sep in ("-", " ", "/"))]
    return max(fits, key=len, default=None)


def mode_order(labels: Iterable[str]) -> list[str]:
    """Mode labels in a stable reading order: by rank (fp32, directq, aqsgd...,
    aqsgd+gc, bf16, fp16), then by label."""
    def key(label: str):
        return (MODE_RANK.get(_mode_of(label), UNKNOWN_RANK), label)
    return sorted(set(labels), key=key)


def mode_colors(labels: list[str]) -> dict[str, tuple]:
    """A distinct colour per label: tab10 up to ten labels, tab20 up to twenty (the
    convergence sweep draws twelve series in one figure)."""
    cmap = plt.get_cmap("tab10" if len(labels) <= 10 else "tab20")
    return {label: cmap(i % cmap.N) for i, label in enumerate(labels)}


def save(fig, out_dir: Path, stem: str) -> list[Path]:
    """Write `fig` as PNG and SVG; returns the paths (written atomically)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in FORMATS:
        path = out_dir / f"{stem}.{fmt}"
        atomic_write(path, lambda tmp, fmt=fmt: fig.savefig(tmp, format=fmt, dpi=120,
                                                            bbox_inches="tight"))
        paths.append(path)
    plt.close(fig)
    return paths


def print_figure_paths(figures: Iterable[Path]) -> None:
    """One `figure: PATH` line per PNG (the SVG twins sit beside them)."""
    for fig in figures:
        if Path(fig).suffix == ".png":
            print(f"figure: {fig}")


def series_labels(frame: pd.DataFrame) -> pd.Series:
    """Mode label per row, with ' xN dp' when the cell has N > 1 data-parallel replicas,
    and ' [LAUNCHER (SHAPING)]' when the rows come from more than one launcher."""
    dp = frame["replicas"].fillna(1).astype(int)
    labels = frame["label"] + np.where(dp > 1, " x" + dp.astype(str) + " dp", "")
    launchers = launcher_labels(frame)
    return labels + " [" + launchers + "]" if launchers.nunique() > 1 else labels


def launchers_line(frame: pd.DataFrame) -> str:
    """'launcher: netns (htb)' or 'launchers: netns (htb), local (none)', for a title."""
    names = sorted(set(launcher_labels(frame)))
    return f"launcher{'s' if len(names) > 1 else ''}: {', '.join(names)}"


def mark_host_limited(ax, rows: pd.DataFrame, y: str) -> None:
    """Ring the points of `rows` measured on host-limited links and say what the link
    achieved (they are plotted at their configured rate)."""
    limited = rows[host_limited_flags(rows) & rows[y].notna()]
    if limited.empty:
        return
    ax.scatter(limited["rate_mbit"], limited[y], s=170, facecolors="none", edgecolors="red",
               linewidths=1.5, zorder=5, label="host-limited link (achieved < configured)")
    for rate, at in limited.groupby("rate_mbit"):
        achieved = at["rate_mbit_achieved"].min()
        ax.annotate(f"host-limited:\n{achieved:.0f} of {rate:g} Mbit/s achieved",
                    xy=(rate, at[y].max()), xytext=(0, 14), textcoords="offset points",
                    ha="center", fontsize=7, color="red")


def plot_rate_lines(ax, rows: pd.DataFrame, y: str) -> None:
    """One line per series of `y` against the configured link rate; host-limited
    points marked. `rows` needs a `series` column (series_labels)."""
    labels = mode_order(rows["series"])
    colors = mode_colors(labels)
    for label in labels:
        mine = rows[rows["series"] == label].sort_values("rate_mbit")
        ax.plot(mine["rate_mbit"], mine[y], marker="o", label=label, color=colors[label])
    mark_host_limited(ax, rows, y)


def plot_throughput_vs_bandwidth(summary: pd.DataFrame, out_dir: Path) -> list[Path]:
    ok = summary[(summary["status"] == "ok") & summary["rate_mbit"].notna()].copy()
    if ok.empty:
        return []
    ok["series"] = series_labels(ok)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    plot_rate_lines(ax, ok, "throughput_samples_s")
    unshaped = summary[(summary["status"] == "ok") & ~summary["shaped"].astype(bool)
                       & (summary["mode"] == "fp32")]
    for value in unshaped["throughput_samples_s"].dropna().unique()[:1]:
        ax.axhline(value, color="grey", linestyle="--", label="fp32, unshaped link")
    ax.set_xscale("log")
    ax.set_xlabel("link rate (Mbit/s configured, log scale)")
    ax.set_ylabel("throughput (samples/s)")
    ax.set_ylim(bottom=0)
    if not ok["shaped"].astype(bool).all():
        ax.set_title(f"WARNING: some links were not shaped (local launcher)\n"
                     f"{launchers_line(ok)}", color="red")
    else:
        ax.set_title(f"Training throughput against bandwidth\n{launchers_line(ok)}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return save(fig, out_dir, "throughput_vs_bandwidth")


def plot_speedup(summary: pd.DataFrame, out_dir: Path, reference: str = "fp32"
                 ) -> list[Path]:
    """Bars of the speed-up over `reference` (one of SPEEDUP_REFERENCES) per scenario and
    mode: figure `speedup` over fp32, `speedup_vs_bf16` over bf16; none without one."""
    column = f"speedup_vs_{reference}"
    ok = summary[(summary["status"] == "ok") & summary[column].notna()].copy()
    if ok.empty:
        return []
    ok["series"] = series_labels(ok)
    scenarios = list(ok.sort_values("rate_mbit", ascending=False,
                                    na_position="first")["scenario"].unique())
    labels = mode_order(ok["series"])
    colors = mode_colors(labels)
    width = 0.8 / len(labels)
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(scenarios) * len(labels) * 0.35 + 3), 4.5))
    x = np.arange(len(scenarios))
    for i, label in enumerate(labels):
        rows = ok[ok["series"] == label].set_index("scenario").reindex(scenarios)
        ax.bar(x + (i - (len(labels) - 1) / 2) * width, rows[column], width,
               label=label, color=colors[label])
    ax.axhline(1.0, color="black", linewidth=0.8)
    limited = set(ok.loc[host_limited_flags(ok), "scenario"])
    ax.set_xticks(x, [f"{s}\n(HOST-LIMITED)" if s in limited else s for s in scenarios])
    for tick in ax.get_xticklabels():
        if "HOST-LIMITED" in tick.get_text():
            tick.set_color("red")
    ax.set_xlabel("scenario")
    ax.set_ylabel(f"speed-up over {reference} (x, same link)")
    ax.set_title(("Throughput relative to uncompressed fp32" if reference == "fp32" else
                  f"Throughput relative to {reference} on the wire (activations and "
                  f"gradients)") + f"\n{launchers_line(ok)}")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return save(fig, out_dir, "speedup" if reference == "fp32" else f"speedup_vs_{reference}")


def plot_loss(metrics: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Per scenario: loss against step (warm-up shaded) and against wall time."""
    train = metrics[(metrics["kind"] == "train") & metrics["loss"].notna()].copy()
    if train.empty:
        return []
    train["series"] = series_labels(train)
    paths = []
    for scenario, rows in train.groupby("scenario", sort=True):
        fig, (ax_step, ax_time) = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained")
        plot_loss_curves(ax_step, ax_time, rows)
        warm = rows[rows["warmup"].astype(bool)]["step"]
        if not warm.empty:
            ax_step.axvspan(warm.min() - 0.5, warm.max() + 0.5, color="grey", alpha=0.15,
                            label="warm-up (uncompressed)")
        ax_step.legend(fontsize=8)
        title = f"Training loss, scenario {scenario} ({launchers_line(rows)})"
        if host_limited_flags(rows).any():
            title += " (HOST-LIMITED link: below its configured rate on this machine)"
        fig.suptitle(title)
        paths += save(fig, out_dir, f"loss_{scenario}")
    return paths


def plot_loss_curves(ax_step, ax_time, rows: pd.DataFrame) -> dict[str, tuple]:
    """Training loss per series (`rows` has a `series` column) against step and against
    wall time, mean over replicas' last-stage ranks; returns the series colours."""
    labels = mode_order(rows["series"])
    colors = mode_colors(labels)
    for label in labels:
        curve = rows[rows["series"] == label].groupby("step").agg(
            loss=("loss", "mean"), wall_s=("wall_s", "max"))
        ax_step.plot(curve.index, curve["loss"], label=label, color=colors[label])
        ax_time.plot(curve["wall_s"], curve["loss"], label=label, color=colors[label])
    ax_step.set_xlabel("optimizer step")
    ax_time.set_xlabel("wall-clock time (s, cumulative step time)")
    for ax in (ax_step, ax_time):
        ax.set_ylabel("training loss (nats/token)")
        ax.grid(True, alpha=0.3)
    return colors


def plot_bytes_per_step(summary: pd.DataFrame, out_dir: Path) -> list[Path]:
    ok = summary[(summary["status"] == "ok") & summary["bytes_per_step"].notna()].copy()
    if ok.empty:
        return []
    ok["series"] = series_labels(ok)
    # bytes do not depend on the link: one bar per mode (first scenario's cell)
    per_mode = ok.groupby("series")[[f"bytes_per_step_{k}" for k in BYTE_KINDS]].first()
    labels = mode_order(per_mode.index)
    per_mode = per_mode.reindex(labels) / 1e6  # bytes -> MB
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(labels) + 2), 4.5))
    bottom = np.zeros(len(labels))
    for kind in BYTE_KINDS:
        values = per_mode[f"bytes_per_step_{kind}"].fillna(0).to_numpy()
        ax.bar(labels, values, bottom=bottom, label=kind)
        bottom += values
    ax.set_xlabel("mode")
    ax.set_ylabel("bytes on the wire per optimizer step (MB, all ranks)")
    ax.set_title(f"Communication volume per step\n{launchers_line(ok)}")
    ax.tick_params(axis="x", rotation=30)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(title="traffic", fontsize=8)
    return save(fig, out_dir, "bytes_per_step")


def make_figures(paths: Iterable[str | Path], out_dir: str | Path) -> list[Path]:
    """Every figure above for the cells under `paths`, into `out_dir`."""
    paths = list(paths)
    out_dir = Path(out_dir)
    summary = summarize(paths)
    metrics = load_results(paths)
    figures: list[Path] = []
    figures += plot_throughput_vs_bandwidth(summary, out_dir)
    for reference in SPEEDUP_REFERENCES:
        figures += plot_speedup(summary, out_dir, reference)
    figures += plot_loss(metrics, out_dir)
    figures += plot_bytes_per_step(summary, out_dir)
    return figures
