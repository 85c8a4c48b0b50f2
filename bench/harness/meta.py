"""meta.json's identity of a cell: the flat `cell` block every loader row carries, and
the keys every meta.json starts with, whatever became of the cell.

    meta = meta_head(cell, sweep, choice, scenario, probe, prov, placement)  # then status...

The schema is docs/results-schema.md ("meta.json").
"""

from __future__ import annotations

from aqsgd.model.config import PRESETS
from bench.harness.sweep import CellSpec
from bench.launch.choice import LauncherChoice
from bench.net.placement import Placement
from bench.net.probe import ProbeRecord
from bench.net.scenario import NetworkScenario
from bench.results.files import SCHEMA_VERSION

__all__ = ["cell_identity", "meta_head"]


def cell_identity(cell: CellSpec, sweep: str, choice: LauncherChoice,
                  scenario: NetworkScenario | None, probe: list[ProbeRecord]) -> dict:
    """meta.json's `cell` block: what the cell is, in flat columns for the loader.

    `scenario` None: it never loaded (no rate, no delay). From the link probe:
    `host_limited` (a probed shaped link could not reach its rate on this host) and
    `rate_mbit_achieved` (the lowest achieved rate of a shaped link, None without one).
    What was trained: `seed`, `variant` ("" for the sweep's default workload), `repeat`
    (0 for a cell's first measurement, k for its (k+1)-th), `dropout`
    (the model's, resolved from the preset), `dropout_masks`, `epochs` (passes over the
    training split, warm-up included; fractional for a bench cell's fixed step count),
    `steps_per_epoch`, `warmup_epochs`, `eval_windows` (held-out windows per evaluation)."""
    m, w = cell.mode, cell.workload
    rate_mbit = None if scenario is None else scenario.link.rate_mbit
    delay_ms = None if scenario is None else scenario.link.delay_ms
    shaped_links = [r for r in probe if r.rate_mbit_configured is not None]
    return {
        "name": cell.name, "sweep": sweep, "scenario": cell.scenario_name, "mode": m.name,
        "label": m.label, "fw_bits": m.fw_bits, "bw_bits": m.bw_bits,
        "grad_mode": m.grad_mode if m.compresses_dp else "fp32",
        "preset": w.preset, "stages": w.stages, "replicas": w.replicas,
        "launcher": choice.name, "shaped": choice.shaped and rate_mbit is not None,
        "rate_mbit": None if rate_mbit is None else float(rate_mbit),
        "delay_ms": None if delay_ms is None else float(delay_ms),
        "host_limited": any(r.host_limited for r in shaped_links),
        "rate_mbit_achieved": min((r.rate_mbit_achieved for r in shaped_links), default=None),
        "seed": w.seed, "variant": w.variant, "repeat": cell.repeat,
        "dropout": float(PRESETS[w.preset].dropout if w.dropout is None else w.dropout),
        "dropout_masks": w.dropout_masks, "epochs": w.total_steps / w.steps_per_epoch,
        "steps_per_epoch": w.steps_per_epoch, "warmup_epochs": w.warmup_epochs,
        "eval_windows": w.eval_windows,
    }


def meta_head(cell: CellSpec, sweep: str, choice: LauncherChoice,
              scenario: NetworkScenario | None, probe: list[ProbeRecord], prov: dict,
              placement: Placement) -> dict:
    """The keys every meta.json starts with: schema, identity, spec, placement, probe,
    provenance."""
    return {"schema_version": SCHEMA_VERSION,
            "cell": cell_identity(cell, sweep, choice, scenario, probe),
            "spec": cell.to_dict(), "spec_key": cell.key, "seed": cell.workload.seed,
            "placement": placement.to_dict(),
            "probe": [r.to_dict() for r in probe], "provenance": prov}
