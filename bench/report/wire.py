"""Bytes a token each way, as the cells measured them: the column that puts modes of
different kinds (quantizers, in-graph codecs) side by side at equal bytes.

    per_cell = bytes_a_token(load_results(["results/convergence-depth"]))
    table = with_bytes(quality_table(curves), per_cell)   # + fw/bw_bytes_a_token
    bytes_text(row)                                       # '32.4 / 64.4'

A cell's figure is steady state: its training steps of the last epoch (every sample
visited, warm-up over), forward the activation bytes each sending stage sent over the
tokens of its micro-batches, backward the gradient bytes each receiving stage sent back,
averaged over the ranks that send that direction. It is what went on the wire: message
headers included (0.15 bytes a token at 16 x 64 tokens a message), token ids included
for a mode that carries them. A series' figure is the mean over its cells (its seeds
send the same bytes; a mode sized by the data may differ a little).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

__all__ = ["BYTES_COLUMNS", "bytes_a_token", "with_bytes", "bytes_text"]

BYTES_COLUMNS = ("fw_bytes_a_token", "bw_bytes_a_token")
_KEY = ("series", "preset", "stages")  # how a table's rows name their cells' group


def _direction(steady: pd.DataFrame, column: str, senders: pd.Series) -> float:
    rows = steady[senders]
    if rows.empty:
        return math.nan
    per_rank = (pd.to_numeric(rows[column]) / pd.to_numeric(rows["tokens"])).groupby(
        rows["rank"]).mean()
    return float(per_rank.mean())


def bytes_a_token(metrics: pd.DataFrame) -> pd.DataFrame:
    """Per cell (`cell_dir`): `fw_bytes_a_token` and `bw_bytes_a_token` (module
    docstring); NaN for a cell without a steady training step or a single stage.
    `metrics` is bench.results.files.load_results."""
    if metrics.empty:
        return pd.DataFrame(columns=["cell_dir", *BYTES_COLUMNS])
    train = metrics[(metrics["kind"] == "train") & ~metrics["warmup"].astype(bool)]
    rows = []
    for cell_dir, cell in train.groupby("cell_dir", sort=False):
        epoch = pd.to_numeric(cell["epoch"])
        steady = cell[epoch == epoch.max()]
        stage = pd.to_numeric(steady["stage"])
        last = pd.to_numeric(steady["stages"]) - 1
        rows.append({"cell_dir": cell_dir,
                     "fw_bytes_a_token": _direction(steady, "bytes_sent_activation",
                                                    stage < last),
                     "bw_bytes_a_token": _direction(steady, "bytes_sent_gradient",
                                                    stage > 0)})
    return pd.DataFrame(rows, columns=["cell_dir", *BYTES_COLUMNS])


def with_bytes(table: pd.DataFrame, cells: pd.DataFrame, per_cell: pd.DataFrame
               ) -> pd.DataFrame:
    """`table` (one row per series, preset and stages: a quality or target table) with
    BYTES_COLUMNS, each the mean over the row's cells; `cells` maps cells to rows (any
    frame with `cell_dir` and the key columns: eval curves, steps to target)."""
    if table.empty:
        return table.assign(**{c: pd.Series(dtype=float) for c in BYTES_COLUMNS})
    owners = cells[["cell_dir", *_KEY]].drop_duplicates("cell_dir")
    joined = owners.merge(per_cell, on="cell_dir", how="left")
    means = joined.groupby(list(_KEY), sort=False, dropna=False)[list(BYTES_COLUMNS)].mean()
    index = pd.MultiIndex.from_frame(table[list(_KEY)])
    out = table.copy()
    for column in BYTES_COLUMNS:
        out[column] = means[column].reindex(index).to_numpy(dtype=float)
    return out


def bytes_text(row) -> str:
    """'32.4 / 64.4' (forward / backward, one decimal); '-' for a direction not measured."""
    return " / ".join("-" if not np.isfinite(row[c]) else f"{row[c]:.1f}"
                      for c in BYTES_COLUMNS)
