"""What the chaos sweep checks once its last harness run ended, and its table
(bench.harness.chaos runs the faults).

    problems = check_sweep_after(after)     # [] when every guarantee held
    write_report(out, events, problems)     # OUT/chaos.md (the table) and OUT/chaos.json

The guarantees (docs/robustness.md): every cell complete and correct (its files
validate, its bytes equal the other seeds' of its mode) or failed with its reason; no
finished cell lost or changed; nothing of the sweep left running or shaped; each fault
handled as the harness promises (a killed worker or a dead link fails its cell with its
reason, a killed harness's lock is taken over, a cut file is measured again, a full
results folder stops the run without touching a finished cell).
"""

from __future__ import annotations

import hashlib
import json
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from bench.harness.regress import BASELINE_DIR, BYTE_COLUMNS
from bench.harness.sweep import SweepSpec
from bench.launch.choice import LauncherChoice
from bench.report.markdown import markdown_table
from bench.report.summary import summarize
from bench.report.tables import text_table
from bench.results.files import ResultFileWarning, load_results

__all__ = ["After", "Event", "check_sweep_after", "digests", "table_rows", "write_report"]

HEADERS = ("fault", "run", "cell", "at s", "what the cell recorded", "what was left")


@dataclass
class Event:
    """One fault: when (s after the chaos sweep started), in which harness run (0:
    between runs) and cell, what the cell recorded, what was left (before any cleanup)."""

    fault: str
    run: int
    cell: str
    at_s: float
    recorded: str
    left: str = ""
    down_s: float | None = None  # a link's time down
    gone: dict | None = None  # after a harness kill: s until no process / no link
    left_detail: dict = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return self.fault.split(" (")[0]


@dataclass
class After:
    """Everything the final check reads."""

    spec: SweepSpec
    results: Path
    choice: LauncherChoice
    events: list[Event]
    finished_before: dict[str, str]  # cell -> digests of its files, before the 2nd run
    commits: list[str]  # HEAD at each harness run: a new commit measures every cell anew
    logs: list[Path]  # harness-N.log
    final_code: int
    final_left: str
    timeout_s: float
    strict: bool  # a killed harness's workers and links must go on their own


def digests(cell_dir: Path) -> str:
    """One hash over a cell's meta.json and the files it vouches for."""
    h = hashlib.sha256()
    for name in ("meta.json", "metrics.csv", "peers.csv"):
        h.update((cell_dir / name).read_bytes())
    return h.hexdigest()


def _fault_problems(after: After) -> list[str]:
    problems = []
    second = after.logs[1].read_text(errors="replace") if len(after.logs) > 1 else ""
    for ev in after.events:
        where = f"{ev.fault} in {ev.cell}"
        if ev.kind in ("worker killed", "link down") and not ev.left.startswith("0 of"):
            problems.append(f"{where}: {ev.left} after it was recorded")
        if ev.kind == "worker killed" and not (ev.recorded.startswith("failed: rank")):
            problems.append(f"{where}: the cell recorded {ev.recorded!r}, not a failed rank")
        if ev.kind == "link down":
            if not (ev.recorded.startswith("failed") and "timeout" in ev.recorded):
                problems.append(f"{where}: the cell recorded {ev.recorded!r}, not a timeout")
            if ev.down_s is None or ev.down_s <= after.timeout_s:
                problems.append(f"{where}: down {ev.down_s} s, not longer than the cell's "
                                f"timeout {after.timeout_s:g} s")
        if ev.kind == "harness killed":
            if "took over the lock" not in second:
                problems.append(f"{where}: the resumed run did not take over its lock "
                                f"({after.logs[1]})")
            late = ev.left_detail.get("at_deadline", {})
            if after.strict and any(late.values()):
                problems.append(f"{where}: left before any cleanup: {ev.left}")
        if ev.kind.endswith("truncated between runs") and \
                f"measure {ev.cell} again: unreadable" not in second:
            problems.append(f"{where}: the resumed run did not measure it again "
                            f"({after.logs[1]})")
        if ev.kind == "results folder full" and not ev.left.startswith("0 processes, 0 "
                                                                        "namespaces, 0 qdiscs"):
            problems.append(f"{where}: the stopped run left {ev.left}")
    return problems


def _cell_problems(after: After) -> list[str]:
    from bench.harness.run import refusals

    problems = [f"{name}: not complete at the end: {why}"
                for name, why in refusals(after.spec, after.results, after.choice).items() if why]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResultFileWarning)
        try:
            frame = load_results([after.results])
        except ResultFileWarning as err:
            return [*problems, f"a result file does not read: {err}"]
    train = frame[frame["kind"] == "train"]
    per_mode = train.groupby(["mode", "fw_bits", "bw_bits", "rank", "step"], dropna=False)
    varying = per_mode["bytes_sent_total"].nunique()
    for key in varying[varying > 1].index:
        problems.append(f"mode {key[:3]} rank {key[3]} step {key[4]}: bytes sent differ "
                        f"between its seeds' cells")
    problems += _byte_problems(after.results)
    same_code = len(set(after.commits)) == 1  # else every cell was measured anew
    for name, before in after.finished_before.items():
        try:
            now = digests(after.results / name)
        except OSError as err:
            problems.append(f"{name}: finished before the faults, now lost ({err})")
            continue
        if same_code and now != before:
            problems.append(f"{name}: finished before the faults, its files changed since")
    return problems


def _byte_problems(results: Path) -> list[str]:
    """Each cell's bytes per measured step (in all and per kind) against the regression
    baseline's cell of the same mode (2 stages of the tiny preset, as here): the byte
    count is a pure function of shapes, bit widths and the schedule."""
    base = pd.read_csv(BASELINE_DIR / "regress.csv")
    base = base[base["replicas"] == 1].drop_duplicates("label").set_index("label")
    problems = []
    for _, row in summarize([results]).iterrows():
        if row["label"] not in base.index:
            continue
        for col in BYTE_COLUMNS:
            if row[col] != base.loc[row["label"], col]:
                problems.append(f"{row['cell']}: {col} {row[col]}, the regression baseline's "
                                f"{row['label']} cell sends {base.loc[row['label'], col]}")
    return problems


def check_sweep_after(after: After) -> list[str]:
    """Every broken guarantee, one line each (module doc); [] when all held."""
    problems = _fault_problems(after) + _cell_problems(after)
    if after.final_code != 0:
        problems.append(f"the last harness run exited {after.final_code} ({after.logs[-1]})")
    if after.final_left != "0 processes, 0 namespaces, 0 qdiscs":
        problems.append(f"left after the last run: {after.final_left}")
    return problems


def table_rows(events: list[Event]) -> list[list[str]]:
    return [[ev.fault, str(ev.run) if ev.run else "between", ev.cell, f"{ev.at_s:.1f}",
             ev.recorded, ev.left or "-"] for ev in events]


def write_report(out: Path, events: list[Event], problems: list[str], header: str) -> str:
    """OUT/chaos.md and OUT/chaos.json; returns the table as plain text."""
    verdict = ("every check held" if not problems else
               "broken guarantees:\n" + "\n".join(f"- {p}" for p in problems))
    (out / "chaos.md").write_text(f"# Chaos sweep\n\n{header}\n\n"
                                  f"{markdown_table(HEADERS, table_rows(events))}\n\n"
                                  f"{verdict}\n", encoding="utf-8")
    (out / "chaos.json").write_text(json.dumps({"events": [asdict(e) for e in events],
                                                "problems": problems}, indent=1) + "\n",
                                    encoding="utf-8")
    return f"{text_table(HEADERS, table_rows(events))}\n{verdict}"
