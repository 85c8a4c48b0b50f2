"""Markdown (GitHub) tables for report.md and the other reports.

    markdown_table(["mode", "samples/s"], [["fp32", "12.50"]])

tabulate's pipe format, cells as given: no padding and no number parsing, so a row
reads `| fp32 | 12.50 |` and a formatted number keeps its digits; `|` inside a cell is
escaped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tabulate import tabulate

__all__ = ["markdown_table"]


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A Markdown table: a header line, a rule, one line per row (str() of each cell)."""
    cells = [[str(c).replace("|", "\\|") for c in row] for row in rows]
    return tabulate(cells, headers=list(headers), tablefmt="pipe", stralign=None,
                    numalign=None, disable_numparse=True)
