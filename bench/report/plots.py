"""Figures of a sweep, drawn from its result files only (never live objects).

    python -m bench report results/100mbps       # table, report.md and figures/*.png|svg
    figures = make_figures(["results/100mbps"], "results/100mbps/figures")

Every figure is written as PNG and SVG with units on its axes: throughput_vs_bandwidth,
speedup (and speedup_vs_bf16), loss_<scenario>, bytes_per_step. Repeats are drawn as
their median with a min..max band or bar; compute-bound cells hatched or hollow;
host-limited points ringed in red; every figure names its launchers and shaping
(`launchers_line`, `series_labels`). What each figure shows: docs/results-schema.md,
"Figures".
"""

from __future__ import annotations

import colorsys
import re
import zlib
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
    series_text,
    summarize,
)
from bench.results.files import BYTE_KINDS, load_results  # noqa: E402

__all__ = [
    "FORMATS",
    "mode_order",
    "mode_colors",
    "series_color",
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
    """The registered mode a series or label starts with: 'aqsgd+gc' for
    'aqsgd+gc/ef21:2/4 dp2' and 'aqsgd+gc-qadam-fw2-bw4', the longest name that fits
    ('aqsgd-lowbits', not 'aqsgd'); None for a mode no longer registered."""
    fits = [name for name in MODE_RANK if label == name
            or any(label.startswith(name + sep) for sep in (":", "/", " ", "-"))]
    return max(fits, key=len, default=None)


def mode_order(labels: Iterable[str]) -> list[str]:
    """Mode labels in a stable reading order: by rank (fp32, directq, aqsgd...,
    aqsgd+gc, bf16, fp16), then by label."""
    def key(label: str):
        return (MODE_RANK.get(_mode_of(label), UNKNOWN_RANK), label)
    return sorted(set(labels), key=key)


# The one colour mapping of every figure (note "series colours"): a hue per registered
# mode, in rank order, from tab10 without its grey (grey: a mode no longer registered);
# the lighter tab20 partner of that hue for N > 1 replicas; the forward bits darken
# (fewer) or lighten (more) it around 3; a gradient compressor other than qadam, or a
# variant, turns the hue a little (by its name).
_HUES = [i for i in range(10) if i != 7]  # tab10's index 7 is grey
# past tab10's nine hues (more modes registered), Dark2's teal, mustard, magenta, green
_MORE_HUES = [0, 5, 3, 4]
_UNREGISTERED = (0.5, 0.5, 0.5, 1.0)


def _mix(color, toward: float, share: float) -> tuple:
    r, g, b, a = color
    return (*(c + (toward - c) * share for c in (r, g, b)), a)


def _hue(rank: int, replicated: bool) -> tuple:
    """The colour of the mode at this rank: tab10's hues, then _MORE_HUES; lighter with
    replicas (tab20's partner, or mixed toward white)."""
    if rank < len(_HUES):
        return plt.get_cmap("tab20")(2 * _HUES[rank] + int(replicated))
    color = plt.get_cmap("Dark2")(_MORE_HUES[(rank - len(_HUES)) % len(_MORE_HUES)])
    return _mix(color, 1.0, 0.45) if replicated else color


def series_color(series: str) -> tuple:
    """The colour of one series (bench.report.summary.series_text, or a result file's
    label), the same in every figure whatever else it shows."""
    mode = _mode_of(series)
    if mode is None:
        return _UNREGISTERED
    replicas = re.search(r"[ -]dp(\d+)", series)
    color = _hue(list(MODE_RANK).index(mode), bool(replicas and int(replicas[1]) > 1))
    bits = re.search(r":(\d+)/|-fw(\d+)-", series)
    if bits:
        t = float(np.clip((int(bits[1] or bits[2]) - 3) * 0.3, -0.6, 0.6))
        color = _mix(color, 1.0 if t > 0 else 0.0, abs(t))
    # a gradient compressor other than the default, or a variant: the hue turned a little
    grad = re.search(r"\+gc[/-]([a-z0-9]+)", series)
    variant = re.search(r"\[(.+)\]", series)
    turn_by = (grad[1] if grad and grad[1] != "qadam" else "") + (variant[1] if variant else "")
    if turn_by:
        h, sat, v = colorsys.rgb_to_hsv(*color[:3])
        turn = 0.06 * (1 + zlib.crc32(turn_by.encode()) % 3)
        color = (*colorsys.hsv_to_rgb((h + turn) % 1.0, sat, v), color[3])
    return tuple(color)


def mode_colors(labels: Iterable[str]) -> dict[str, tuple]:
    """series_color of each label: the fixed mapping every figure shares."""
    return {label: series_color(label) for label in labels}


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
    """Each row's series in the command line's spelling (bench.report.summary.
    series_text): 'aqsgd:2/4', 'fp32 dp2', 'directq:2/4 [dropout0]'; with
    ' [LAUNCHER (SHAPING)]' after it when the rows come from more than one launcher."""
    keys = ["mode", "fw_bits", "bw_bits", "grad_mode", "replicas", "variant"]
    keys += ["label"] if "label" in frame else []  # the k of a mode with an in-graph half
    ids = frame[keys].astype(object)
    ids = ids.where(ids.notna(), None)  # NaN is no dict key
    names = {tuple(r.values()): series_text(r)  # once per series: `frame` may be metrics
             for r in ids.drop_duplicates().to_dict("records")}
    labels = pd.Series([names[k] for k in ids.itertuples(index=False, name=None)],
                       index=frame.index, dtype=str)
    # a launcher's unshaped reference cell ('netns (none)') is no other launcher
    launchers = launcher_labels(frame)
    return labels + " [" + launchers + "]" if frame["launcher"].nunique() > 1 else labels


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


def over_repeats_of(rows: pd.DataFrame, y: str, by: list[str]) -> pd.DataFrame:
    """Per group of `by`: the median of `y` over its rows (a sweep's repeats of one
    cell), `lo` and `hi` (min, max), `n`, and `compute_bound` (any row's)."""
    values = pd.to_numeric(rows[y], errors="coerce")
    bound = rows["compute_bound"].astype(bool)
    grouped = pd.DataFrame({**{k: rows[k] for k in by}, "v": values, "cb": bound}).groupby(
        by, sort=False, dropna=False)
    return grouped.agg(median=("v", "median"), lo=("v", "min"), hi=("v", "max"),
                       n=("v", "count"), compute_bound=("cb", "any")).reset_index()


def plot_rate_lines(ax, rows: pd.DataFrame, y: str) -> None:
    """One line per series of `y` against the configured link rate, through the median
    over a cell's repeats, its min..max band shaded; points where the cell was
    compute-bound on this machine hollow; host-limited points marked. `rows` needs a
    `series` column (series_labels)."""
    labels = mode_order(rows["series"])
    colors = mode_colors(labels)
    stats = over_repeats_of(rows, y, ["series", "rate_mbit"])
    for label in labels:
        mine = stats[stats["series"] == label].sort_values("rate_mbit")
        color = colors[label]
        ax.plot(mine["rate_mbit"], mine["median"], marker="o", label=label, color=color)
        if (mine["n"] > 1).any():
            ax.fill_between(mine["rate_mbit"], mine["lo"], mine["hi"], color=color,
                            alpha=0.15, lw=0)
        bound = mine[mine["compute_bound"]]
        ax.scatter(bound["rate_mbit"], bound["median"], s=40, facecolors="white",
                   edgecolors=[color], zorder=4)
    if stats["compute_bound"].any():
        ax.scatter([], [], s=40, facecolors="white", edgecolors="black",
                   label="compute-bound here (link allows 2x)")
    if (stats["n"] > 1).any():
        ax.fill_between([], [], [], color="grey", alpha=0.15,
                        label=f"min..max over {int(stats['n'].max())} repeats")
    mark_host_limited(ax, rows, y)


def _unshaped_fp32(summary: pd.DataFrame) -> float | None:
    """fp32's throughput on an unshaped link (the sweep's reference scenario), if run."""
    unshaped = summary[(summary["status"] == "ok") & ~summary["shaped"].astype(bool)
                       & (summary["mode"] == "fp32")]
    values = unshaped["throughput_samples_s"].dropna()
    return float(values.iloc[0]) if len(values) else None


def _throughput_bars(ax, ok: pd.DataFrame) -> None:
    """One link rate: a bar per series (a line over one x would be points stacked on
    one tick of a log axis)."""
    labels = mode_order(ok["series"])
    colors = mode_colors(labels)
    stats = over_repeats_of(ok, "throughput_samples_s", ["series"]).set_index(
        "series").reindex(labels)
    values = stats["median"]
    spread = None if (stats["n"] <= 1).all() else \
        [values - stats["lo"], stats["hi"] - values]  # min..max over repeats
    ax.bar(labels, values, color=[colors[label] for label in labels], yerr=spread,
           capsize=3)
    limited = set(ok.loc[host_limited_flags(ok), "series"])
    for i, label in enumerate(labels):
        if label in limited:
            ax.annotate("host-limited", xy=(i, values[label]), xytext=(0, 3),
                        textcoords="offset points", ha="center", fontsize=7, color="red")
    _slanted_ticks(ax)
    ax.set_xlabel("mode")


def _slanted_ticks(ax) -> None:
    """Tick labels at 30 degrees, each ending under its bar (long names do not overlap)."""
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right", rotation_mode="anchor")


def plot_throughput_vs_bandwidth(summary: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Samples/s against the configured link rate (log x), a line per series; with one
    rate (a one-scenario run), a bar per series at that rate instead."""
    ok = summary[(summary["status"] == "ok") & summary["rate_mbit"].notna()].copy()
    if ok.empty:
        return []
    ok["series"] = series_labels(ok)
    rates = sorted(ok["rate_mbit"].unique())
    fig, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
    if len(rates) == 1:
        _throughput_bars(ax, ok)
        title = f"Training throughput at {rates[0]:g} Mbit/s (one link rate)"
        ax.grid(True, axis="y", alpha=0.3)
    else:
        plot_rate_lines(ax, ok, "throughput_samples_s")
        ax.set_xscale("log")
        ax.set_xlabel("link rate (Mbit/s configured, log scale)")
        title = "Training throughput against bandwidth"
        ax.grid(True, which="both", alpha=0.3)
    reference = _unshaped_fp32(summary)
    if reference is not None:
        ax.axhline(reference, color="grey", linestyle="--", label="fp32, unshaped link")
    ax.set_ylabel("throughput (samples/s)")
    ax.set_ylim(bottom=0)
    if not ok["shaped"].astype(bool).all():
        ax.set_title(f"WARNING: some links were not shaped (local launcher)\n"
                     f"{launchers_line(ok)}", color="red")
    else:
        ax.set_title(f"{title}\n{launchers_line(ok)}")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
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
    stats = over_repeats_of(ok, column, ["series", "scenario"])
    for i, label in enumerate(labels):
        rows = stats[stats["series"] == label].set_index("scenario").reindex(scenarios)
        spread = None if (rows["n"].fillna(0) <= 1).all() else \
            [rows["median"] - rows["lo"], rows["hi"] - rows["median"]]
        bars = ax.bar(x + (i - (len(labels) - 1) / 2) * width, rows["median"], width,
                      label=label, color=colors[label], yerr=spread, capsize=2)
        for bar, bound in zip(bars, rows["compute_bound"], strict=True):
            if bound is True:  # hatched: compute-bound on this machine
                bar.set_hatch("//")
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
        # one legend for both panels, outside them: inside it covers a curve
        fig.legend(*ax_step.get_legend_handles_labels(), loc="outside right upper",
                   fontsize=8)
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
    _slanted_ticks(ax)
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
