"""Per-cell summary numbers, computed from result files only: one row per cell.

    python -c "from bench.report.summary import summarize; print(summarize(['results/100mbps']))"

Measured steps are the train steps the worker did not flag as warm-up; a step's wall
time is its slowest rank's; throughput is samples per step over the median step time;
speed-ups are over the fp32 (and bf16) cell of the same sweep, scenario, launcher,
layout, variant and seed (the registry's SPEEDUP_REFERENCES); `compute_bound` marks a
shaped cell whose `link_share` is below COMPUTE_BOUND_SHARE. Every column is defined
in docs/results-schema.md, "Summary"; summary.csv and summary.json are
`write_summary_files`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from aqsgd.compress.registry import COMPARISONS, SPEEDUP_REFERENCES, View
from aqsgd.filecache import atomic_write_text
from bench.report.linkbound import cell_bound
from bench.report.timeline import links_change, scheduled_rates
from bench.results.files import BYTE_KINDS, load_records, load_results
from bench.results.record import CellRecord
from bench.results.records import records_json

__all__ = ["MEDIAN_STEP", "MODE_RANK", "OVER_TIME", "UNKNOWN_RANK", "SPEEDUP_REFERENCES",
           "SUMMARY_COLUMNS", "SUMMARY_FILES", "host_limited_flags", "launcher_labels",
           "mode_text", "series_text", "summarize_cell", "summarize", "write_summary_files"]

SUMMARY_COLUMNS = (
    "sweep", "cell", "spec_name", "scenario", "mode", "label", "fw_bits", "bw_bits",
    "grad_mode", "stages", "replicas", "schedule", "seed", "variant", "repeat", "dropout",
    "dropout_masks", "epochs",
    "steps_per_epoch", "warmup_epochs", "eval_windows",
    "launcher", "shaping", "launcher_label", "shaped", "rate_mbit", "rate_mbit_slowest_phase",
    "rate_mbit_achieved", "host_limited", "delay_ms", "status", "failure",
    "measured_steps", "samples_per_step", "step_time_s", "step_time_spread_s",
    "throughput_samples_s", "throughput_statistic",
    "throughput_tokens_s", "throughput_mean_samples_s", "throughput_e2e_samples_s",
    *(f"speedup{kind}_vs_{ref}" for ref in SPEEDUP_REFERENCES for kind in ("", "_e2e")),
    "bytes_per_step", *(f"bytes_per_step_{k}" for k in BYTE_KINDS),
    "final_loss", "final_eval_loss", "comm_compute_ratio", "coding_comm_ratio", "link_share",
    "compute_bound", "peak_rss_max_bytes", "peak_rss_total_bytes",
    "wall_s",
)

# A shaped cell whose links would carry at least 1 / COMPUTE_BOUND_SHARE times its
# measured throughput (bench.report.linkbound's schedule bound, compute left out) is
# compute-bound on the machine that ran it: its speed-ups say how fast this machine
# computes, not what compression buys on that link.
COMPUTE_BOUND_SHARE = 0.5


def launcher_labels(frame: pd.DataFrame) -> pd.Series:
    """Per row: 'netns (htb+netem)', the launcher and the mechanisms that shaped its links
    (meta.json `cell.launcher`, `cell.shaping`); for a summary or a load_results frame."""
    return frame["launcher"].astype(str) + " (" + frame["shaping"].astype(str) + ")"


def _num(series: pd.Series) -> pd.Series:
    return pd.to_numeric(series, errors="coerce")


def host_limited_flags(frame: pd.DataFrame) -> pd.Series:
    """Per row: True for a cell whose links were host-limited; False where the column
    is missing or empty (results written before it existed)."""
    if "host_limited" not in frame.columns:
        return pd.Series(False, index=frame.index, dtype=bool)
    return frame["host_limited"].map(
        lambda v: isinstance(v, (bool, np.bool_)) and bool(v)).astype(bool)


# The headline samples/s of a cell: its median step where the links held still (robust to
# the odd step slowed by a noisy neighbour on a shared host); measured samples over
# measured time where they changed (a schedule, competing flows, stragglers), since there
# the median step falls in whichever conditions lasted longest, not the run's average.
MEDIAN_STEP, OVER_TIME = "median step", "over time"


def summarize_cell(frame: pd.DataFrame, links_changed: bool = False) -> dict:
    """Summary numbers of one cell's tidy metrics (all ranks, all steps); `links_changed`:
    its throughputs are samples over time (MEDIAN_STEP, OVER_TIME)."""
    train = frame[frame["kind"] == "train"]
    measured = train[~train["warmup"].astype(bool)]
    out: dict = {"measured_steps": int(measured["step"].nunique())}
    # memory: each rank's high-water mark over all its records (warm-up and evaluation
    # included); the largest rank's and the sum over ranks
    rank_peak = _num(frame["peak_rss_bytes"]).groupby(frame["rank"]).max()
    out["peak_rss_max_bytes"] = float(rank_peak.max())
    out["peak_rss_total_bytes"] = float(rank_peak.sum(min_count=1))
    if measured.empty:
        return out
    step_wall = _num(measured["step_time_s"]).groupby(measured["step"]).max()
    first_stage = measured[_num(measured["stage"]) == 0]
    samples = _num(first_stage["samples"]).groupby(first_stage["step"]).sum()
    tokens = _num(first_stage["tokens"]).groupby(first_stage["step"]).sum()
    median_s = float(step_wall.median())
    out["samples_per_step"] = float(samples.median())
    out["step_time_s"] = median_s
    out["step_time_spread_s"] = float(step_wall.quantile(0.75) - step_wall.quantile(0.25))
    total_s = float(step_wall.sum())
    out["throughput_mean_samples_s"] = float(samples.sum()) / total_s if total_s > 0 else np.nan
    if links_changed:
        out["samples_per_step"] = float(samples.mean())
        seconds, n_samples, n_tokens = total_s, samples.sum(), tokens.sum()
    else:
        seconds, n_samples, n_tokens = median_s, samples.median(), tokens.median()
    out["throughput_statistic"] = OVER_TIME if links_changed else MEDIAN_STEP
    out["throughput_samples_s"] = float(n_samples) / seconds if seconds > 0 else np.nan
    out["throughput_tokens_s"] = float(n_tokens) / seconds if seconds > 0 else np.nan
    out["bytes_per_step"] = float(_num(measured["bytes_sent_total"]).groupby(
        measured["step"]).sum().mean())
    for kind in BYTE_KINDS:
        col = f"bytes_sent_{kind}"
        out[f"bytes_per_step_{kind}"] = float(_num(measured[col]).fillna(0).groupby(
            measured["step"]).sum().mean())
    last_stage = train[_num(train["stage"]) == _num(train["stage"]).max()]
    if not last_stage.empty:
        last = last_stage[last_stage["step"] == last_stage["step"].max()]
        out["final_loss"] = float(_num(last["loss"]).mean())
    evals = frame[frame["kind"] == "eval"]
    if not evals.empty and _num(evals["eval_loss"]).notna().any():
        last_eval = evals[evals["step"] == evals["step"].max()]
        out["final_eval_loss"] = float(_num(last_eval["eval_loss"]).mean())
    # end to end: every train step, the warm-up epoch's at their own measured time
    all_wall = _num(train["step_time_s"]).groupby(train["step"]).max()
    all_first = train[_num(train["stage"]) == 0]
    all_samples = float(_num(all_first["samples"]).sum())
    out["throughput_e2e_samples_s"] = (all_samples / float(all_wall.sum())
                                       if all_wall.sum() > 0 else np.nan)
    compute = float(_num(measured["compute_s"]).sum())
    out["comm_compute_ratio"] = (float(_num(measured["comm_wait_s"]).sum()) / compute
                                 if compute > 0 else np.nan)
    # coding against the link: what replayed compute leaves real (docs/replay.md)
    waited = float(_num(measured["comm_wait_s"]).sum())
    out["coding_comm_ratio"] = (float(_num(measured["compress_s"]).sum()) / waited
                                if waited > 0 else np.nan)
    return out


def _over(table: pd.DataFrame, ref: pd.DataFrame, keys: list[str],
          column: str) -> np.ndarray:
    """`column` of each row over that of the `ref` row with the same `keys` (NaN when
    there is none)."""
    base = ref.set_index(keys)[column]
    base = base[~base.index.duplicated(keep="last")]
    idx = pd.MultiIndex.from_frame(table[keys])
    return table[column].to_numpy(dtype=float) / base.reindex(idx).to_numpy(dtype=float)


def _add_speedups(table: pd.DataFrame) -> pd.DataFrame:
    # like against like: the same launcher and layout, and the same seed, variant and
    # repeat of a sweep (a repeat against the reference measured in the same pass, under
    # the same load)
    same = ["sweep", "launcher_label", "stages", "replicas", "variant", "seed", "repeat"]
    for name in SPEEDUP_REFERENCES:
        ref = table[(table["mode"] == name) & (table["status"] == "ok")]
        table[f"speedup_vs_{name}"] = _over(table, ref, ["scenario", *same],
                                            "throughput_samples_s")
        table[f"speedup_e2e_vs_{name}"] = _over(table, ref, ["scenario", *same],
                                                "throughput_e2e_samples_s")
    # against fp32 on an unshaped link (the suite's headline target)
    fp32 = table[(table["mode"] == "fp32") & (table["status"] == "ok")]
    unshaped = fp32[~fp32["shaped"].astype(bool)]
    # the same launcher: its unshaped cell's mechanisms are none, the shaped cells' not
    launcher = ["launcher" if k == "launcher_label" else k for k in same]
    table["speedup_vs_unshaped_fp32"] = _over(table, unshaped, launcher,
                                              "throughput_samples_s")
    return table


# reading order of modes: each registered mode's rank (aqsgd.compress.registry); a mode
# no longer registered (an old result file) reads last; live: a plug-in's mode has its own
MODE_RANK = View(COMPARISONS, lambda c: c.rank)
UNKNOWN_RANK = np.inf


def _in_reading_order(table: pd.DataFrame) -> pd.DataFrame:
    """Rows by sweep, scenario (fastest link first), mode, bits, gradient compressor,
    replicas, variant (the default first), seed."""
    order = table.assign(
        _rate=table["rate_mbit"].fillna(np.inf),
        _mode=table["mode"].map(MODE_RANK).fillna(UNKNOWN_RANK),
        _fw=table["fw_bits"].fillna(0))
    keys = ["sweep", "_rate", "scenario", "launcher_label", "_mode", "_fw", "grad_mode",
            "replicas", "variant", "seed"]
    order = order.sort_values(keys, ascending=[k != "_rate" for k in keys], kind="stable")
    return order.drop(columns=["_rate", "_mode", "_fw"]).reset_index(drop=True)


def summarize(paths: Iterable[str | Path]) -> pd.DataFrame:
    """One row per cell (failed cells included, with empty numbers; a finished cell
    whose metrics.csv cannot be read has status 'unreadable', bench.results.files names
    the file in a ResultFileWarning). No cells (no paths, or none under them): an empty
    table with every column."""
    paths = list(paths)
    records = load_records(paths)
    frames = load_results(paths)
    rows = []
    for record in records:
        cell = record.cell.to_dict()
        row = {k: cell[k] for k in SUMMARY_COLUMNS if k in cell}
        row["cell"] = record.name
        row["schedule"] = record.schedule
        row["status"] = record.status
        row["failure"] = "" if record.failure is None else record.failure.reason
        row["wall_s"] = record.wall_s
        rates = scheduled_rates(record)
        if rates:  # the first scheduled link's time-weighted mean and slowest phase
            row["rate_mbit"], row["rate_mbit_slowest_phase"] = rates[min(rates)]
        if record.ok:
            mine = frames[frames["cell_dir"] == str(record.cell_dir)]
            if mine.empty:
                row["status"] = "unreadable"
            else:
                row.update(summarize_cell(mine, links_change(record)))
                row["link_share"] = _link_share(record, row)
        rows.append(row)
    table = pd.DataFrame(rows)
    for col in SUMMARY_COLUMNS:
        if col not in table.columns:
            table[col] = np.nan
    table["host_limited"] = host_limited_flags(table)
    table["compute_bound"] = table["shaped"].astype(bool) & \
        (pd.to_numeric(table["link_share"], errors="coerce") < COMPUTE_BOUND_SHARE)
    table["launcher_label"] = launcher_labels(table) if len(table) else pd.Series(dtype=str)
    if table.empty:
        table["speedup_vs_unshaped_fp32"] = pd.Series(dtype=float)
    else:
        table = _add_speedups(table)
        table = _in_reading_order(table)
    extra = [c for c in table.columns if c not in SUMMARY_COLUMNS]
    return table[list(SUMMARY_COLUMNS) + extra]


def _link_share(record: CellRecord, row: dict) -> float:
    """Measured samples/s over the link's schedule bound (NaN: no shaped used link, or
    no measured step)."""
    measured = row.get("throughput_samples_s", np.nan)  # absent: no measured step
    if not np.isfinite(measured):
        return np.nan
    bound = cell_bound(record, row["samples_per_step"], measured)
    return np.nan if bound is None else measured / bound.schedule_samples_s


# the '-kN' of ModeSpec.label: N coordinates a token of a mode with an in-graph half
_COORDS = re.compile(r"-k(\d+)$")


def mode_text(row) -> str:
    """A cell's mode in the command line's spelling (docs/results-schema.md, "Mode
    spellings"): 'fp32', 'aqsgd:2/4', 'aqsgd+gc/ef21:2/4' (the gradient compressor always
    shown), what `--modes` and a sweep file's `modes:` read back, with the k of a mode with
    an in-graph half ('ssn:15', read from the label's '-k15'); ' [VARIANT]' added for a
    non-default variant. `row` needs mode, fw_bits, bw_bits, grad_mode and variant, and
    label for k."""
    name = row["mode"]
    mode = COMPARISONS.get(name)  # None: a mode no longer registered (an old result file)
    if mode is not None and mode.data_parallel:
        name = f"{name}/{row['grad_mode']}"
    if mode is None or mode.takes_bits:
        name = f"{name}:{int(row['fw_bits'])}/{int(row['bw_bits'])}"
    label = row.get("label")
    coords = _COORDS.search(label) if isinstance(label, str) else None
    if coords:
        name += f":{coords.group(1)}"
    return f"{name} [{row['variant']}]" if row["variant"] else name


def series_text(row) -> str:
    """How legends and the convergence tables name a cell's series: mode_text with
    ' dpN' for N > 1 data-parallel replicas before the variant: 'aqsgd:2/4', 'fp32 dp2',
    'aqsgd+gc/ef21:2/4 dp2', 'directq:2/4 [dropout0]'. `row` needs mode_text's fields
    and replicas (an empty one reads 1)."""
    replicas = row["replicas"]
    replicas = 1 if replicas is None or pd.isna(replicas) else int(replicas)
    text = mode_text({**row, "variant": ""})
    if replicas > 1:
        text += f" dp{replicas}"
    return f"{text} [{row['variant']}]" if row["variant"] else text


# The machine-readable twins of report.md (docs/results-schema.md, "summary.csv and
# summary.json"): the same rows, every column of summarize() plus `mode_spec`.
SUMMARY_FILES = ("summary.csv", "summary.json")


def _with_spelling(summary: pd.DataFrame) -> pd.DataFrame:
    """`summary` with `mode_spec` (mode_text without the variant: what `--modes` reads)
    after `mode`."""
    table = summary.copy()
    spec = [mode_text({**r, "variant": ""}) for r in table.to_dict("records")]
    table.insert(table.columns.get_loc("mode") + 1, "mode_spec", spec)
    return table


def write_summary_files(out_dir: str | Path, summary: pd.DataFrame) -> list[Path]:
    """Write `out_dir/summary.csv` and `out_dir/summary.json` (a list of one object per
    cell, NaN as null), atomically; returns their paths."""
    out_dir = Path(out_dir)
    table = _with_spelling(summary)
    csv_path, json_path = (out_dir / name for name in SUMMARY_FILES)
    atomic_write_text(csv_path, table.to_csv(index=False))
    atomic_write_text(json_path, records_json(table))
    return [csv_path, json_path]
