"""What `python -m bench run --scenario NAME` runs when the command line does not say:
the scenario's own layout.

    from bench.harness.defaults import bench_workload
    bench_workload(load_scenario("100mbps"), Workload())
    # 4 stages of tiny-4 (the scenario's layout); aqsgd+gc as 2 stages x 2 replicas

- stages: the scenario's `layout.stages` (4 for the single-site and heterogeneous
  scenarios, 8 for the wide-area ones), or as many as fit its hosts with the workload's
  replicas (2 with `--replicas 2` on 4 hosts), unless given;
- preset: the `tiny` preset sized for that depth (aqsgd.model.config.tiny_preset_for:
  one block per stage, communication-bound at 100 Mbit/s with every rank on 2 cores),
  unless given;
- the data-parallel cells (aqsgd+gc and their fp32 reference need `gc_replicas`
  replicas): on the same hosts as the pipeline cells, so with stages // gc_replicas
  stages when stages x gc_replicas would need more hosts than the scenario has.
"""

from __future__ import annotations

import dataclasses

from aqsgd.model.config import PRESETS, TINY_FAMILY, tiny_preset_for
from bench.harness.sweep import Workload
from bench.net.scenario import NetworkScenario

__all__ = ["bench_workload"]


def bench_workload(scenario: NetworkScenario, workload: Workload, *,
                   stages: int | None = None, preset: str | None = None) -> Workload:
    """`workload` with the stages, preset and data-parallel stages of a `bench run` on
    `scenario` (module docstring); `stages` / `preset` given on the command line win.
    A ValueError for stages < 1 or an unknown preset, when no tiny preset is sized for
    the depth and none is given, or when the preset has fewer blocks than the
    data-parallel cells' stages need."""
    if preset is not None and preset not in PRESETS:
        raise ValueError(f"preset {preset!r} is not a model preset: one of "
                         f"{', '.join(PRESETS)} (or leave it out: the tiny preset sized for "
                         f"the stages)")
    if stages is not None and (isinstance(stages, bool) or stages < 1):
        raise ValueError(f"stages must be >= 1, got {stages!r}")
    if stages is None:
        stages = scenario.layout.stages
        if stages * workload.replicas > scenario.n_hosts:  # --replicas 2 on 4 hosts: 2 x 2
            stages = max(1, scenario.n_hosts // workload.replicas)
            if preset is None and stages not in TINY_FAMILY.values():
                raise ValueError(
                    f"{workload.replicas} replicas on scenario {scenario.name!r} "
                    f"({scenario.n_hosts} hosts) leave {stages} stage(s) each, and no tiny "
                    f"preset is sized for that depth: pass --stages and --preset, or fewer "
                    f"replicas")
    if preset is None:
        try:
            preset = tiny_preset_for(stages)
        except ValueError as err:
            raise ValueError(f"scenario {scenario.name!r} (layout {stages} stages): {err}; "
                             f"or pass --preset") from None
    gc_stages = 0
    if stages * workload.gc_replicas > scenario.n_hosts:
        gc_stages = max(1, scenario.n_hosts // workload.gc_replicas)
    blocks = PRESETS[preset].n_layer
    if gc_stages > blocks:
        raise ValueError(f"preset {preset!r} has {blocks} blocks, fewer than the "
                         f"{gc_stages} stages of the data-parallel cells on scenario "
                         f"{scenario.name!r}")
    return dataclasses.replace(workload, stages=stages, preset=preset, gc_stages=gc_stages)
