"""The what-if table: for each compression mode, the predicted throughput, bytes per
step, step time, the bottleneck and the bandwidth below which the mode is
communication-bound, on one scenario with one profile.

    rows = whatif(configs, scenario, profile)      # configs: {mode label: RunConfig}
    print(whatif_text(rows, title))                # the table, then its legend

Each row says its layout (stages x replicas) and its throughput over fp32's of the same
layout, so a mode that runs more replicas than asked is never compared with fp32 of
another shape.

`python -m bench model --preset gpt2-xl --stages 8 --profile FILE --scenario 100mbps-8hosts`
builds `configs` as the harness builds a cell's run config (bench.harness.cells), so a
mode means here what it means in a measured cell.
"""

from __future__ import annotations

import dataclasses
import io
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from aqsgd.train.config import RunConfig
from bench.net.placement import place
from bench.net.scenario import Layout, NetworkScenario, with_link
from bench.perfmodel.predict import (
    COMM_BOUND_SLOWDOWN,
    bottleneck,
    comm_bound_rate_mbit,
    predict,
)
from bench.perfmodel.profile import Profile
from bench.perfmodel.workload import StepWorkload, step_workload

__all__ = ["LEGEND", "WhatIfRow", "is_fp32", "scenario_for", "workload_on", "whatif",
           "whatif_text"]


@dataclass(frozen=True)
class WhatIfRow:
    mode: str
    stages: int
    replicas: int
    step_s: float
    throughput_samples_s: float
    throughput_tokens_s: float
    bytes_per_step: int
    bottleneck: str  # the resource the step is most sensitive to
    bottleneck_share: float  # relative step change per relative speed-up of it (1: bound)
    comm_bound_below_mbit: float
    vs_fp32: float | None  # throughput over fp32's of the same stages x replicas (None: no
    # fp32 row of that layout)
    # the plug-in modes and codec the profile has no entry for (their coding costs 0)
    unprofiled: tuple[str, ...] = ()


def is_fp32(config: RunConfig) -> bool:
    """Nothing compressed, fp32 on the wire: the reference every mode of its layout is
    compared with."""
    return all(d.mode == "none" and d.dtype == "fp32"
               for d in (config.forward, config.backward)) and config.grad.mode == "fp32"


def scenario_for(scenario: NetworkScenario, stages: int, replicas: int,
                 rate_mbit: float | None = None) -> NetworkScenario:
    """`scenario` with hosts for stages x replicas ranks when it has fewer (its default
    link on the hosts it did not have), and every default link at `rate_mbit` if given."""
    if scenario.n_hosts < stages * replicas:
        scenario = dataclasses.replace(scenario, layout=Layout(stages, replicas))
    return with_link(scenario, rate_mbit=rate_mbit) if rate_mbit is not None else scenario


def workload_on(config: RunConfig, scenario: NetworkScenario, profile: Profile
                ) -> StepWorkload:
    """`config` placed on `scenario`, given hosts for its ranks if it has too few."""
    p = config.pipeline
    scenario = scenario_for(scenario, p.stages, p.replicas)
    return step_workload(config, place(scenario, p.stages, p.replicas), profile)


def whatif(configs: Mapping[str, RunConfig] | Sequence[tuple[str, RunConfig]],
           scenario: NetworkScenario, profile: Profile) -> list[WhatIfRow]:
    """One row per (mode label, config), in order; `vs_fp32` against the fp32 config of the
    same stages x replicas among them."""
    pairs = list(configs.items()) if isinstance(configs, Mapping) else list(configs)
    preds = []
    for mode, config in pairs:
        work = workload_on(config, scenario, profile)
        preds.append((mode, config, work, predict(work, profile)))
    fp32 = {(c.pipeline.stages, c.pipeline.replicas): p.throughput_samples_s
            for _, c, _, p in preds if is_fp32(c)}
    rows = []
    for mode, config, work, pred in preds:
        p = config.pipeline
        tokens = pred.throughput_samples_s * config.model.seq_len
        label, share = bottleneck(work, profile)
        ref = fp32.get((p.stages, p.replicas))
        rows.append(WhatIfRow(mode, p.stages, p.replicas, pred.step_s,
                              pred.throughput_samples_s, tokens, pred.bytes_per_step, label,
                              share, comm_bound_rate_mbit(work, profile),
                              pred.throughput_samples_s / ref if ref else None,
                              profile.compress.unprofiled(
                                  (config.forward.mode, config.backward.mode),
                                  config.grad.mode)))
    return rows


def _rate(mbit: float) -> str:
    return f"{mbit / 1000:.3g} Gbit/s" if mbit >= 1000 else f"{mbit:.3g} Mbit/s"


LEGEND = (
    "stages x replicas: the layout the mode runs (aqsgd+gc runs at least 2 replicas; "
    "fp32, when asked for, runs that layout too). step s: one optimizer step. "
    "samples/s, tokens/s: over all replicas. vs fp32: samples/s over fp32's of the same "
    "stages x replicas. MB/step: what every rank sends in one step. "
    "bound by (sensitivity): compute or communication, whichever shortens the step more "
    "when it is 10% faster, with that sensitivity (the step's relative change over the "
    "resource's; 1.00: wholly bound by it); most: the one stage or link the step is most "
    "sensitive to, with its own. comm-bound below: the rate of every link below which a "
    f"step takes {COMM_BOUND_SLOWDOWN:g}x its time on unlimited links (never: at no rate). "
    "unprofiled: a plug-in's mode the profile has no cost for, its coding counted as 0 "
    "(`bench profile --plugin FILE` measures it).")


def whatif_text(rows: list[WhatIfRow], title: str, width: int = 180) -> str:
    """The table of `rows` under `title`, then the legend of its columns."""
    table = Table(title=title, box=None, pad_edge=False, title_justify="left")
    for name in ("mode", "stages x replicas", "step s", "samples/s", "vs fp32", "tokens/s",
                 "MB/step", "bound by (sensitivity)", "comm-bound below"):
        table.add_column(name, justify="left" if name in ("mode", "bound by (sensitivity)")
                         else "right")
    for r in rows:
        mode = f"{r.mode} (unprofiled: {', '.join(r.unprofiled)})" if r.unprofiled else r.mode
        table.add_row(mode, f"{r.stages} x {r.replicas}", f"{r.step_s:.3f}",
                      f"{r.throughput_samples_s:.3g}",
                      "-" if r.vs_fp32 is None else f"{r.vs_fp32:.2f}x",
                      f"{r.throughput_tokens_s:.4g}", f"{r.bytes_per_step / 1e6:.1f}",
                      r.bottleneck,
                      _rate(r.comm_bound_below_mbit) if r.comm_bound_below_mbit else "never")
    out = io.StringIO()
    Console(file=out, width=width, markup=False, highlight=False,
            color_system=None).print(table)
    lines = [line.rstrip() for line in out.getvalue().splitlines()]
    lines += textwrap.wrap(LEGEND, width=min(width, 100), initial_indent="legend: ",
                           subsequent_indent="  ")
    return "\n".join(lines) + "\n"
