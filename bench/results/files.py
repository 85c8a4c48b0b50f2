"""Result files of the harness: JSON/CSV writers (atomic, through aqsgd.filecache), the
per-rank JSONL reader and the tidy loader; meta.json is read by bench.results.record
only, provenance is bench.results.provenance.

    results/<sweep>/<cell>/metrics.csv   one row per rank per step (tidy)
    results/<sweep>/<cell>/peers.csv     bytes per (rank, step, peer)
    results/<sweep>/<cell>/meta.json     provenance, identity and status, written LAST

    python -c "from bench.results.files import load_results as l; print(l(['results/100mbps']))"
    records = load_records(["results/100mbps"])    # every cell's typed meta.json

Everything downstream reads these files only. A finished cell is reused only by a run
of the same identity (`reuse_refusal` says why not); an unreadable file is a
ResultFileError naming it, which the loaders skip with a ResultFileWarning.
docs/results-schema.md has the schema and the writing rules.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from aqsgd.filecache import atomic_write_text
from bench.results.provenance import provenance  # here too: the harness imports it from here
from bench.results.record import CellRecord, parse_record, read_json, read_record
from bench.results.schema import (
    BYTE_KINDS,
    CELL_KEYS,
    IDENTITY_KEYS,
    SCHEMA_VERSION,
    ResultFileError,
    ResultFileWarning,
    SchemaError,
)

__all__ = [
    "SCHEMA_VERSION",
    "CELL_KEYS",
    "BYTE_KINDS",
    "IDENTITY_KEYS",
    "SchemaError",
    "ResultFileError",
    "ResultFileWarning",
    "write_json",
    "write_csv",
    "read_record",
    "read_metrics",
    "reuse_refusal",
    "is_finished",
    "RECORDED_FILES",
    "file_digests",
    "check_digests",
    "provenance",
    "read_rank_jsonl",
    "metrics_frame",
    "find_cells",
    "load_results",
    "load_records",
    "log_tail",
    "last_error",
]

# Columns every metrics.csv has, in this order; unknown scalar fields a
# worker adds later are kept after them (forward compatible).
METRIC_COLUMNS = (
    "cell", "rank", "stage", "replica", "kind", "step", "epoch", "warmup",
    "loss", "eval_loss", "perplexity", "step_time_s", "compute_s", "comm_wait_s",
    "compress_s", "samples", "tokens", "lr",
    *(f"bytes_sent_{k}" for k in BYTE_KINDS), "bytes_sent_total",
    *(f"bytes_recv_{k}" for k in BYTE_KINDS), "bytes_recv_total",
    "wall_s", "end_unix", "peak_rss_bytes",
)


def write_json(path: str | Path, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def write_csv(path: str | Path, frame: pd.DataFrame) -> Path:
    return atomic_write_text(path, frame.to_csv(index=False))


def read_metrics(cell_dir: str | Path) -> pd.DataFrame:
    """The cell's metrics.csv; ResultFileError naming the file when it is missing, is
    not CSV, or lacks a column every metrics.csv has (METRIC_COLUMNS)."""
    path = Path(cell_dir) / "metrics.csv"
    try:
        frame = pd.read_csv(path)
    except FileNotFoundError:
        raise ResultFileError(f"{path}: missing (meta.json says the cell finished)") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise ResultFileError(f"{path}: not a CSV file ({err}); truncated or "
                              f"corrupt") from None
    missing = [c for c in METRIC_COLUMNS if c not in frame.columns]
    if missing:
        raise ResultFileError(f"{path}: lacks the column(s) {', '.join(missing)}; truncated "
                              f"or corrupt")
    return frame


# The files meta.json vouches for (its `files` block): a cut or edited one that still
# parses is caught by its size and hash, never counted as finished or read as data.
RECORDED_FILES = ("metrics.csv", "peers.csv")


def file_digests(cell_dir: str | Path, names: Iterable[str] = RECORDED_FILES) -> dict:
    """meta.json's `files` block: {name: {"bytes": size, "sha256": hex digest}} of the
    cell's files `names`, read as they are now (the harness calls it after writing them)."""
    out = {}
    for name in names:
        data = (Path(cell_dir) / name).read_bytes()
        out[name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    return out


def check_digests(record: CellRecord) -> None:
    """ResultFileError naming the file whose size or hash differs from meta.json's
    `files` block (truncated, replaced) or that is gone. A record without that block
    (a failed cell) is not checked."""
    for name, recorded in (record.files or {}).items():
        path = record.cell_dir / name
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise ResultFileError(f"{path}: missing (meta.json records {recorded.bytes} "
                                  f"bytes)") from None
        if len(data) != recorded.bytes:
            raise ResultFileError(f"{path}: {len(data)} bytes, meta.json records "
                                  f"{recorded.bytes}; truncated or replaced")
        if hashlib.sha256(data).hexdigest() != recorded.sha256:
            raise ResultFileError(f"{path}: its sha256 differs from meta.json's "
                                  f"({recorded.sha256[:12]}...); edited or corrupt")


def reuse_refusal(cell_dir: str | Path, identity: dict | None = None) -> str:
    """'' when the cell in `cell_dir` may be reused by a run of `identity` (the keys of
    IDENTITY_KEYS it gives; None: any), else why not: never finished, another schema,
    an unreadable file or a key missing (named), failed, or the first identity key that
    differs. So a run on another launcher, after a code change or a scenario edit,
    measures anew. Reads an older meta.json only as far as its version and status."""
    path = Path(cell_dir) / "meta.json"
    try:
        meta = read_json(cell_dir)
        if meta is None:
            return "not measured yet"
        # an older file is told by its version, whatever else it lacks
        if isinstance(meta, dict) and meta.get("schema_version") != SCHEMA_VERSION:
            return f"schema {meta.get('schema_version')!r}, not {SCHEMA_VERSION}"
        record = parse_record(meta, path)
        if not record.ok:
            return f"status {record.status!r}"
        for key, value in (identity or {}).items():
            recorded = getattr(record.identity, key)
            if recorded != value:
                return _differs(key, recorded, value)
        check_digests(record)
        read_metrics(cell_dir)
    except ResultFileError as err:
        return f"unreadable: {err}"
    return ""


def _differs(key: str, recorded: Any, value: Any) -> str:
    """Why identity key `key` differs: its recorded and this run's values, a path's
    content named by its setting ('model content 3f2a... recorded, this run's 91bc...')."""
    if key != "contents":
        return f"{key} {recorded!r} recorded, this run's {value!r}"
    setting = min(k for k in {**recorded, **value} if recorded.get(k) != value.get(k))
    if setting not in recorded:
        return (f"{setting} content not recorded (a cell of the path as typed), this "
                f"run's {value[setting]}")
    return (f"{setting} content {recorded[setting]} recorded, this run's "
            f"{value.get(setting, 'none (not a path)')}")


def is_finished(cell_dir: str | Path, identity: dict | None = None) -> bool:
    """Whether the cell may be reused by a run of `identity` (reuse_refusal is '')."""
    return reuse_refusal(cell_dir, identity) == ""


# ------------------------------------------------------------- per-rank JSONL
def read_rank_jsonl(path: str | Path) -> list[dict]:
    """Records of one rank's metrics file; a truncated last line (a worker
    killed while writing) is dropped, any other bad line is an error."""
    path = Path(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    records = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as err:
            if i == len(lines) - 1:
                break
            raise ValueError(f"{path}:{i + 1}: not a JSON object: {err}") from None
    return records


def _flatten_record(rec: dict, rank_from_file: int) -> tuple[dict, list[dict]]:
    """One JSONL record -> (tidy row, per-peer rows)."""
    row: dict[str, Any] = {}
    peers: list[dict] = []
    for key, value in rec.items():
        if key in ("bytes_sent", "bytes_recv") and isinstance(value, dict):
            for kind, n in value.items():
                row[f"{key}_{kind}"] = n
        elif key == "bytes_by_peer" and isinstance(value, dict):
            for peer, counts in value.items():
                peers.append({
                    "peer": int(peer),
                    "bytes_sent": counts.get("sent", 0),
                    "bytes_recv": counts.get("recv", 0),
                })
        elif isinstance(value, dict | list):
            row[key] = json.dumps(value, sort_keys=True)
        else:
            row[key] = value
    row.setdefault("rank", rank_from_file)
    row.setdefault("kind", "train")
    for direction in ("sent", "recv"):
        parts = [row.get(f"bytes_{direction}_{k}") for k in BYTE_KINDS]
        if any(p is not None for p in parts):
            row[f"bytes_{direction}_total"] = sum(p or 0 for p in parts)
    for p in peers:
        p.update(rank=row["rank"], step=row.get("step"), kind=row["kind"])
    return row, peers


def _rank_of(path: Path) -> int:
    stem = path.stem  # rank{R}
    if not stem.startswith("rank") or not stem[4:].isdigit():
        raise ValueError(f"{path}: metrics file must be named rank<R>.jsonl")
    return int(stem[4:])


def metrics_frame(jsonl_paths: Iterable[str | Path],
                  cell: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Join per-rank JSONL files into (metrics, peers) tidy frames.

    `warmup` is each record's own flag (the worker marks the steps its compressors
    spent in their warm-up epochs; throughput excludes them); a record without it is
    an error. `wall_s` is each rank's cumulative train step time, the x-axis of
    loss-against-time plots.
    """
    rows: list[dict] = []
    peer_rows: list[dict] = []
    for path in sorted(Path(p) for p in jsonl_paths):
        rank = _rank_of(path)
        for rec in read_rank_jsonl(path):
            if not isinstance(rec.get("warmup"), bool):
                raise ValueError(f"{path}: {rec.get('kind')} record of step {rec.get('step')} "
                                 f"has no boolean 'warmup' field, got {rec.get('warmup')!r}")
            row, peers = _flatten_record(rec, rank)
            rows.append(row)
            peer_rows.extend(peers)
    frame = pd.DataFrame(rows)
    for col in METRIC_COLUMNS:
        if col not in frame.columns:
            frame[col] = pd.NA
    frame["cell"] = cell
    frame = frame.sort_values(["rank", "step", "kind"], kind="stable").reset_index(drop=True)
    is_train = frame["kind"] == "train"
    step_time = pd.to_numeric(frame["step_time_s"], errors="coerce").where(is_train, 0.0)
    frame["wall_s"] = step_time.fillna(0.0).groupby(frame["rank"]).cumsum()
    extra = [c for c in frame.columns if c not in METRIC_COLUMNS]
    frame = frame[list(METRIC_COLUMNS) + extra]
    peers = pd.DataFrame(peer_rows, columns=["rank", "step", "kind", "peer",
                                             "bytes_sent", "bytes_recv"])
    peers.insert(0, "cell", cell)
    return frame, peers


# -------------------------------------------------------------------- loading
def _sweep_cells(sweep_dir: Path) -> list[Path]:
    """The cells a sweep directory's sweep.json lists that have a meta.json: a cell left
    from an earlier version of the sweep (a renamed or dropped cell) is not read. An
    unreadable sweep.json is named in a ResultFileWarning and every cell under it read."""
    path = sweep_dir / "sweep.json"
    try:
        listed = json.loads(path.read_bytes().decode("utf-8"))["cells"]
        if not (isinstance(listed, list) and all(isinstance(n, str) for n in listed)):
            raise TypeError(f"`cells` is {type(listed).__name__}, not a list of names")
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as err:
        warnings.warn(f"{path}: unreadable ({type(err).__name__}: {err}); reading every "
                      f"cell under {sweep_dir}", ResultFileWarning, stacklevel=3)
        return sorted(m.parent for m in sweep_dir.glob("*/meta.json"))
    return [sweep_dir / name for name in listed if (sweep_dir / name / "meta.json").is_file()]


def find_cells(paths: Iterable[str | Path]) -> list[Path]:
    """Cell directories under `paths` (each a cell, a sweep, or a results tree). Inside a
    sweep directory (one with sweep.json) only the cells its sweep.json lists count."""
    cells: list[Path] = []
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise FileNotFoundError(f"no results at {p}")
        if (p / "meta.json").is_file():
            cells.append(p)
            continue
        sweeps = {s.parent for s in p.rglob("sweep.json")}
        for sweep_dir in sweeps:
            cells.extend(_sweep_cells(sweep_dir))
        cells.extend(m.parent for m in p.rglob("meta.json")
                     if not any(m.is_relative_to(s) for s in sweeps))
    return sorted(set(cells))


_META_COLUMNS = (*CELL_KEYS, "status")


def _skipped(err: ResultFileError) -> None:
    warnings.warn(f"{err}: cell skipped (the next run of its sweep measures it again)",
                  ResultFileWarning, stacklevel=3)


def load_records(paths: Iterable[str | Path]) -> list[CellRecord]:
    """The record of every cell under `paths` (bench.results.record); SchemaError naming
    the file for a cell of another schema version or with a key missing. A meta.json
    that cannot be read is skipped with a ResultFileWarning naming it."""
    records = []
    for cell_dir in find_cells(paths):
        try:
            record = read_record(cell_dir)
        except SchemaError:
            raise
        except ResultFileError as err:
            _skipped(err)
            continue
        assert record is not None  # find_cells found its meta.json
        records.append(record)
    return records


def load_results(paths: Iterable[str | Path], include_failed: bool = False) -> pd.DataFrame:
    """One tidy DataFrame (one row per cell x rank x step) over any set of
    cells, sweeps or result trees, with the cell's identity (scenario, mode,
    bits, launcher, link rate, ...) as columns. A finished cell whose metrics.csv
    cannot be read is skipped with a ResultFileWarning naming it."""
    frames = []
    for record in load_records(paths):
        if not record.ok and not include_failed:
            continue
        if not (record.cell_dir / "metrics.csv").is_file() and not record.ok:
            continue  # a failed cell need not have metrics
        try:
            check_digests(record)
            frame = read_metrics(record.cell_dir)
        except ResultFileError as err:
            _skipped(err)
            continue
        cell = record.cell.to_dict()
        for col in CELL_KEYS:
            frame[col] = cell[col]
        frame["status"] = record.status
        frame["cell_dir"] = str(record.cell_dir)
        frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=list(METRIC_COLUMNS) + list(_META_COLUMNS))
    return pd.concat(frames, ignore_index=True)


# The line a worker's failure ends with (aqsgd.train.worker.main): its exception, with
# notes naming the mode and the plug-in it ran in.
_WORKER_FAILED = re.compile(r"^aqsgd\.train\.worker: .*? failed: (?P<error>.+)$")


def last_error(log: str) -> str:
    """The error a rank's log text ends with: the worker's own failure line
    ('ValueError: cache rows must ... [in decode of activation mode 'x' (plug-in ...)]'),
    else the last line of its last traceback; '' when it has neither."""
    lines = log.splitlines()
    for line in reversed(lines):
        found = _WORKER_FAILED.match(line)
        if found:
            return found["error"]
    starts = [k for k, line in enumerate(lines) if line.startswith("Traceback (most recent")]
    if not starts:
        return ""
    after = [line for line in lines[starts[-1] + 1:] if line and not line[0].isspace()]
    return after[-1] if after else ""


def log_tail(path: str | Path, lines: int = 30) -> str:
    """The last `lines` lines of a log file ('' when it does not exist)."""
    path = Path(path)
    if not path.is_file():
        return ""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - 64 * 1024))
        text = f.read().decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])
