"""The micro-benchmarks' tables: rich tables, printed at their natural width.

A console that is not a terminal (a pipe, a captured stdout, a log) would make rich wrap
tables to 80 columns; these helpers never wrap, and the plain-text form has no colour
codes, so logs and tests read the same rows as a person at a terminal.
"""

from __future__ import annotations

import io

from rich import box
from rich.console import Console
from rich.table import Table

__all__ = ["new_table", "print_table", "table_lines"]

_NO_WRAP_WIDTH = 10_000  # columns: wider than any table here, so rich never wraps one


def new_table(*columns: str, numeric: tuple[str, ...] = ()) -> Table:
    """A table with these column headers, `numeric` ones right-aligned; a rule under the
    header and no borders, so each row stays one line of text."""
    table = Table(box=box.SIMPLE, show_edge=False, pad_edge=False)
    for name in columns:
        table.add_column(name, justify="right" if name in numeric else "left", no_wrap=True)
    return table


def table_lines(table: Table) -> list[str]:
    """The table as plain-text lines, without colour codes."""
    out = io.StringIO()
    Console(file=out, width=_NO_WRAP_WIDTH, color_system=None, markup=False, emoji=False,
            highlight=False).print(table)
    return [line.rstrip() for line in out.getvalue().splitlines()]


def print_table(table: Table) -> None:
    """Print to stdout (looked up at call time, so redirections apply): styled on a
    terminal, plain text otherwise."""
    Console(width=_NO_WRAP_WIDTH, markup=False, emoji=False, highlight=False).print(table)
