"""The sweep's progress bar (rich): work done of work to run, elapsed time, time left.

    with Progress(total=sum(weights), quiet=False) as bar:
        bar.describe("100mbps: bringing up 2 hosts")
        bar.advance("100mbps__fp32", weight)

Work is counted in each cell's estimated seconds (SweepSpec.timing), or one per cell
where the sweep has no measured rates, so the time left reads right when long cells
(several replicas, many epochs) and short ones mix.
"""

from __future__ import annotations

from rich.progress import (
    BarColumn,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as RichProgress

__all__ = ["Progress"]


class Progress:
    """A progress bar over the cells to run; `quiet` hides it."""

    def __init__(self, total: float, quiet: bool):
        columns = [TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                   TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn()]
        # time left from the average rate since the start: a cell takes tens of seconds,
        # longer than rich's default 30 s window of recent progress
        self._bar = RichProgress(*columns, disable=quiet, speed_estimate_period=24 * 3600)
        self._task = self._bar.add_task("sweep", total=total)

    def __enter__(self) -> Progress:
        self._bar.start()
        return self

    def __exit__(self, *exc) -> None:
        self._bar.stop()

    def describe(self, label: str) -> None:
        """Say what is happening now, without counting a cell."""
        self._bar.update(self._task, description=label)

    def advance(self, label: str, weight: float = 1.0) -> None:
        """Count one cell, of `weight` units of work, as done."""
        self._bar.update(self._task, advance=weight, description=label)
