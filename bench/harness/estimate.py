"""The time a sweep states before its first cell: the sweep file's measured rates, scaled
to this machine by the cells it already finished here.

    estimate_line(spec, todo, sweep_dir, choice)   # 'sweep NAME: 3 of 12 cells to run, ...'
    machine_factor(spec, sweep_dir)                # (wall over estimate, cells) or None
"""

from __future__ import annotations

from pathlib import Path

from bench.harness.meta import cell_dir_name
from bench.harness.sweep import CellSpec, SweepSpec
from bench.launch.choice import LauncherChoice
from bench.results.files import ResultFileError, read_record

__all__ = ["estimate_line", "machine_factor"]


def machine_factor(spec: SweepSpec, sweep_dir: Path,
                   choice: LauncherChoice | None = None) -> tuple[float, int] | None:
    """(wall time over the sweep's estimate, summed over the cells of `spec` finished in
    `sweep_dir` on `choice` (None: on the reference launcher, the names without a tag)
    by any commit, how many there were); None without timing or such cells. It scales
    the estimate to this machine, its launcher and its load."""
    if spec.timing is None:
        return None
    wall_s = estimate_s = 0.0
    count = 0
    for cell in spec.cells():
        name = cell.name if choice is None else cell_dir_name(cell, choice)
        try:
            record = read_record(sweep_dir / name)
        except ResultFileError:  # unreadable, or of another schema: not timed
            continue
        if record is not None and record.ok and record.spec_key == cell.key:
            wall_s += record.wall_s
            estimate_s += spec.timing.cell_s(cell)
            count += 1
    return (wall_s / estimate_s, count) if count and estimate_s > 0 else None


def estimate_line(spec: SweepSpec, todo: list[CellSpec], sweep_dir: Path,
                  choice: LauncherChoice | None = None) -> str:
    """'sweep NAME: N of M cells to run, about T min (...)', the time stated up front:
    the sweep file's measured rates, scaled by how long the cells already finished in
    `sweep_dir` took here (machine_factor)."""
    head = f"sweep {spec.name}: {len(todo)} of {len(spec.cells())} cells to run"
    seconds = spec.estimate_s(todo)
    if seconds is None:
        return f"{head} (no measured rates for this sweep: no time estimate)"
    t = spec.timing
    source = (f"from the rates measured on the machine the sweep was sized on: {t.start_s:g} s "
              f"a cell, {t.step_s_per_rank:g} s a step per rank, {t.eval_s_per_window:g} s "
              f"an evaluated window")
    factor = machine_factor(spec, sweep_dir, choice)
    if factor is not None:
        seconds *= factor[0]
        source += f"; x {factor[0]:.2f}, as the {factor[1]} cell(s) finished here took"
    return f"{head}, about {seconds / 60:.1f} min ({source})"
