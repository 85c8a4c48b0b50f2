"""Tables as JSON for scripts: one object per row, in column order, NaN as null.

    text = records_json(frame)      # '[\n {"cell": "100mbps__fp32", ...},\n ...]\n'

Used by summary.json (bench.report.summary) and `bench model --json` / `bench validate
--json` (bench.perfmodel.cli), so every machine-readable table of the suite reads alike.
"""

from __future__ import annotations

import json

import pandas as pd

__all__ = ["records_json"]


def records_json(frame: pd.DataFrame) -> str:
    """`frame` as a JSON list of row objects (pandas' encoding of numbers, dates and
    NaN, without its escaped slashes: 'aqsgd:2/4' stays readable), a newline at the end."""
    rows = json.loads(frame.to_json(orient="records"))
    return json.dumps(rows, indent=1) + "\n"
