"""The convergence report: what each compression costs in model quality, over seeds, and
what it buys in time to quality on every link of the paper sweep. Made from result files
only: the convergence cells (held-out loss every epoch), the throughput cells of the
paper sweep (measured step times) and, where they have run, the dynamic sweep's cells (the
step times each phase of a changing link gave) and cells with loss and wall clock of one
shaped run (bench.report.inrun). docs/convergence.md explains how to read it.

    write_convergence_report(Path("results/convergence"), Path("results/paper"),
                             Path("results/convergence/report"),    # -> .../convergence.md
                             dynamic_dir=Path("results/dynamic"),   # links that change
                             inrun_dir=Path("results/convergence-inrun"))  # one run's clock

writes convergence.md and the figures of bench.report.convergence_plots into the output
folder and prints the same tables as rich tables on the terminal (unless quiet).
`analyse` holds every number the report shows; the paper report reuses it for its
quality verdicts and loss figure.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table
from rich.text import Text

from aqsgd.filecache import atomic_write_text
from bench.report.claims import CLAIMS_FILE, load_claims
from bench.report.convergence_plots import (
    BAND,
    plot_dropout,
    plot_gap_shape,
    plot_loss_epoch,
    plot_loss_time,
    plot_time_to_quality,
)
from bench.report.gaps import pair_rows, pair_table, shape_gaps, shape_rows
from bench.report.inrun import beside_joined, inrun_curves, inrun_rows, inrun_time_to_quality
from bench.report.markdown import markdown_table
from bench.report.quality import (
    NOISE_SPREADS,
    TOLERANCE_PCT,
    Verdict,
    eval_curves,
    interval_text,
    judge_claims,
    quality_table,
    seed_bands,
)
from bench.report.summary import SPEEDUP_REFERENCES
from bench.report.timetoquality import (
    format_seconds,
    schedule_cells,
    series_facts,
    step_times,
    time_to_quality,
    time_to_quality_under_schedule,
    timed_bands,
)
from bench.report.wire import bytes_a_token, bytes_text, with_bytes
from bench.results.files import find_cells, load_records, load_results

__all__ = ["DEFAULT_SCENARIO", "Convergence", "analyse", "quality_rows", "time_rows",
           "schedule_rows", "source_rows", "default_shape", "dropout_rows", "verdict_rows",
           "write_convergence_report"]

DEFAULT_SCENARIO = "100mbps"  # the link of the loss-against-time figure


@dataclass(frozen=True)
class Convergence:
    """Every frame the report shows (bench.report.quality, bench.report.timetoquality)."""

    conv_dir: Path
    throughput_dir: Path
    scenario: str
    bands: pd.DataFrame
    quality: pd.DataFrame
    times: pd.DataFrame
    timed: pd.DataFrame
    ttq: pd.DataFrame
    verdicts: tuple[Verdict, ...]
    schedule_ttq: pd.DataFrame  # time to quality on links that change (empty: none ran)
    pairs: pd.DataFrame  # AQ-SGD against the others at equal bits or bytes (gaps.pair_table)
    depth: pd.DataFrame  # gaps.shape_gaps against stages (empty: one depth only)
    size: pd.DataFrame  # gaps.shape_gaps against the model preset (empty: one preset only)
    # time to quality within one run beside the joined estimate (inrun.beside_joined;
    # empty: no such cells)
    inrun: pd.DataFrame
    also: tuple[Path, ...] = ()  # more folders of convergence cells read with conv_dir

    def __post_init__(self):
        if not self.scenario:
            raise ValueError("Convergence.scenario must name a scenario, got ''")

    @property
    def has_cells(self) -> bool:
        return not self.quality.empty

    @property
    def order(self) -> list[str]:
        return list(self.quality["series"]) if self.has_cells else []


def _has_cells(path: Path) -> bool:
    return path.exists() and bool(find_cells([path]))


def analyse(conv_dir: Path, throughput_dir: Path, claims: list[dict],
            scenario: str = DEFAULT_SCENARIO, dynamic_dir: Path | None = None,
            inrun_dir: Path | None = None, also: tuple[Path, ...] = ()) -> Convergence:
    """Read the result folders (any may be missing or empty) and compute; `also`: more
    folders of convergence cells, read with conv_dir (one sweep run in several parts)."""
    found = [d for d in (conv_dir, *also) if _has_cells(d)]
    metrics = load_results(found) if found else pd.DataFrame()
    curves = eval_curves(metrics)
    bands = seed_bands(curves)
    quality = with_bytes(quality_table(curves), curves, bytes_a_token(metrics))
    thr = load_results([throughput_dir]) if _has_cells(throughput_dir) else pd.DataFrame()
    times = step_times(thr) if not thr.empty else pd.DataFrame()
    shapes = (pair_table(quality), shape_gaps(quality, "stages"),
              shape_gaps(quality, "preset"))
    if quality.empty:
        empty = pd.DataFrame()
        return Convergence(conv_dir, throughput_dir, scenario, bands, quality, times, empty,
                           empty, tuple(judge_claims(quality, claims)), empty, *shapes, empty,
                           tuple(also))
    facts = series_facts(metrics, curves)
    # time axes for the default variant: a variant changes the model, not the link
    timed = timed_bands(bands[bands["variant"] == ""], facts, times, scenario)
    ttq = time_to_quality(quality, bands, facts, times)
    dynamic = (schedule_cells(load_records([dynamic_dir]))
               if dynamic_dir is not None and _has_cells(dynamic_dir) else [])
    schedule_ttq = time_to_quality_under_schedule(quality, bands, facts, dynamic)
    inrun = (inrun_time_to_quality(inrun_curves(load_results([inrun_dir])))
             if inrun_dir is not None and _has_cells(inrun_dir) else pd.DataFrame())
    return Convergence(conv_dir, throughput_dir, scenario, bands, quality, times, timed, ttq,
                       tuple(judge_claims(quality, claims)), schedule_ttq, *shapes,
                       beside_joined(inrun, ttq, schedule_ttq) if not inrun.empty else inrun,
                       tuple(also))


# ------------------------------------------------------------------------ tables
def _f(value: float, fmt: str, sign: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, ("+" if sign else "") + fmt)


def quality_rows(quality: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """(d): per series, bytes a token each way (bench.report.wire), final held-out loss
    over seeds and the gap to fp32."""
    headers = ["mode", "bytes a token fw / bw", "seeds", "final held-out loss (mean)",
               "spread (sd)", "min..max", "gap to fp32 (%)", "gap (seed spreads)", "fp32 reference",
               "gap: 95% interval over seeds"]
    rows = []
    for _, q in quality.iterrows():
        ref = ("fp32" + (f" dp{int(q['replicas'])}" if q["replicas"] > 1 else "")
               + (f" [{q['variant']}]" if q["variant"] else ""))
        if q["mode"] == "fp32":
            ref = "-"
        elif math.isnan(q["fp32_mean"]):
            ref = f"none (no {ref} cells)"
        rows.append([q["series"], bytes_text(q), str(q["n_seeds"]), _f(q["mean"], ".4f"),
                     _f(q["sd"], ".4f"),
                     f"{q['lo']:.4f}..{q['hi']:.4f}" + (" (diverged)" if q["diverged"] else ""),
                     "-" if q["mode"] == "fp32" else _f(q["gap_pct"], ".2f", True),
                     "-" if q["mode"] == "fp32" else _f(q["gap_spreads"], ".1f", True), ref,
                     "-" if q["mode"] == "fp32" or math.isnan(q["fp32_mean"])
                     else interval_text(q)])
    return headers, rows


def time_rows(ttq: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """(c): time to reach fp32's final held-out loss within the tolerance, series x link."""
    links = list(dict.fromkeys(ttq["scenario"]))
    limited = set(ttq.loc[ttq["host_limited"], "scenario"])
    headers = ["mode", "reached at step",
               *[f"{x} (host-limited)" if x in limited else x for x in links]]
    rows = []
    for series, mine in ttq.groupby("series", sort=False):
        at = mine.set_index("scenario")
        step = mine["reached_step"].iloc[0]
        rows.append([series, "not reached" if pd.isna(step) else str(int(step)),
                     *[format_seconds(at.loc[x, "time_s"]) if at.loc[x, "status"] == "reached"
                       else at.loc[x, "status"] for x in links]])
    return headers, rows


def schedule_rows(sched: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """(c'): the same time on the links that change, series x dynamic scenario, with
    fp32's time over the series' there (its speed-up)."""
    scenarios = list(dict.fromkeys(sched["scenario"]))
    rows = []
    for series, mine in sched.groupby("series", sort=False):
        at = mine.set_index("scenario")
        cells = []
        for x in scenarios:
            r = at.loc[x]
            if r["status"] != "reached":
                cells.append(r["status"])
                continue
            ratio = r["fp32_time_s"] / r["time_s"] if r["time_s"] > 0 else math.nan
            cells.append(format_seconds(r["time_s"])
                         + ("" if math.isnan(ratio) else f" ({ratio:.2f}x)"))
        step = mine["reached_step"].iloc[0]
        rows.append([series, "not reached" if pd.isna(step) else str(int(step)), *cells])
    return ["mode", "reached at step", *scenarios], rows


def source_rows(timed: pd.DataFrame, order: list[str]) -> tuple[list[str], list[list[str]]]:
    """(b): where each series' time axis came from, series in `order`."""
    headers = ["mode", "throughput cell", "warm-up s/step", "steady s/step"]
    rows = []
    for series in [s for s in order if s in set(timed["series"])]:
        r = timed[timed["series"] == series].iloc[0]
        rows.append([series, r["source"], _f(r["warm_step_s"], ".3f"),
                     _f(r["steady_step_s"], ".3f")])
    return headers, rows


def default_shape(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of `frame` (quality or bands) of a preset and stage count the default
    variant has: the variants that change dropout, not those that change the shape (a
    depth or size sweep's variants: their own tables)."""
    shapes = set(zip(*(frame.loc[frame["variant"] == "", k] for k in ("preset", "stages")),
                     strict=True))
    return frame[[s in shapes for s in zip(frame["preset"], frame["stages"], strict=True)]]


def dropout_rows(quality: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """(e): per mode label (one replica) that has variants of the default's shape: final
    held-out loss under each variant, with its gap to fp32 of the same variant."""
    single = default_shape(quality[quality["replicas"] == 1])
    variants = list(dict.fromkeys(["", *sorted(single["variant"].unique())]))
    labels = single.loc[single["variant"] != "", "label"].unique()
    default = single[single["variant"] == ""].set_index("label")["series"]
    names = {v: _variant_name(single[single["variant"] == v]) for v in variants}
    headers = ["mode", *[names[v] for v in variants]]
    rows = []
    for label in labels:
        row = [default.get(label, label)]
        for v in variants:
            hit = single[(single["label"] == label) & (single["variant"] == v)]
            if hit.empty:
                row.append("-")
                continue
            q = hit.iloc[0]
            gap = "" if q["mode"] == "fp32" else (
                " (no fp32 of this variant)" if math.isnan(q["gap_pct"])
                else f" ({_f(q['gap_pct'], '.2f', True)}%)")
            row.append(f"{q['mean']:.4f} +- {_f(q['sd'], '.4f')}{gap}")
        rows.append(row)
    return headers, rows


def _variant_name(rows: pd.DataFrame) -> str:
    if rows.empty:
        return "default"
    r = rows.iloc[0]
    what = f"dropout {r['dropout']:g}, {r['dropout_masks']} masks"
    return f"{r['variant'] or 'default'} ({what})"


def verdict_rows(verdicts: tuple[Verdict, ...]) -> tuple[list[str], list[list[str]]]:
    """(f): each published quality claim, its verdict, the rule and the numbers."""
    return (["published claim", "verdict", "at 95% confidence", "rule", "numbers"],
            [[v.text, v.label, v.significance, v.rule, "; ".join(v.evidence)]
             for v in verdicts])


# ------------------------------------------------------------------------ output
def _setting(conv: Convergence) -> list[str]:
    q = conv.quality
    seeds = sorted({s for seeds in q["seeds"] for s in seeds})
    more = "".join(f", `{d}`" for d in conv.also)
    return [f"- cells: `{conv.conv_dir}`{more}; {len(q)} series, seeds {seeds}; "
            f"{q['epochs'].max():g} epochs of {int(q['steps_per_epoch'].max())} steps "
            f"(one replica), {int(q['warmup_epochs'].max())} of them warm-up (uncompressed); "
            f"held-out "
            f"evaluation of {int(q['eval_windows'].max())} windows before training and "
            f"after every epoch",
            f"- step times: `{conv.throughput_dir}` "
            f"({len(conv.times)} throughput cells)",
            f"- rules: same quality = within {TOLERANCE_PCT:g}% of fp32's final held-out "
            f"loss; seed noise = within {NOISE_SPREADS:g} pooled seed spreads (sample sd); "
            f"95% intervals: Student's t on the per-seed differences (seeds paired), "
            f"'within {TOLERANCE_PCT:g}%' when the upper end is at most "
            f"+{TOLERANCE_PCT:g}%; figures: mean over seeds, {BAND}"]


def _tables(conv: Convergence) -> list[tuple[str, str, tuple[list[str], list[list[str]]]]]:
    """(title, note, (headers, rows)) of every table, in report order."""
    out = [("Final held-out loss over seeds", "Gap: mean minus fp32's of the same preset, "
            "layout and variant; in seed spreads: over the pooled sample sd; its 95% interval: "
            "Student's t on the per-seed differences (within 1%: the upper end at most +1%).",
            quality_rows(conv.quality))]
    if not conv.ttq.empty:
        out.append((f"Time to fp32's final held-out loss within {TOLERANCE_PCT:g}%",
                    "Training time of the first evaluation at or below the target, from the "
                    "measured step times of each link's throughput cell.",
                    time_rows(conv.ttq)))
    if not conv.schedule_ttq.empty:
        out.append((f"Time to fp32's final held-out loss within {TOLERANCE_PCT:g}% on links "
                    "that change",
                    "The same steps walked through each scenario's schedule at the median "
                    "step time the mode's own cell of the dynamic sweep measured in each "
                    "phase, warm-up steps at fp32's (they send its raw rows); in brackets "
                    "fp32's time there over the mode's. \"phase N not measured\": the walk "
                    "reaches a phase the cell ended before.", schedule_rows(conv.schedule_ttq)))
    if not conv.inrun.empty:
        out.append((f"Time to fp32's final held-out loss within {TOLERANCE_PCT:g}%, measured "
                    "within one run", "Cells that ran on the link with the held-out loss "
                    "after every epoch: their own loss curve and step times (target: fp32's "
                    "final loss in those cells), beside the joined estimate above (the "
                    "convergence cells' losses x the throughput cells' step times).",
                    inrun_rows(conv.inrun)))
    if not conv.timed.empty:
        out.append((f"Step times behind the time axis ({conv.scenario})",
                    "Medians of the throughput cell's warm-up and measured steps.",
                    source_rows(conv.timed, conv.order)))
    if not conv.pairs.empty:
        out.append(("AQ-SGD against the other compressors at equal bits or bytes",
                    "AQ-SGD's final held-out loss minus the other's, in % of the other's "
                    "mean, paired on seeds; within 1%: the whole interval inside +-1%. "
                    "Matched on bits: DirectQ and TAH-Quant at AQ-SGD's widths; on bytes: "
                    "any other compressor with the AQ-SGD series nearest in forward bytes "
                    "a token.",
                    pair_rows(conv.pairs)))
    for gaps, x, what in ((conv.depth, "stages", "pipeline depth"),
                          (conv.size, "preset", "model size")):
        if not gaps.empty:
            out.append((f"Gap to fp32 against {what}",
                        "Mean gap over seeds [95% interval] and its verdict, fp32 of the "
                        "same shape.", shape_rows(gaps, x)))
    dropout = dropout_rows(conv.quality)
    if dropout[1]:
        out.append(("Dropout and the delta", "Final held-out loss +- seed sd per variant "
                    "(gap to fp32 of the same variant).", dropout))
    out.append(("Published quality claims", "", verdict_rows(conv.verdicts)))
    return out


def _print(conv: Convergence, tables) -> None:
    console = Console(width=max(160, os.get_terminal_size().columns if os.isatty(1) else 160))
    if not conv.has_cells:
        console.print(f"no convergence cells under {conv.conv_dir}")
        return
    for title, note, (headers, rows) in tables:
        table = Table(*headers, title=title, caption=note or None)
        for row in rows:  # Text: a variant's '[dropout0]' is not rich markup
            table.add_row(*(Text(cell) for cell in row))
        console.print(table)


def write_convergence_report(conv_dir: Path, throughput_dir: Path, out_dir: Path, *,
                             scenario: str = DEFAULT_SCENARIO,
                             claims_path: Path = CLAIMS_FILE, quiet: bool = False,
                             dynamic_dir: Path | None = None,
                             inrun_dir: Path | None = None,
                             also: tuple[Path, ...] = ()) -> Path:
    """Write `out_dir/convergence.md` and its figures; returns the report's path.
    `dynamic_dir`: the dynamic sweep's results, for time to quality on links that change;
    `inrun_dir`: cells with loss curve and wall clock of one run on a shaped link
    (scenarios/sweeps/convergence-inrun.yaml), for time to quality within one run (None,
    or a folder without cells: no such table); `also`: more folders of convergence cells
    read with conv_dir (one sweep run in several parts)."""
    conv_dir, throughput_dir, out_dir = Path(conv_dir), Path(throughput_dir), Path(out_dir)
    conv = analyse(conv_dir, throughput_dir, load_claims(claims_path), scenario,
                   None if dynamic_dir is None else Path(dynamic_dir),
                   None if inrun_dir is None else Path(inrun_dir),
                   tuple(Path(d) for d in also))
    lines = ["# Convergence: model quality of each compression", ""]
    if not conv.has_cells:
        lines += [f"No convergence cells under `{conv_dir}`: nothing to judge. "
                  "`make convergence` runs them.", ""]
        tables: list = []
    else:
        tables = _tables(conv)
        figures = (plot_loss_epoch(conv.bands, conv.order, out_dir)
                   + plot_loss_time(conv.timed, conv.order, scenario, out_dir)
                   + [p for ref in SPEEDUP_REFERENCES
                      for p in plot_time_to_quality(conv.ttq, conv.order, out_dir, ref)]
                   + plot_dropout(default_shape(conv.bands), out_dir)
                   + plot_gap_shape(conv.depth, "stages", out_dir)
                   + plot_gap_shape(conv.size, "preset", out_dir))
        lines += [*_setting(conv), ""]
        if conv.times.empty:
            lines += [f"No throughput cells under `{throughput_dir}`: no time axis and no "
                      "time to quality (`make paper` runs them).", ""]
        elif conv.timed.empty:
            lines += [f"No throughput cell in `{throughput_dir}` for scenario {scenario} "
                      "with the convergence cells' modes and batch: no loss-against-time "
                      "figure.", ""]
        for title, note, (headers, rows) in tables:
            lines += [f"## {title}", "", markdown_table(headers, rows), ""]
            lines += [note, ""] if note else []
        lines += ["## Figures", ""]
        lines += [f"![{p.stem}]({os.path.relpath(p, out_dir)})" for p in figures
                  if p.suffix == ".png"]
        lines += ["", "How to read each table and figure, and the verdict rules: "
                  "docs/convergence.md."]
    if not quiet:
        _print(conv, tables)
    return atomic_write_text(out_dir / "convergence.md", "\n".join(lines) + "\n")
