"""The suite from Python, for notebooks and scripts: run one cell or a sweep, read the
result files as pandas DataFrames, compare two runs. docs/api.md walks through it.

    from bench import api
    row = api.run_cell("100mbps", "aqsgd:2/4", "results/nb", launcher="local", steps=2)
    table = api.summarize(["results/nb"])        # one row per cell (summary.csv's columns)
    metrics = api.load_results(["results/nb"])   # one row per rank per step
    records = api.load_records(["results/nb"])   # each cell's meta.json, typed
    result = api.compare("results/before", "results/after", metric="bytes")

The names in __all__ are the stable surface; the modules they come from may move. A run
needs what `bench run` needs: root and `ip netns` for shaped links (launcher "auto" or
"netns"); launcher "local" runs anywhere, unshaped. Runs raise ValueError for bad input
before anything starts, and never for a cell that fails: its row says `status`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from aqsgd.compress.registry import load_plugins
from bench.harness.modes import ModeSpec, parse_mode
from bench.harness.preflight import load_checked_sweep as load_sweep
from bench.harness.run import run_sweep as _run_sweep
from bench.harness.sweep import SweepSpec, Workload
from bench.net.scenario import available_scenarios
from bench.report.compare import Comparison
from bench.report.compare import compare_results as compare
from bench.report.summary import summarize
from bench.results.files import load_records, load_results
from bench.results.record import CellRecord

__all__ = ["CellRecord", "Comparison", "ModeSpec", "SweepSpec", "Workload", "compare",
           "load_plugins", "load_records", "load_results", "load_sweep", "parse_mode",
           "run_cell", "run_sweep", "scenarios", "summarize"]


def run_sweep(sweep: SweepSpec | str | Path, out: str | Path, *, launcher: str = "auto",
              fresh: bool = False, quiet: bool = True,
              echo: Callable[[str], None] = print) -> pd.DataFrame:
    """Run every unfinished cell of `sweep` (a SweepSpec, or a sweep file's path: see
    load_sweep) into the directory `out`, and return its summary (summarize: one row per
    cell, failed cells with status 'failed' and empty numbers). Cells finished earlier
    by a run of the same identity are kept (`fresh`: measure them again). `launcher`:
    auto, netns, docker, local or ssh; `quiet`: no progress bar; `echo`: where the run's
    lines go."""
    spec = sweep if isinstance(sweep, SweepSpec) else load_sweep(sweep)
    _run_sweep(spec, Path(out), launcher=launcher, fresh=fresh, quiet=quiet, echo=echo)
    return summarize([out])


def run_cell(scenario: str | Path, mode: str | ModeSpec, out: str | Path, *,
             launcher: str = "auto", fresh: bool = False, quiet: bool = True,
             echo: Callable[[str], None] = print, **workload) -> pd.Series:
    """Run one cell, `mode` (the command line's spelling, 'aqsgd:2/4') on `scenario` (a
    name in scenarios/ or a YAML path), into the directory `out`; its summary row.

    `workload`: Workload's fields (steps, stages, seed, replicas, lr, ...:
    `help(api.Workload)`), the others at Workload's defaults (2 stages of the tiny preset),
    as in a sweep file; a run_sweep of the same workload measures the same cell. No fp32
    reference runs with it (run_sweep a SweepSpec for speed-ups); launcher, fresh, quiet
    and echo as for run_sweep."""
    spec = SweepSpec(name=Path(scenario).stem, scenarios=(str(scenario),),
                     modes=(mode if isinstance(mode, ModeSpec) else parse_mode(mode),),
                     workload=Workload(**workload), gc_reference=False)
    outcome = _run_sweep(spec, Path(out), launcher=launcher, fresh=fresh, quiet=quiet,
                         echo=echo)[-1]
    summary = summarize([out])
    return summary[summary["cell"] == outcome.name].iloc[0]


def scenarios() -> list[str]:
    """The names of the shipped scenarios (scenarios/*.yaml), for run_cell and SweepSpec;
    a scenario file elsewhere is named by its path."""
    return available_scenarios()
