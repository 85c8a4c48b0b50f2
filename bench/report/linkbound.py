"""What the links of a cell allow: the throughput no schedule can beat on its placement,
from the bytes each used link carried (peers.csv) and its rate (meta.json's placement).

    from bench.report.linkbound import cell_bound
    b = cell_bound(record, samples_per_step=64, measured_samples_s=105.6)  # read_record's
    print(b.text())

Two bounds, both leaving compute out: the slowest used link (its bytes per step at its
rate) and the schedule bound (GPipe: the forward and backward phases one after the
other; 1F1B: the larger), delay included. Rates are the scenario's payload rates,
bytes what the workers handed to the transport. The arithmetic:
docs/results-schema.md, "What the links allow".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from bench.report.markdown import markdown_table
from bench.report.timeline import scheduled_rates
from bench.results.record import CellRecord, PlacedLink

__all__ = ["LinkBound", "bound_lines", "cell_bound", "fp32_bounds"]


@dataclass(frozen=True)
class LinkBound:
    """The link bounds of one cell (module docstring); times in seconds per step."""

    cell: str
    schedule: str
    micro_batches: int
    busiest: tuple[int, int]  # (src, dst) hosts of the slowest used link
    busiest_rate_mbit: float
    busiest_bytes_per_step: float
    busiest_s: float
    schedule_s: float  # the schedule-aware bound of one step
    samples_per_step: float
    measured_samples_s: float
    # a scheduled link: busiest_rate_mbit is its time-weighted mean, this its slowest phase
    busiest_slowest_phase_mbit: float | None = None

    def link_text(self) -> str:
        """'1 -> 2 (50 Mbit/s)', or under a schedule 'mean 46.9 Mbit/s over its
        schedule, slowest phase 12.5'."""
        src, dst = self.busiest
        if self.busiest_slowest_phase_mbit is None:
            return f"{src} -> {dst} ({self.busiest_rate_mbit:g} Mbit/s)"
        return (f"{src} -> {dst} (mean {self.busiest_rate_mbit:.3g} Mbit/s over its schedule, "
                f"slowest phase {self.busiest_slowest_phase_mbit:g})")

    @property
    def busiest_samples_s(self) -> float:
        return self.samples_per_step / self.busiest_s

    @property
    def schedule_samples_s(self) -> float:
        return self.samples_per_step / self.schedule_s

    def text(self) -> str:
        """The arithmetic, one sentence per bound."""
        return (
            f"{self.cell}: slowest used link {self.link_text()} carries "
            f"{self.busiest_bytes_per_step / 1e6:.3f} MB per step = "
            f"{self.busiest_s * 1e3:.1f} ms, so at most {self.samples_per_step:g} / "
            f"{self.busiest_s:.4f} s = {self.busiest_samples_s:.1f} samples/s; "
            f"{self.schedule} with {self.micro_batches} micro-batches must also fill and "
            f"drain the pipeline: a step >= {self.schedule_s * 1e3:.1f} ms, at most "
            f"{self.schedule_samples_s:.1f} samples/s. Measured {self.measured_samples_s:.1f} "
            f"samples/s ({self.measured_samples_s / self.schedule_samples_s:.0%} of the "
            f"schedule bound).")


def _link_bytes(cell_dir: Path, host_of: dict[int, int]) -> dict[tuple[int, int], float]:
    """Mean bytes per measured step on each directed host link (peers.csv, steps the
    sending rank did not flag as warm-up in metrics.csv)."""
    peers = pd.read_csv(cell_dir / "peers.csv")
    metrics = pd.read_csv(cell_dir / "metrics.csv")
    train = metrics[metrics["kind"] == "train"]
    measured = train.loc[~train["warmup"].astype(bool), ["rank", "step"]]
    peers = peers[peers["kind"] == "train"].merge(measured, on=["rank", "step"])
    if peers.empty:
        return {}
    steps = peers["step"].nunique()
    sent = peers.groupby(["rank", "peer"])["bytes_sent"].sum() / steps
    out: dict[tuple[int, int], float] = {}
    for (rank, peer), nbytes in sent.items():
        key = (host_of[int(rank)], host_of[int(peer)])
        out[key] = out.get(key, 0.0) + float(nbytes)
    return out


def _phase_s(times: list[float], delays_s: list[float], micro_batches: int) -> float:
    """sum(t) + (M - 1) max(t) + the one-way delays, for one direction's chain."""
    if not times:
        return 0.0
    return sum(times) + (micro_batches - 1) * max(times) + sum(delays_s)


def cell_bound(record: CellRecord, samples_per_step: float,
               measured_samples_s: float) -> LinkBound | None:
    """The bounds of one finished cell, None when the cell ran unshaped (a local run: the
    scenario's rates were never applied), no used pipeline link is shaped, or none
    carried bytes."""
    if not record.cell.shaped:
        return None
    placement, pipeline = record.placement, record.pipeline
    assert pipeline is not None, "an ok cell has its run config (bench.results.record)"
    host_of = {r.rank: r.host for r in placement.ranks}
    stage_of = {r.host: (r.stage, r.replica) for r in placement.ranks}
    nbytes = _link_bytes(record.cell_dir, host_of)
    # a scheduled link at its time-weighted mean rate: what it carried over the run
    scheduled = scheduled_rates(record)
    rate_of = {(link.src, link.dst): scheduled.get((link.src, link.dst),
                                                    (link.rate_mbit, None))
               for link in placement.links}
    m = pipeline.micro_batches
    busiest: PlacedLink | None = None
    worst_s, phases = 0.0, []
    for replica in range(placement.replicas):
        fwd, fwd_delay, bwd, bwd_delay = [], [], [], []
        for link in placement.links:
            src, dst = link.src, link.dst
            (s_src, r_src), (s_dst, r_dst) = stage_of[src], stage_of[dst]
            if link.rate_mbit is None or r_src != replica or r_dst != replica:
                continue  # unshaped, or a data-parallel pair
            rate = rate_of[(src, dst)][0]
            seconds = nbytes.get((src, dst), 0.0) * 8 / (rate * 1e6) if rate else math.inf
            if seconds > worst_s:
                busiest, worst_s = link, seconds
            chain = (fwd, fwd_delay) if s_dst == s_src + 1 else (bwd, bwd_delay)
            chain[0].append(seconds / m)
            chain[1].append(link.delay_ms / 1e3)
        forward, backward = _phase_s(fwd, fwd_delay, m), _phase_s(bwd, bwd_delay, m)
        phases.append(forward + backward if pipeline.schedule == "gpipe"
                      else max(forward, backward))
    if busiest is None:
        return None
    rate, slowest = rate_of[(busiest.src, busiest.dst)]
    return LinkBound(
        cell=record.name, schedule=pipeline.schedule, micro_batches=m,
        busiest=(busiest.src, busiest.dst), busiest_rate_mbit=rate,
        busiest_slowest_phase_mbit=slowest,
        busiest_bytes_per_step=nbytes[(busiest.src, busiest.dst)], busiest_s=worst_s,
        schedule_s=max(phases), samples_per_step=samples_per_step,
        measured_samples_s=measured_samples_s)


def fp32_bounds(records: list[CellRecord], summary: pd.DataFrame) -> list[LinkBound]:
    """The bounds of every finished fp32 cell on a shaped link (summary: bench.report.
    summary.summarize of the same cells)."""
    rows = []
    by_cell = summary.set_index("cell")
    for record in records:
        if not record.ok or record.cell.mode != "fp32" or record.name not in by_cell.index:
            continue
        row = by_cell.loc[record.name]
        measured = float(row["throughput_samples_s"])
        bound = cell_bound(record, float(row["samples_per_step"]), measured)
        if bound is not None:
            rows.append(bound)
    return rows


def bound_lines(records: list[CellRecord], summary: pd.DataFrame) -> list[str]:
    """The report's section: one row per finished fp32 cell on a shaped link."""
    rows = fp32_bounds(records, summary)
    if not rows:
        return []
    headers = ["cell", "slowest used link", "MB/step on it", "link time (ms)",
               "bound (samples/s)", "schedule bound (samples/s)", "measured (samples/s)",
               "measured / schedule bound"]
    table = [[b.cell, b.link_text(),
              f"{b.busiest_bytes_per_step / 1e6:.3f}", f"{b.busiest_s * 1e3:.1f}",
              f"{b.busiest_samples_s:.1f}", f"{b.schedule_samples_s:.1f}",
              f"{b.measured_samples_s:.1f}", f"{b.measured_samples_s / b.schedule_samples_s:.0%}"]
             for b in rows]
    return ["## What the links allow (fp32)", "", markdown_table(headers, table), "",
            *[b.text() for b in rows], "",
            "Both bounds leave compute out, and with replicas the data-parallel exchange "
            "after the backward pass as well, so a measured throughput above either would "
            "mean the bytes or the shaping are wrong (bench.report.linkbound says how they "
            "are computed).", ""]
