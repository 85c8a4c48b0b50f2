"""Links that change during a run: a link's schedule of phases, as data, and the trace
files a schedule may come from.

    link:
      rate_mbit: 50                          # the link outside its schedule (probe, set-up)
      schedule:
        loop: false                          # true: start again after the last phase
        phases:
          - {duration_s: 60, rate_mbit: 25, delay_ms: 20}
          - {duration_s: 5, down: true}      # an outage: the link drops every packet
    # or: schedule: {trace: traces/halving.csv, loop: true}   # t_s,rate_mbit[,delay_ms,loss_pct]
    #     schedule: {mahimahi: traces/cell.up, bin_ms: 1000} # Mahimahi packet-delivery trace

A value a phase leaves out is the link's own. Every mistake raises a specfile SpecError
naming the field (and the trace file, line and value). The trace formats and the rules
of a schedule: docs/changing-links.md, "Schedules and trace files".
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.net.scenario_file import (
    MAX_DELAY_MS,
    MAX_LOSS_PCT,
    MAX_OUTAGE_S,
    MAX_PHASE_S,
    MAX_PHASES,
    MAX_RATE_MBIT,
    MIN_RATE_MBIT,
    ScheduleEntry,
)
from specfile import SpecError

__all__ = ["MAHIMAHI_PACKET_BYTES", "LinkSchedule", "Phase", "PhaseStart", "bounded_number",
           "read_csv_trace",
           "read_mahimahi_trace", "schedule_from_entry"]

MAHIMAHI_PACKET_BYTES = 1500  # what one delivery opportunity of mm-link carries


def bounded_number(field: str, value: Any, lo: float, hi: float, unit: str, *,
                   open_lo: bool = False) -> float:
    """`value` as a float in [lo, hi] (`open_lo`: (lo, hi]), else a SpecError naming
    `field` (bool, an int subclass, is refused)."""
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or value > hi or value < lo \
            or (open_lo and value == lo):
        bound = f"> {lo:g}" if open_lo else f">= {lo:g}"
        raise SpecError.at(field, f"a number {bound} and <= {hi:g} ({unit})", value)
    return float(value)


@dataclass(frozen=True)
class Phase:
    """One stretch of a link's schedule: for `duration_s` seconds the link has these
    values (None: the link's own); `down`: it carries nothing (an outage)."""

    duration_s: float
    rate_mbit: float | None = None
    delay_ms: float | None = None
    jitter_ms: float | None = None
    loss_pct: float | None = None
    down: bool = False

    def __post_init__(self) -> None:
        limit = MAX_OUTAGE_S if self.down is True else MAX_PHASE_S
        object.__setattr__(self, "duration_s", bounded_number("duration_s", self.duration_s, 0.0,
                                                       limit, "s", open_lo=True))
        for name, lo, hi, unit in (("rate_mbit", MIN_RATE_MBIT, MAX_RATE_MBIT, "Mbit/s"),
                                   ("delay_ms", 0.0, MAX_DELAY_MS, "ms"),
                                   ("jitter_ms", 0.0, MAX_DELAY_MS, "ms"),
                                   ("loss_pct", 0.0, MAX_LOSS_PCT, "percent")):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, bounded_number(name, value, lo, hi, unit))
        if not isinstance(self.down, bool):
            raise SpecError.at("down", "true or false", self.down)
        if self.down and self.rate_mbit is not None:
            raise SpecError.at("rate_mbit", "no rate on a down phase (it carries nothing)",
                               self.rate_mbit)

    def changes(self) -> dict[str, float]:
        """The link values this phase sets (the others are the link's own)."""
        return {k: getattr(self, k) for k in ("rate_mbit", "delay_ms", "jitter_ms", "loss_pct")
                if getattr(self, k) is not None}

    def to_dict(self) -> dict:
        return {"duration_s": self.duration_s, **self.changes(), "down": self.down}


@dataclass(frozen=True)
class PhaseStart:
    """Phase `index` of a schedule begins `t_s` seconds after the schedule's start
    (`lap`: how many times a looping schedule has gone round before)."""

    t_s: float
    index: int
    lap: int
    phase: Phase


@dataclass(frozen=True)
class LinkSchedule:
    """A link's phases in order; `loop`: start again after the last; `source`: where they
    came from ("phases", or the trace file's path as written)."""

    phases: tuple[Phase, ...]
    loop: bool = False
    source: str = "phases"

    def __post_init__(self) -> None:
        if not 1 <= len(self.phases) <= MAX_PHASES:
            raise SpecError.at("phases", f"1 to {MAX_PHASES} phases", len(self.phases))
        if not self.loop and self.phases[-1].down:
            raise SpecError.at(f"phases[{len(self.phases) - 1}].down",
                               "a last phase that is up (a schedule that does not loop "
                               "holds its last phase until the run ends)", True)

    @property
    def duration_s(self) -> float:
        """One pass over the phases, in seconds."""
        return sum(p.duration_s for p in self.phases)

    def starts(self, until_s: float = math.inf) -> Iterator[PhaseStart]:
        """Every phase start before `until_s` seconds, in time order (a looping schedule
        goes round until then; the first phase starts at 0)."""
        t, lap = 0.0, 0
        while t < until_s:
            for k, phase in enumerate(self.phases):
                if t >= until_s:
                    return
                yield PhaseStart(t, k, lap, phase)
                t += phase.duration_s
            if not self.loop:
                return
            lap += 1

    def outages(self, until_s: float) -> list[tuple[float, float]]:
        """(start s, length s) of every down phase that starts before `until_s`."""
        return [(s.t_s, s.phase.duration_s) for s in self.starts(until_s) if s.phase.down]

    @property
    def longest_outage_s(self) -> float:
        return max((p.duration_s for p in self.phases if p.down), default=0.0)

    def to_dict(self) -> dict:
        return {"source": self.source, "loop": self.loop, "duration_s": self.duration_s,
                "phases": [p.to_dict() for p in self.phases]}


# -- trace files ---------------------------------------------------------------------
CSV_COLUMNS = ("t_s", "rate_mbit", "delay_ms", "loss_pct")


def _trace_text(path: Path, field: str, shown: str) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError.at(field, f"a readable UTF-8 trace file ({e})", shown) from None


def _trace_error(field: str, shown: str, line: int, column: str, expected: str,
                 value: Any) -> SpecError:
    return SpecError(f"trace file {shown} line {line}, column {column}: expected {expected}, "
                     f"got {value!r}", field)


def read_csv_trace(path: Path, *, field: str = "trace", shown: str | None = None,
                   loop: bool = False) -> LinkSchedule:
    """The schedule a CSV trace file describes (see module doc)."""
    shown = shown or str(path)
    rows: list[tuple[int, list[float | None]]] = []
    width = len(CSV_COLUMNS)  # the most cells a row may have: the header's columns
    for n, text in enumerate(_trace_text(path, field, shown), start=1):
        cells = [c.strip() for c in text.split(",")]
        if not text.strip() or text.lstrip().startswith("#"):
            continue
        if not rows and cells == list(CSV_COLUMNS[:len(cells)]):
            width = len(cells)
            continue  # the header
        if not 2 <= len(cells) <= len(CSV_COLUMNS):
            raise _trace_error(field, shown, n, "(all)", f"2 to 4 columns "
                               f"{','.join(CSV_COLUMNS)}", text)
        if len(cells) > width:  # a cell the header does not name
            raise _trace_error(field, shown, n, "(all)", f"at most the header's {width} "
                               f"columns {','.join(CSV_COLUMNS[:width])}", text)
        values: list[float | None] = []
        for column, cell in zip(CSV_COLUMNS, cells, strict=False):
            try:
                number = float(cell)
            except ValueError:
                raise _trace_error(field, shown, n, column, "a number", cell) from None
            if not math.isfinite(number) or number < 0:
                raise _trace_error(field, shown, n, column, "a finite number >= 0", cell)
            values.append(number)
        values += [None] * (len(CSV_COLUMNS) - len(values))
        if rows and values[0] <= rows[-1][1][0]:
            raise _trace_error(field, shown, n, "t_s", f"a time after the row before "
                               f"({rows[-1][1][0]:g} s)", cells[0])
        if not rows and values[0] != 0:
            raise _trace_error(field, shown, n, "t_s", "0 on the first row", cells[0])
        rows.append((n, values))
    if len(rows) < 2:
        raise SpecError.at(field, f"a trace of at least 2 rows in {shown} (the last row "
                           f"holds as long as the one before it)", len(rows))
    phases = []
    for k, (n, (t, rate, delay, loss)) in enumerate(rows):
        end = rows[k + 1][1][0] if k + 1 < len(rows) else 2 * t - rows[k - 1][1][0]
        down = rate == 0
        try:
            phases.append(Phase(end - t, None if down else rate, delay, None, loss, down))
        except SpecError as e:
            column = "t_s" if e.field == "duration_s" else e.field
            raise SpecError(f"trace file {shown} line {n}, column {column}: {e.text}",
                            field) from None
    try:
        return LinkSchedule(tuple(phases), loop, shown)
    except SpecError as e:
        raise SpecError(f"trace file {shown}: {e.text}", field) from None


def read_mahimahi_trace(path: Path, bin_ms: int, *, field: str = "mahimahi",
                        shown: str | None = None, loop: bool = True) -> LinkSchedule:
    """The schedule of a Mahimahi packet-delivery trace read in bins of `bin_ms` (see
    module doc)."""
    shown = shown or str(path)
    stamps: list[int] = []
    for n, text in enumerate(_trace_text(path, field, shown), start=1):
        if not text.strip():
            continue
        try:
            ms = int(text.strip())
        except ValueError:
            raise _trace_error(field, shown, n, "ms", "an integer time in ms",
                               text.strip()) from None
        if ms < 0 or (stamps and ms < stamps[-1]):
            raise _trace_error(field, shown, n, "ms", f"a time >= "
                               f"{stamps[-1] if stamps else 0} ms", ms)
        stamps.append(ms)
    if not stamps or stamps[-1] == 0:
        raise SpecError.at(field, f"a trace in {shown} whose last time stamp (its period) "
                           f"is above 0 ms", stamps[-1] if stamps else "(empty)")
    period_ms = stamps[-1]
    n_bins = math.ceil(period_ms / bin_ms)
    counts = [0] * n_bins
    for ms in stamps:
        counts[min(ms // bin_ms, n_bins - 1)] += 1
    phases: list[Phase] = []
    for k, count in enumerate(counts):
        length_ms = min(bin_ms, period_ms - k * bin_ms)
        rate = count * MAHIMAHI_PACKET_BYTES * 8 / (length_ms / 1e3) / 1e6
        rate = None if count == 0 else max(rate, MIN_RATE_MBIT)
        if phases and phases[-1].rate_mbit == rate:
            last = phases.pop()
            length_ms += last.duration_s * 1e3
        phases.append(Phase(length_ms / 1e3, rate, down=rate is None))
    try:
        return LinkSchedule(tuple(phases), loop, shown)
    except SpecError as e:
        raise SpecError(f"trace file {shown}: {e.text}", field) from None


def schedule_from_entry(entry: ScheduleEntry, directory: Path) -> LinkSchedule:
    """The schedule a scenario file's `schedule:` entry gives; trace paths relative to
    `directory` (the scenario file's)."""
    if entry.phases is not None:
        phases = []
        for k, p in enumerate(entry.phases):
            try:
                phases.append(Phase(p.duration_s, p.rate_mbit, p.delay_ms, p.jitter_ms,
                                    p.loss_pct, p.down))
            except SpecError as e:
                raise e.within(f"phases[{k}]") from None
        return LinkSchedule(tuple(phases), entry.loop)
    if entry.trace is not None:
        return read_csv_trace(directory / entry.trace, shown=entry.trace, loop=entry.loop)
    return read_mahimahi_trace(directory / entry.mahimahi, entry.bin_ms, shown=entry.mahimahi,
                               loop=entry.loop)
