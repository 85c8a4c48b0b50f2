"""The sweep's progress bar (rich): cells done of cells to run, elapsed time, ETA.

    with Progress(total=len(todo), quiet=False) as bar:
        bar.describe("100mbps: bringing up 2 hosts")
        bar.advance("100mbps__fp32")
"""

from __future__ import annotations

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as RichProgress

__all__ = ["Progress"]


class Progress:
    """A progress bar over the cells to run; `quiet` hides it."""

    def __init__(self, total: int, quiet: bool):
        columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn()]
        self._bar = RichProgress(*columns, disable=quiet)
        self._task = self._bar.add_task("sweep", total=total)

    def __enter__(self) -> Progress:
        self._bar.start()
        return self

    def __exit__(self, *exc) -> None:
        self._bar.stop()

    def describe(self, label: str) -> None:
        """Say what is happening now, without counting a cell."""
        self._bar.update(self._task, description=label)

    def advance(self, label: str) -> None:
        """Count one cell as done."""
        self._bar.update(self._task, advance=1, description=label)
