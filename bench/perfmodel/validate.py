"""Predicted against measured step time, one row per finished cell.

    table = validate_cells([Path("results/paper")], profile)
    comm = fit_comm(cells, profile)         # the runtime's overhead and overlap, measured

Measured: the reports' statistic (the slowest rank's `step_time_s`, median over the
measured steps). A replayed cell (`compute` column 'replay:PROFILE') takes its compute
from the times its stages waited (its run config's `compute.stages`), not from the
profile's cut; `wait_overrun` says how much longer its waits ran than that. Two
predictions per cell: `predicted_s` ("in situ": the cell's own
measured compute and coding times, the network and the overlap the model's: it checks
the model of communication) and `predicted_profile_s` (compute from the profile alone,
shared over its cores: it checks the whole model). Links as the placement in meta.json
keeps them (bench.results.record), a host-limited link at its achieved rate.
docs/performance-model.md, "Validation result", says how each is built and what it
measured.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from aqsgd.train.config import config_from_dict
from bench.net.placement import LinkUse, Placement, RankPlace
from bench.perfmodel.predict import predict
from bench.perfmodel.profile import CommProfile, Profile
from bench.perfmodel.workload import StepWorkload, UnprofiledShape, step_workload
from bench.results.files import load_records, metrics_frame
from bench.results.record import CellRecord

__all__ = ["TARGET", "MeasuredCell", "measured_step_s", "load_cells", "in_situ",
           "compute_source", "step_workload_of",
           "validate_cells", "fit_comm", "worst_cell", "why_it_misses"]

TARGET = 0.10  # the validation target: within 10% of the measured step time
OVERHEAD_GRID_S = (0.0, 0.25e-3, 0.5e-3, 1e-3, 1.5e-3, 2e-3, 3e-3, 4e-3, 6e-3, 8e-3)
OVERLAP_GRID = tuple(i / 10 for i in range(11))
WAKE_GRID_S = tuple(i * 0.5e-3 for i in range(41))  # 0 .. 20 ms


def _measured(frame: pd.DataFrame) -> pd.DataFrame:
    train = frame[frame["kind"] == "train"]
    return train[~train["warmup"].astype(bool)]


def measured_step_s(frame: pd.DataFrame) -> float:
    """Median over measured steps of the slowest rank's step time (the reports' figure)."""
    m = _measured(frame)
    return float(pd.to_numeric(m["step_time_s"]).groupby(m["step"]).max().median())


@dataclass(frozen=True)
class MeasuredCell:
    name: str
    record: CellRecord
    step_s: float
    compute_s: dict[int, float]  # per rank, median over measured steps
    compress_s: dict[int, float]
    other_s: dict[int, float]  # step time outside every timed span (Python between actions)
    bytes_per_step: float  # everything every rank sent, median over measured steps


def load_cells(paths: Iterable[str | Path]) -> list[MeasuredCell]:
    """Every finished cell under `paths` with at least one measured step (each has the
    run config the harness records, the model's input)."""
    out = []
    for record in load_records(paths):
        if not record.ok:
            continue
        jsonl = sorted((record.cell_dir / "metrics").glob("rank*.jsonl"))
        frame, _ = metrics_frame(jsonl, record.name)
        m = _measured(frame)
        if m.empty:
            continue
        num = m[["rank", "step_time_s", "compute_s", "compress_s", "comm_wait_s"]].apply(
            pd.to_numeric)
        num["other_s"] = (num["step_time_s"] - num["compute_s"] - num["compress_s"]
                          - num["comm_wait_s"]).clip(lower=0.0)
        med = num.groupby("rank").median()
        sent = pd.to_numeric(m["bytes_sent_total"]).groupby(m["step"]).sum().median()
        out.append(MeasuredCell(record.name, record, measured_step_s(frame),
                                med["compute_s"].to_dict(), med["compress_s"].to_dict(),
                                med["other_s"].to_dict(), float(sent)))
    return out


def _placement(record: CellRecord) -> Placement:
    """The cell's placement with host-limited links at the rate the probe achieved."""
    p = record.placement
    # meta.json's `probe` is the launcher's ProbeRecords, every field filled ([] unprobed)
    achieved = {(r.src, r.dst): r.rate_mbit_achieved for r in record.probe if r.host_limited}
    return Placement(
        p.scenario, p.stages, p.replicas, p.n_hosts,
        tuple(RankPlace(r.rank, r.host, r.stage, r.replica, r.machine) for r in p.ranks),
        tuple(LinkUse(u.src, u.dst, u.traffic, achieved.get((u.src, u.dst), u.rate_mbit),
                      u.delay_ms, u.kind) for u in p.links),
        p.ranks_per_machine, p.within_machine)


def step_workload_of(cell: MeasuredCell, profile: Profile) -> StepWorkload:
    """The step the cell ran (its run config, its placement, the scenario's host caps),
    costed by `profile`."""
    assert cell.record.run_config is not None, "an ok cell has its run config"
    config = config_from_dict(dict(cell.record.run_config))
    scenario = cell.record.scenario
    caps = [(h.host, h.uplink_mbit, h.downlink_mbit) for h in scenario.hosts] if scenario else []
    return step_workload(config, _placement(cell.record), profile, caps)


def compute_source(cell: MeasuredCell) -> str:
    """The cell's compute setting: 'real', or 'replay:PROFILE' (its run config's)."""
    assert cell.record.run_config is not None, "an ok cell has its run config"
    return config_from_dict(dict(cell.record.run_config)).compute.source


def _coding_per_step(work: StepWorkload, s: int) -> float:
    last = s == work.stages - 1
    per_mb = ((0.0 if last else work.encode_act_s + work.decode_grad_s)
              + (0.0 if s == 0 else work.decode_act_s + work.encode_grad_s))
    return work.micro_batches * per_mb


def in_situ(work: StepWorkload, cell: MeasuredCell) -> StepWorkload:
    """`work` with each stage's compute and the coding scaled to the cell's measured
    medians (module docstring); a replayed cell's measured compute is its waits as they
    ran (what the machine's load added to them included)."""
    S, R, M = work.stages, work.replicas, work.micro_batches
    stages = []
    for s, st in enumerate(work.stage):
        model = M * (st.forward_s + st.backward_s) + st.optimizer_s
        measured = np.mean([cell.compute_s[r * S + s] + cell.other_s[r * S + s]
                            for r in range(R)])
        k = measured / model if model > 0 else 1.0
        stages.append(st.scaled(k))
    coded = sum(_coding_per_step(work, s) for s in range(S))
    measured = sum(np.mean([cell.compress_s[r * S + s] for r in range(R)]) for s in range(S))
    kc = measured / coded if coded > 0 else 1.0
    return work.replace(stage=tuple(stages), encode_act_s=work.encode_act_s * kc,
                        decode_act_s=work.decode_act_s * kc,
                        encode_grad_s=work.encode_grad_s * kc,
                        decode_grad_s=work.decode_grad_s * kc)


def _row(cell: MeasuredCell, profile: Profile) -> dict:
    c = cell.record.cell
    work = step_workload_of(cell, profile)
    alone = predict(work, profile, cores=True)
    situ = predict(in_situ(work, cell), profile, cores=False)
    return {
        "sweep": c.sweep, "cell": cell.name, "scenario": c.scenario, "mode": c.mode,
        "label": c.label, "stages": c.stages, "replicas": c.replicas,
        "rate_mbit": c.rate_mbit, "delay_ms": c.delay_ms,
        "host_limited": c.host_limited, "measured_s": cell.step_s,
        "predicted_s": situ.step_s, "error": situ.step_s / cell.step_s - 1.0,
        "predicted_profile_s": alone.step_s,
        "error_profile": alone.step_s / cell.step_s - 1.0,
        "bytes_measured": cell.bytes_per_step, "bytes_predicted": situ.bytes_per_step,
        "compute_spread": _spread(cell), "links": _links_text(work),
        "preset": c.preset, "compute_s_mean": float(np.mean(list(cell.compute_s.values()))),
        "cores": profile.cores, "compute": compute_source(cell), "schedule": work.schedule,
        "wait_overrun": _overrun(work, cell) if work.replayed else float("nan"),
    }


def _overrun(work: StepWorkload, cell: MeasuredCell) -> float:
    """A replayed cell's measured compute per step over what its stages waited, less 1
    (mean over ranks): how late the waits ended on this machine's load."""
    S, M = work.stages, work.micro_batches
    waited = [M * (st.forward_s + st.backward_s) + st.optimizer_s for st in work.stage]
    return float(np.mean([cell.compute_s[r] / waited[r % S] for r in cell.compute_s])) - 1.0


def _spread(cell: MeasuredCell) -> float:
    """Slowest over fastest rank's compute per step: how unevenly the cores were shared."""
    values = [v for v in cell.compute_s.values() if v > 0]
    return max(values) / min(values) if values else float("nan")


def _links_text(work: StepWorkload) -> str:
    rates = sorted({(w.rate_mbit, w.delay_ms) for w in work.links.values()},
                   key=lambda x: (x[0] is None, x[0] or 0.0))
    return ", ".join(f"{'unshaped' if r is None else f'{r:g}'} Mbit/s {d:g} ms"
                     for r, d in rates)


def validate_cells(paths_or_cells, profile: Profile,
                   skipped: list[str] | None = None) -> pd.DataFrame:
    """One row per cell (module docstring); `paths_or_cells`: paths, or loaded cells. A
    cell of a model shape the profile cannot cost (`UnprofiledShape`) raises, or, given a
    `skipped` list, is left out with a line there naming it and why."""
    cells = list(paths_or_cells)
    if cells and not isinstance(cells[0], MeasuredCell):
        cells = load_cells(cells)
    rows = []
    for c in cells:
        try:
            rows.append(_row(c, profile))
        except UnprofiledShape as err:
            if skipped is None:
                raise
            skipped.append(f"{c.record.cell.sweep}/{c.name}: {err}")
    table = pd.DataFrame(rows)
    if not table.empty:
        # how loaded the machine was while the cell ran: its compute per step over the
        # median of the cells of the same model and layout
        layout = table.groupby(["preset", "stages", "replicas"])["compute_s_mean"]
        table["compute_vs_layout"] = table["compute_s_mean"] / layout.transform("median")
    return table


def _fit(works: list, profile: Profile, comms: Iterable[CommProfile]) -> CommProfile:
    best = None
    for comm in comms:
        trial = profile.replace(comm=comm)
        err = float(np.mean([(predict(w, trial, cores=False).step_s / m - 1.0) ** 2
                             for w, m in works]))
        if best is None or err < best[0]:
            best = (err, comm)
    return best[1]


def fit_comm(cells: list[MeasuredCell], profile: Profile) -> CommProfile:
    """The runtime's communication constants that minimise the mean squared relative
    error of the in-situ prediction over `cells` (grids; the fp32 cells of a sweep are
    the usual choice, the other modes then test the fit): the per-message overhead and
    the overlap on the cells with at most `profile.cores` ranks, then `wake_s` on those
    with more."""
    works = [(in_situ(step_workload_of(c, profile), c), c.step_s) for c in cells]
    ranks = [w.stages * w.replicas for w, _ in works]
    cores = profile.cores or max(ranks)
    roomy = [x for x, n in zip(works, ranks, strict=True) if n <= cores]
    crowded = [x for x, n in zip(works, ranks, strict=True) if n > cores]
    unshaped = profile.comm.unshaped_rate_mbit
    comm = _fit(roomy or works, profile, (
        CommProfile(o, v, unshaped) for o, v in itertools.product(OVERHEAD_GRID_S,
                                                                  OVERLAP_GRID)))
    if crowded:
        comm = _fit(crowded, profile, (CommProfile(comm.message_overhead_s, comm.overlap,
                                                   unshaped, w) for w in WAKE_GRID_S))
    return comm


def worst_cell(table: pd.DataFrame, column: str = "error") -> pd.Series:
    return table.loc[table[column].abs().idxmax()]


def why_it_misses(row: pd.Series, cores: int | None) -> str:
    """A reading of a cell's miss from what was measured beside its step time."""
    if abs(row["error"]) <= TARGET:
        return "within the target"
    notes = []
    if row["compute_vs_layout"] > 1.3:
        notes.append(f"its compute per step was {row['compute_vs_layout']:.1f}x the median "
                     f"of the cells of its layout, so the machine was loaded while it ran: "
                     f"waits then include time descheduled, which the model does not see")
    ranks = row["stages"] * row["replicas"]
    if cores is not None and not pd.isna(cores) and ranks > cores:
        notes.append(f"{ranks} ranks share {cores} cores: a rank whose message has arrived "
                     f"may still wait for a core")
    if row["host_limited"]:
        notes.append("a link was host-limited")
    return "; ".join(notes) or "no measured cause found"

