"""The what-if table: for each compression mode, the predicted throughput, bytes per
step, step time, the bottleneck and the bandwidth below which the mode is
communication-bound, on one scenario with one profile.

    rows = whatif(configs, scenario, profile)      # configs: {mode label: RunConfig}
    print(whatif_text(rows, title))

`python -m bench model --preset gpt2-xl --stages 8 --profile FILE --scenario 100mbps`
builds `configs` as the harness builds a cell's run config (bench.harness.cells), so a
mode means here what it means in a measured cell.
"""

from __future__ import annotations

import dataclasses
import io
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from aqsgd.train.config import RunConfig
from bench.net.placement import place
from bench.net.scenario import Layout, NetworkScenario, with_link
from bench.perfmodel.predict import bottleneck, comm_bound_rate_mbit, predict
from bench.perfmodel.profile import Profile
from bench.perfmodel.workload import StepWorkload, step_workload

__all__ = ["WhatIfRow", "scenario_for", "workload_on", "whatif", "whatif_text"]


@dataclass(frozen=True)
class WhatIfRow:
    mode: str
    step_s: float
    throughput_samples_s: float
    throughput_tokens_s: float
    bytes_per_step: int
    bottleneck: str  # the resource the step is most sensitive to
    bottleneck_share: float  # relative step change per relative speed-up of it (1: bound)
    comm_bound_below_mbit: float


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


def whatif(configs: dict[str, RunConfig], scenario: NetworkScenario,
           profile: Profile) -> list[WhatIfRow]:
    rows = []
    for mode, config in configs.items():
        work = workload_on(config, scenario, profile)
        pred = predict(work, profile)
        tokens = pred.throughput_samples_s * config.model.seq_len
        label, share = bottleneck(work, profile)
        rows.append(WhatIfRow(mode, pred.step_s, pred.throughput_samples_s, tokens,
                              pred.bytes_per_step, label, share,
                              comm_bound_rate_mbit(work, profile)))
    return rows


def _rate(mbit: float) -> str:
    return f"{mbit / 1000:.3g} Gbit/s" if mbit >= 1000 else f"{mbit:.3g} Mbit/s"


def whatif_text(rows: list[WhatIfRow], title: str, width: int = 140) -> str:
    table = Table(title=title, box=None, pad_edge=False, title_justify="left")
    for name in ("mode", "step s", "samples/s", "tokens/s", "MB/step", "bound by (sensitivity)",
                 "comm-bound below"):
        table.add_column(name, justify="left" if name in ("mode", "bound by (sensitivity)")
                         else "right")
    for r in rows:
        table.add_row(r.mode, f"{r.step_s:.3f}", f"{r.throughput_samples_s:.3g}",
                      f"{r.throughput_tokens_s:.4g}", f"{r.bytes_per_step / 1e6:.1f}",
                      r.bottleneck,
                      _rate(r.comm_bound_below_mbit) if r.comm_bound_below_mbit else "never")
    out = io.StringIO()
    Console(file=out, width=width, markup=False, highlight=False,
            color_system=None).print(table)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines()) + "\n"
