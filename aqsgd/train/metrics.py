"""Per-rank run metrics: one JSON line per optimizer step or evaluation, plus an
optional Chrome trace (chrome://tracing, ui.perfetto.dev).

    writer = MetricsWriter(output_dir, rank)   # OUTPUT_DIR/metrics/rank{R}.jsonl
    meter = StepMeter(rank)                    # times compute, coding and waits of a step
    writer.write(record)                       # {"kind": "train" | "eval", "step", ...}

The record's fields, units and meaning (train and eval records, `warmup`, `end_unix`,
the byte counts and `bits_sent`, the adaptive widths' `adaptive`, the time accounting of
`compute_s`, `compress_s`, `comm_wait_s` and `dp_sync_s`, the rank's `peak_rss_bytes`)
are the metrics table of docs/results-schema.md; byte counts are exactly numel *
element_size of every tensor handed to isend or filled by irecv, headers included.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

__all__ = ["KINDS", "StepMeter", "MetricsWriter", "peak_rss_bytes"]

KINDS = ("activation", "gradient", "dp")
_CATEGORIES = ("compute", "compress", "comm_wait", "dp_sync")
# getrusage's ru_maxrss unit: kibibytes on Linux, bytes on macOS
_MAXRSS_UNIT = 1 if sys.platform == "darwin" else 1024
_STATUS = Path("/proc/self/status")
_peak = 0  # the largest VmHWM read so far in this process


def peak_rss_bytes() -> int:
    """This process's peak resident set so far, in bytes: the high-water mark of its
    resident memory since it started, never lowered. On Linux /proc/self/status's VmHWM,
    which belongs to the process's own image: getrusage's ru_maxrss also keeps the peak
    of the image it was forked from before exec, so a rank started by a large parent (a
    test process, a harness) would read at least the parent's size. Elsewhere ru_maxrss."""
    global _peak
    if sys.platform.startswith("linux"):
        # VmHWM's per-thread counters are synced lazily: it can read a few hundred kB
        # lower than before, so the reading kept is the largest so far
        lines = [x for x in _STATUS.read_text().splitlines() if x.startswith("VmHWM:")]
        if not lines:
            raise RuntimeError(f"{_STATUS}: no VmHWM line")
        _peak = max(_peak, int(lines[0].split()[1]) * 1024)  # kB
        return _peak
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * _MAXRSS_UNIT


class StepMeter:
    """Accumulates one step's times, bytes and (optionally) trace spans."""

    def __init__(self, rank: int, trace: bool = False):
        self.rank = rank
        self.trace_enabled = trace
        self.events: list[dict] = []
        self._t0 = time.perf_counter()  # trace time origin
        self.reset()

    def reset(self) -> None:
        self.seconds = dict.fromkeys(_CATEGORIES, 0.0)
        self.bytes_sent = dict.fromkeys(KINDS, 0)
        self.bytes_recv = dict.fromkeys(KINDS, 0)
        self.by_peer: dict[int, dict[str, int]] = defaultdict(lambda: {"sent": 0, "recv": 0})
        self.bits_sent: dict[str, list[int]] = {"activation": [], "gradient": []}
        self.step_start = time.perf_counter()

    def now_us(self) -> float:
        return (time.perf_counter() - self._t0) * 1e6

    @contextmanager
    def span(self, category: str, name: str, track: str = "compute"):
        """Time a block; add it to `category` (None: trace only) and the trace."""
        start = time.perf_counter()
        try:
            yield
        finally:
            end = time.perf_counter()
            if category is not None:
                self.seconds[category] += end - start
            self.add_trace(name, track, (start - self._t0) * 1e6, (end - start) * 1e6, category)

    def add_trace(self, name: str, track: str, ts_us: float, dur_us: float,
                  category: str | None = None) -> None:  # fmt: skip
        """A complete event on thread `track` (compute, send or recv), times in us."""
        if self.trace_enabled:
            self.events.append(
                {"name": name, "ph": "X", "ts": ts_us, "dur": dur_us,
                 "pid": self.rank, "tid": track, "cat": category or track}
            )  # fmt: skip

    def add_bytes(self, kind: str, peer: int | None, sent: int = 0, recv: int = 0) -> None:
        if kind not in KINDS:
            raise ValueError(f"byte kind must be one of {KINDS}, got {kind!r}")
        self.bytes_sent[kind] += sent
        self.bytes_recv[kind] += recv
        if peer is not None:
            self.by_peer[peer]["sent"] += sent
            self.by_peer[peer]["recv"] += recv

    def note_bits(self, kind: str, bits: int) -> None:
        """The width of a message of `kind` this rank sends (0: no row coded)."""
        self.bits_sent[kind].append(int(bits))

    def record(self, **fields) -> dict:
        """The step's record: `fields` plus the accumulated times and bytes."""
        rec = dict(fields)
        rec.update(
            step_time_s=time.perf_counter() - self.step_start,
            end_unix=time.time(),
            compute_s=self.seconds["compute"],
            comm_wait_s=self.seconds["comm_wait"] + self.seconds["dp_sync"],
            compress_s=self.seconds["compress"],
            dp_sync_s=self.seconds["dp_sync"],
            bytes_sent=dict(self.bytes_sent),
            bytes_recv=dict(self.bytes_recv),
            bytes_by_peer={str(p): dict(v) for p, v in sorted(self.by_peer.items())},
            bits_sent={k: list(v) for k, v in self.bits_sent.items()},
            peak_rss_bytes=peak_rss_bytes(),
        )
        return rec


class MetricsWriter:
    """Appends records to OUTPUT_DIR/metrics/rank{R}.jsonl (flushed per line, so a
    crashed run keeps its steps) and writes the trace on close. `mirror` (an object
    with write(record) and close(), such as aqsgd.train.tensorboard.TensorBoardWriter)
    gets every record too, and is closed with the writer."""

    def __init__(self, output_dir: str | Path, rank: int, mirror=None):
        self.metrics_path = Path(output_dir) / "metrics" / f"rank{rank}.jsonl"
        self.trace_path = Path(output_dir) / "trace" / f"rank{rank}.json"
        self.metrics_path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.metrics_path, "w", encoding="utf-8")  # noqa: SIM115
        self._mirror = mirror

    def write(self, record: dict) -> None:
        self._file.write(json.dumps(record, sort_keys=True) + "\n")
        self._file.flush()
        if self._mirror is not None:
            self._mirror.write(record)

    def write_trace(self, events: list[dict], rank: int, stage: int, replica: int) -> None:
        self.trace_path.parent.mkdir(parents=True, exist_ok=True)
        meta = [
            {"name": "process_name", "ph": "M", "pid": rank,
             "args": {"name": f"rank {rank} (stage {stage}, replica {replica})"}}
        ]  # fmt: skip
        with open(self.trace_path, "w", encoding="utf-8") as f:
            json.dump({"traceEvents": meta + events, "displayTimeUnit": "ms"}, f)

    def close(self) -> None:
        self._file.close()
        if self._mirror is not None:
            self._mirror.close()
