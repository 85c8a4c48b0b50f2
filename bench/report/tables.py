"""The summary table (terminal, plain text and Markdown) and the Markdown report of a sweep.

    python -m bench report results/100mbps     # prints the table, writes report.md
    COLUMNS=80 python -m bench report results/100mbps   # the table in 80 columns

`print_table` (rich, at the terminal's width: the columns of DROP_ORDER left out, and
named, where it is narrow), `text_table` (plain text for logs and CI), `write_report`
(report.md, Markdown tables through bench.report.markdown; summary.csv and summary.json
beside it). Made from result files only; a host-limited scenario is labelled
`(host-limited)` with its configured and achieved rates under every table.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path

import pandas as pd
from rich import box
from rich.console import Console
from rich.table import Column, Table
from rich.text import Text

from aqsgd.compress.registry import SPEEDUP_REFERENCES
from aqsgd.filecache import atomic_write_text
from bench.report.linkbound import bound_lines
from bench.report.markdown import markdown_table
from bench.report.repeats import REPEATED, over_repeats
from bench.report.summary import (
    COMPUTE_BOUND_SHARE,
    OVER_TIME,
    mode_text,
    write_summary_files,
)
from bench.report.timeline import timeline_section
from bench.results.files import load_records
from bench.results.record import CellRecord

__all__ = ["TABLE_COLUMNS", "DROP_ORDER", "compute_bound_note", "fit_columns", "format_table",
           "held_out_header",
           "host_limited_notes", "mode_text", "print_table", "text_table",
           "write_report"]


def _times(v) -> str:
    return f"{v:.2f}x"


# (summary column, header, formatter); the held-out loss header names its windows
# (held_out_header). The speed-ups are over every SPEEDUP_REFERENCES mode (fp32, bf16):
# "-" in a sweep without its cell.
TABLE_COLUMNS = (
    ("scenario_label", "scenario", str),
    ("mode_text", "mode", str),
    ("launcher_label", "launcher", str),
    ("replicas", "dp", lambda v: f"{int(v)}"),
    ("schedule", "schedule", str),
    ("seed", "seed", lambda v: f"{int(v)}"),
    ("throughput_samples_s", "samples/s", lambda v: f"{v:.2f}"),
    ("throughput_tokens_s", "tokens/s", lambda v: f"{v:.0f}"),
    *(column for ref in SPEEDUP_REFERENCES for column in (
        (f"speedup_vs_{ref}", f"speed-up vs {ref} (steady state)", _times),
        (f"speedup_e2e_vs_{ref}", f"end-to-end vs {ref} (warm-up incl.)", _times))),
    ("speedup_vs_unshaped_fp32", "vs fp32 unshaped", _times),
    ("bytes_per_step", "MB/step", lambda v: f"{v / 1e6:.3f}"),
    ("final_eval_loss", "held-out loss", lambda v: f"{v:.4f}"),
    ("comm_compute_ratio", "comm/compute", lambda v: f"{v:.2f}"),
    ("peak_rss_total_bytes", "peak RSS GB (all ranks)", lambda v: f"{v / 1e9:.2f}"),
    ("status_text", "status", str),
)
# Table columns whose cells wrap at spaces on the console (a failed cell's reason), so a
# long one leaves out no other column.
WRAPPED = ("status_text",)


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA


def held_out_header(windows: Iterable) -> str:
    """'held-out loss (128 windows)': the windows of one evaluation of the cells shown
    (every count listed when they differ)."""
    counts = sorted({int(w) for w in windows if not _missing(w)})
    if not counts:
        return "held-out loss"
    unit = "window" if counts == [1] else "windows"
    return f"held-out loss ({'/'.join(str(c) for c in counts)} {unit})"


def _rows(summary: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    _, headers, rows = _keyed_rows(summary)
    return headers, rows


def _repeated(summary: pd.DataFrame) -> bool:
    return bool((pd.to_numeric(summary["repeat"], errors="coerce") > 0).any())


def _table_frame(summary: pd.DataFrame) -> pd.DataFrame:
    """The rows the table shows: one per cell, or with a sweep's repeats one per cell
    and its repeats (bench.report.repeats: the median, `_lo`/`_hi` its min..max), the
    failed measurements after them."""
    if not _repeated(summary):
        return summary.assign(n_repeats=1)
    failed = summary[summary["status"] != "ok"].assign(n_repeats=1)
    return pd.concat([over_repeats(summary), failed], ignore_index=True)


def _with_band(fmt, column: str):
    """`fmt` of a row's median, with its min..max over repeats when it has several."""
    def cell(row) -> str:
        text = fmt(row[column])
        if row["n_repeats"] > 1 and not _missing(row[f"{column}_lo"]):
            text += f" [{fmt(row[f'{column}_lo'])}-{fmt(row[f'{column}_hi'])}]"
        return text
    return cell


def compute_bound_note(summary: pd.DataFrame) -> list[str]:
    """The lines under a table: how repeats are shown, what '‡' and '†' mark."""
    notes = []
    if (summary["throughput_statistic"] == OVER_TIME).any():
        notes.append("‡ links changed during the cell (a schedule, competing flows or "
                     "stragglers): its samples/s, tokens/s and speed-ups are measured samples "
                     "over measured time; the other rows' are the median step's")
    if _repeated(summary):
        n = int(pd.to_numeric(summary["repeat"], errors="coerce").max()) + 1
        notes.append(f"each number: the median over a cell's {n} repeats, [min-max] beside "
                     f"it (the repeats ran interleaved; speed-ups pair each repeat with "
                     f"its own reference)")
    if not summary["compute_bound"].astype(bool).any():
        return notes
    return [*notes, f"† compute-bound on this machine: its links would carry at least "
            f"{1 / COMPUTE_BOUND_SHARE:g}x its samples/s (bench.report.summary, link_share); "
            f"its speed-ups measure this machine's compute, not the link"]


def _keyed_rows(summary: pd.DataFrame) -> tuple[list[str], list[str], list[list[str]]]:
    """(summary column of each table column, headers, rows); a sweep's repeats of a cell
    are one row, each number its median with [min-max] over the repeats."""
    table = _table_frame(summary)
    table["scenario_label"] = [
        f"{s}{'‡' if over == OVER_TIME else ''}{'†' if bound is True else ''}"
        f"{' (host-limited)' if limited else ''}"
        for s, limited, bound, over in zip(table["scenario"], table["host_limited"],
                                           table["compute_bound"],
                                           table["throughput_statistic"], strict=True)]
    table["mode_text"] = table.apply(mode_text, axis=1) if len(table) else []
    # a failed cell's status names why: the rank, the exception's message, its plug-in
    table["status_text"] = [f"{status}: {why}" if isinstance(why, str) and why else status
                            for status, why in zip(table["status"], table["failure"],
                                                   strict=True)]
    columns = list(TABLE_COLUMNS)
    if table["speedup_vs_unshaped_fp32"].isna().all():
        columns = [c for c in columns if c[0] != "speedup_vs_unshaped_fp32"]
    if table["seed"].nunique() <= 1:  # one seed: the column says nothing
        columns = [c for c in columns if c[0] != "seed"]
    header = {"final_eval_loss": held_out_header(table["eval_windows"])}
    headers = [header.get(c, h) for c, h, _ in columns]
    rows = []
    for _, r in table.iterrows():
        rows.append(["-" if _missing(r.get(c)) else
                     (_with_band(fmt, c)(r) if c in REPEATED and _repeated(summary)
                      else fmt(r[c])) for c, _, fmt in columns])
    return [c for c, _, _ in columns], headers, rows


def host_limited_notes(summary: pd.DataFrame) -> list[str]:
    """One line per host-limited scenario: configured and achieved link rate."""
    notes = []
    limited = summary[summary["host_limited"].astype(bool)]
    for scenario, rows in limited.groupby("scenario", sort=False):
        achieved, rate = rows["rate_mbit_achieved"].min(), rows["rate_mbit"].iloc[0]
        notes.append(f"host-limited: {scenario} links delivered {achieved:.1f} Mbit/s of "
                     f"{rate:g} Mbit/s configured; with the limit lifted this machine carries "
                     f"less than twice that rate, so its numbers there describe the host, "
                     f"not the link")
    return notes


def text_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A rich table rendered as plain text: the header, a rule, one line per row (no
    colour, no markup, never wrapped; for logs and CI output)."""
    table = Table(*headers, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for row in rows:
        table.add_row(*row)
    out = io.StringIO()
    Console(file=out, width=10_000, color_system=None, markup=False, emoji=False,
            highlight=False).print(table)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines())


def format_table(summary: pd.DataFrame) -> str:
    """The summary table as plain text, host-limited notes below it."""
    headers, rows = _rows(summary)
    return "\n".join([text_table(headers, rows), *host_limited_notes(summary),
                      *compute_bound_note(summary)])


# The columns print_table leaves out, first to last, when the table does not fit the
# terminal (summary column names; the others are always shown). report.md, summary.csv
# and summary.json keep every column.
DROP_ORDER = (
    "peak_rss_total_bytes", "schedule",
    *(f"speedup_e2e_vs_{ref}" for ref in reversed(SPEEDUP_REFERENCES)),
    "throughput_tokens_s", "comm_compute_ratio", "speedup_vs_unshaped_fp32",
    *(f"speedup_vs_{ref}" for ref in reversed(SPEEDUP_REFERENCES[1:])),
    "bytes_per_step", "seed", "launcher_label", "final_eval_loss",
)


def _console_table(headers: Sequence[str], rows: Sequence[Sequence[str]],
                   caption: str | None, widths: Sequence[int] | None = None,
                   title: str = "AQ-SGD benchmark summary") -> Table:
    """Scenario and mode never wrap; the other headers wrap at their spaces; `widths`:
    each column's content width (None: rich's choice)."""
    widths = widths or [None] * len(headers)
    columns = [Column(h, no_wrap=i < 2, width=w)
               for i, (h, w) in enumerate(zip(headers, widths, strict=True))]
    # Text: the notes' '[min-max]' is not rich markup
    table = Table(*columns, title=title, caption=None if caption is None else Text(caption),
                  caption_style="bold red")
    for r in rows:  # Text: a variant's '[dropout0]' is not rich markup
        table.add_row(*(Text(c) for c in r))
    return table


# terminal columns per table column besides its content (padding 2, rule 1), and the
# closing rule of the table
_COLUMN_EDGE, _TABLE_EDGE = 3, 1


def _column_widths(headers: Sequence[str], rows: Sequence[Sequence[str]],
                   width: int, wrapped: Collection[int] = ()) -> list[int] | None:
    """Content width per column in `width` terminal columns, no cell and no header word
    cut (scenario and mode: their whole header; a column of `wrapped` wraps its cells at
    spaces too), headers and cells unwrapped where the room allows, left to right; None
    when even the least widths do not fit."""
    def longest(i: int, words: list[str]) -> int:
        cells = [w for r in rows for w in (r[i].split() if i in wrapped else [r[i]])]
        return max(len(w) for w in [*words, *cells])
    least = [longest(i, [h] if i < 2 else h.split()) for i, h in enumerate(headers)]
    room = width - _TABLE_EDGE - _COLUMN_EDGE * len(headers) - sum(least)
    if room < 0:
        return None
    widths = []
    for i, header in enumerate(headers):
        whole = max(len(text) for text in [header, *(r[i] for r in rows)])
        grow = min(room, whole - least[i])
        widths.append(least[i] + grow)
        room -= grow
    return widths


def fit_columns(width: int, keys: Sequence[str], headers: Sequence[str],
                rows: Sequence[Sequence[str]]) -> tuple[list[int], list[int] | None]:
    """(indices of the columns to show in `width` terminal columns, their content
    widths): all when the table fits (headers wrapped at spaces, no cell cut), else
    without DROP_ORDER's columns, first to last, until it fits (widths None when even
    the last does not)."""
    keep = list(range(len(headers)))
    for key in (None, *DROP_ORDER):
        if key is not None and key in keys:
            keep.remove(keys.index(key))
        widths = _column_widths([headers[i] for i in keep],
                                [[r[i] for i in keep] for r in rows], width,
                                [n for n, i in enumerate(keep) if keys[i] in WRAPPED])
        if widths is not None:
            break
    return keep, widths


def print_table(summary: pd.DataFrame, console: Console | None = None) -> None:
    """The summary table on the console at its width (rich's: the terminal's, or
    COLUMNS): titled, host-limited notes as its caption. Columns that do not fit are
    left out (DROP_ORDER) and named in a line below it. When the rows come from more
    than one launcher, each row's scenario cell names its launcher ("100mbps docker")."""
    console = console or Console()
    keys, headers, rows = _keyed_rows(summary)
    if summary["launcher"].nunique() > 1:
        # rows of two launchers may share scenario and mode, and the launcher's column
        # may not fit: the scenario's cell names the launcher too
        at = keys.index("launcher_label")
        rows = [[f"{r[0]} {r[at].split(' (')[0]}", *r[1:]] for r in rows]
    keep, widths = fit_columns(console.width, keys, headers, rows)
    # the title names every launcher the rows come from (their column may not fit)
    launchers = sorted(set(summary["launcher_label"].dropna()))
    title = "AQ-SGD benchmark summary" + (f" ({', '.join(launchers)})" if launchers else "")
    table = _console_table([headers[i] for i in keep], [[r[i] for i in keep] for r in rows],
                           "\n".join(host_limited_notes(summary)
                                     + compute_bound_note(summary)) or None, widths, title)
    console.print(table)
    dropped = [h for i, h in enumerate(headers) if i not in keep]
    if dropped:
        console.print(Text(f"left out to fit {console.width} columns: {'; '.join(dropped)} "
                           f"(all in report.md and summary.csv; widen the terminal or set "
                           f"COLUMNS)"), overflow="fold")


def _provenance_lines(records: list[CellRecord]) -> list[str]:
    if not records:
        return []
    prov = records[0].provenance
    hw = prov.hardware
    launchers = sorted({r.cell.launcher for r in records})
    lines = [
        f"- git: `{prov.git_commit}`{' (dirty)' if prov.git_dirty else ''}",
        "- versions: " + ", ".join(f"{k} {v}" for k, v in prov.versions.items() if v),
        f"- hardware: {hw.cpu_model}, {hw.cpu_cores} cores, "
        f"{hw.memory_gib} GiB" + (f", GPUs {list(hw.gpus)}" if hw.gpus else ""),
        f"- launcher(s): {', '.join(launchers)}",
    ]
    if any(r.cell.launcher == "local" for r in records):
        lines.append("- **WARNING: some cells ran on unshaped links (local launcher); their "
                     "scenario names do not describe the network they saw.**")
    return lines


def _fmt_or_dash(value, fmt: str) -> str:
    return "-" if _missing(value) else format(value, fmt)


_KIND_TEXT = {"machine": ["inside a machine"], "network": ["between machines"], None: []}


def _carried(records: list[CellRecord], scenario: str) -> dict[tuple[int, int], list[str]]:
    """What each directed host link of `scenario` carries, over all its cells' placements
    (meta.json's `placement.links`)."""
    carried: dict[tuple[int, int], list[str]] = {}
    for record in records:
        if record.cell.scenario != scenario:
            continue
        for link in record.placement.links:
            traffic = carried.setdefault((link.src, link.dst), [])
            # a kind only with several ranks per machine
            traffic.extend(t for t in [*_KIND_TEXT[link.kind], *link.traffic]
                           if t not in traffic)
    return carried


def _placement_lines(records: list[CellRecord]) -> list[str]:
    """Where each rank ran, once per scenario and layout (meta.json's `placement`)."""
    seen, lines = set(), []
    for record in records:
        p = record.placement
        key = (p.scenario, p.stages, p.replicas)
        if key in seen:
            continue
        seen.add(key)
        machines = p.ranks_per_machine > 1
        rule = (f"{p.ranks_per_machine} ranks per machine, a machine holding "
                f"{p.within_machine}" if machines else "rank = replica * stages + stage")
        lines += [f"{p.stages} stages x {p.replicas} replica(s) on {p.scenario} "
                  f"({p.n_hosts} hosts; {rule}):", "",
                  markdown_table(["host", "rank", "stage", "replica",
                                  *(["machine"] if machines else [])],
                                 [[r.host, r.rank, r.stage, r.replica,
                                   *([r.machine] if machines else [])]
                                  for r in p.ranks]), ""]
    return ["## Placement", "", *lines] if lines else []


def _probe_lines(records: list[CellRecord]) -> list[str]:
    """Rows of the link-probe table, once per scenario: meta.json's `probe` records
    (ProbeRecord.to_dict() of the launcher's probe: every field present), each with the
    traffic the cells' placements put on it."""
    seen, rows = set(), []
    for record in records:
        scenario = record.cell.scenario
        if scenario in seen or not record.probe:
            continue
        seen.add(scenario)
        carried = _carried(records, scenario)
        for link in record.probe:
            want, got = link.rate_mbit_configured, link.rate_mbit_achieved
            ratio = got / want if want and got is not None else None
            rows.append([scenario, f"{link.src} -> {link.dst}",
                         _fmt_or_dash(want, ".1f"), _fmt_or_dash(got, ".1f"),
                         _fmt_or_dash(ratio, ".3f"),
                         _fmt_or_dash(link.rate_mbit_ceiling, ".1f"),
                         "**yes**" if link.host_limited else "no",
                         _fmt_or_dash(link.rtt_ms, ".3f"),
                         "; ".join(carried.get((link.src, link.dst), [])) or "-"])
    if not rows:
        return []
    headers = ["scenario", "link", "configured (Mbit/s)", "achieved (Mbit/s)",
               "achieved/configured", "host ceiling (Mbit/s)", "host-limited", "RTT (ms)",
               "carries"]
    return ["## Link probe", "", markdown_table(headers, rows), "",
            "The host ceiling is measured only for a link that falls short: the same path "
            "with its rate limit lifted (a short link is measured twice first). A ceiling "
            "below twice the configured rate, with the link near the lesser of the two, "
            "makes the link host-limited: this machine does not carry the rate with room "
            "to spare, and the run goes on labelled. Otherwise a short link stops the run "
            "(a shaping error).", ""]


def _failure_lines(records: list[CellRecord]) -> list[str]:
    lines = []
    for record in records:
        failure = record.failure
        if record.ok or failure is None:
            continue
        lines += [f"### {record.name}", "", f"{failure.reason}", ""]
        if failure.log_tail is not None:  # only when the failing rank is known
            lines += [f"Tail of rank {failure.rank}'s log:", "", "```",
                      failure.log_tail, "```", ""]
    return (["## Failed cells", "", *lines]) if lines else []


def write_report(sweep_dir: str | Path, summary: pd.DataFrame,
                 figures: Iterable[str | Path], title: str | None = None) -> Path:
    """Write `sweep_dir/report.md`: table, figures, link probe, provenance, failures; and
    beside it summary.csv and summary.json (bench.report.summary.write_summary_files)."""
    sweep_dir = Path(sweep_dir)
    records = load_records([sweep_dir])
    headers, rows = _rows(summary)
    pngs = [Path(f) for f in figures if str(f).endswith(".png")]
    lines = [f"# {title or 'Benchmark report: ' + sweep_dir.name}", "",
             *_provenance_lines(records), "",
             "## Summary", "", markdown_table(headers, rows), "",
             *[line for note in host_limited_notes(summary) + compute_bound_note(summary)
               for line in (f"**{note}**", "")],
             "The steady-state speed-up counts measured steps only (after the "
             "uncompressed warm-up epoch); the end-to-end one counts every step, the "
             "warm-up epoch's at their measured time. Both are shown over fp32 and over "
             "bf16 (activations and gradients in bf16 on the wire, the default of today's "
             "systems; \"-\" without a bf16 cell). The held-out loss is the last "
             "evaluation's, uncompressed, on windows training never sees. Definitions in "
             "docs/results-schema.md.", ""]
    if pngs:
        lines += ["## Figures", ""]
        for png in pngs:
            rel = os.path.relpath(png, sweep_dir)
            lines += [f"![{png.stem}]({rel})", ""]
    lines += timeline_section(records, sweep_dir / "figures", sweep_dir)
    lines += _placement_lines(records)
    lines += bound_lines(records, summary)
    lines += _probe_lines(records)
    lines += _failure_lines(records)
    write_summary_files(sweep_dir, summary)
    return atomic_write_text(sweep_dir / "report.md", "\n".join(lines) + "\n")
