"""meta.json's identity of a cell: the flat `cell` block every loader row carries, the
`identity` block a run must match to reuse the cell, and the keys every meta.json starts
with, whatever became of the cell.

    ident = expected_identity(cell, scenario, choice, git_commit)   # before bring-up
    meta = meta_head(cell, sweep, choice, scenario, probe, prov, placement,
                     mechanisms=hosts.mechanisms)                   # then status...

The schema is docs/results-schema.md ("meta.json").

What makes up a cell's identity (Note [cell identity]), why the shaping mechanisms are
recorded and not compared, and how launchers keep their own directories: the
"Cell identity" section of docs/results-schema.md.
"""

from __future__ import annotations

import hashlib
import json
import platform

from bench.harness.cells import model_choice
from bench.harness.sweep import CellSpec
from bench.launch.choice import LauncherChoice
from bench.net.placement import Placement
from bench.net.probe import ProbeRecord
from bench.net.scenario import NetworkScenario
from bench.results.files import SCHEMA_VERSION

__all__ = ["cell_dir_name", "cell_identity", "expected_identity", "machine", "meta_head",
           "scenario_key", "shaping_text"]


def cell_dir_name(cell: CellSpec, choice: LauncherChoice) -> str:
    """The cell's directory in its sweep, and its `cell.name`: the spec's name, then
    `__TAG` for a launcher other than the reference one (Note [cell identity])."""
    return f"{cell.name}__{choice.tag}" if choice.tag else cell.name


def scenario_key(scenario: NetworkScenario) -> str:
    """Hash of the scenario as loaded (links, hosts, schedules), like CellSpec.key."""
    blob = json.dumps(scenario.to_dict(), sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def machine() -> dict:
    """The machine part of the identity: hostname and kernel release (the kernel decides
    which shaping mechanisms a launcher finds)."""
    return {"hostname": platform.node(), "kernel": platform.release()}


def expected_identity(cell: CellSpec, scenario: NetworkScenario | None,
                      choice: LauncherChoice, git_commit: str | None) -> dict:
    """What a run of `cell` on `choice` at `git_commit` must find recorded to reuse the
    cell: every key of bench.results.files.IDENTITY_KEYS (Note [cell identity]), and
    `contents` (Note [identity by content], bench.harness.workload). `scenario` None:
    it never loaded (scenario_key None, never reused)."""
    # first: a path's content that differs is the reason a run names (its spec_key differs
    # too); absent when no setting names a path, so older cells keep their identity
    contents = cell.workload.contents()
    identity = {**({"contents": contents} if contents else {}), "spec_key": cell.key,
                "scenario_key": None if scenario is None else scenario_key(scenario),
                "launcher": choice.identity(), "machine": machine(), "git_commit": git_commit}
    # a tokenizer of files (not the suite's BPE): their hash, so editing them is another cell
    tokenizer = model_choice(cell.workload).tokenizer_digest()
    return identity if tokenizer is None else {**identity, "tokenizer": tokenizer}


def shaping_text(mechanisms: dict[str, str] | None) -> str:
    """The `cell` block's `shaping`: the mechanisms used, short ('htb+netem',
    'htb+delayline', 'none' when nothing was shaped; 'unknown' when the hosts never came
    up). A launcher's mechanisms are short names, or 'none (why)' / 'dropped (why)'."""
    if mechanisms is None:
        return "unknown"
    used = [m.split(" ")[0] for m in mechanisms.values()]
    used = [m for m in dict.fromkeys(used) if m != "none"]
    return "+".join(used) or "none"


def cell_identity(cell: CellSpec, sweep: str, choice: LauncherChoice,
                  scenario: NetworkScenario | None, probe: list[ProbeRecord],
                  mechanisms: dict[str, str] | None = None,
                  placement: Placement | None = None) -> dict:
    """meta.json's `cell` block: what the cell is, in flat columns for the loader.

    `name` is the directory's (cell_dir_name), `spec_name` the sweep's name of the cell
    (the same on every launcher); `launcher` and `shaping` (shaping_text of the
    mechanisms the hosts used) say what produced it.
    `scenario` None: it never loaded (no rate, no delay); `placement`'s links none of
    which has a rate (all inside one machine): no rate, not shaped. From the link probe:
    `host_limited` (a probed shaped link could not reach its rate on this host) and
    `rate_mbit_achieved` (the lowest achieved rate of a shaped link, None without one).
    What was trained: `seed`, `variant` (Workload.label: "" for the sweep's default
    workload, a compute precision other than fp32 added), `precision`, `repeat`
    (0 for a cell's first measurement, k for its (k+1)-th), `dropout`
    (the model's, from the preset or checkpoint), `dropout_masks`, `epochs` (passes over
    the training split, warm-up included; fractional for a bench cell's fixed step count),
    `steps_per_epoch`, `warmup_epochs`, `eval_windows` (held-out windows per evaluation)."""
    m, w = cell.mode, cell.workload
    rate_mbit = None if scenario is None else scenario.link.rate_mbit
    if placement is not None and all(link.rate_mbit is None for link in placement.links):
        rate_mbit = None  # every used link inside a machine, or unshaped: no rate applied
    delay_ms = None if scenario is None else scenario.link.delay_ms
    shaped_links = [r for r in probe if r.rate_mbit_configured is not None]
    return {
        "name": cell_dir_name(cell, choice), "spec_name": cell.name, "sweep": sweep,
        "scenario": cell.scenario_name, "mode": m.name,
        "label": m.label, "fw_bits": m.fw_bits, "bw_bits": m.bw_bits,
        "grad_mode": m.grad_mode if m.compresses_dp else "fp32",
        "preset": w.preset, "stages": w.stages, "replicas": w.replicas,
        "launcher": choice.tag or choice.name,
        "shaped": choice.shaped and rate_mbit is not None,
        "shaping": shaping_text(mechanisms),
        "rate_mbit": None if rate_mbit is None else float(rate_mbit),
        "delay_ms": None if delay_ms is None else float(delay_ms),
        "host_limited": any(r.host_limited for r in shaped_links),
        "rate_mbit_achieved": min((r.rate_mbit_achieved for r in shaped_links), default=None),
        "seed": w.seed, "variant": w.label, "precision": w.precision, "repeat": cell.repeat,
        "dropout": float(model_choice(w).config.dropout if w.dropout is None else w.dropout),
        "dropout_masks": w.dropout_masks, "epochs": w.total_steps / w.steps_per_epoch,
        "steps_per_epoch": w.steps_per_epoch, "warmup_epochs": w.warmup_epochs,
        "eval_windows": w.eval_windows,
    }


def _paths(cell: CellSpec) -> dict:
    # where each path setting resolved to: recorded, not compared (its content is)
    paths = cell.workload.paths()
    return {"paths": paths} if paths else {}


def meta_head(cell: CellSpec, sweep: str, choice: LauncherChoice,
              scenario: NetworkScenario | None, probe: list[ProbeRecord], prov: dict,
              placement: Placement, mechanisms: dict[str, str] | None = None,
              loaded: NetworkScenario | None = None) -> dict:
    """The keys every meta.json starts with: schema, identity (with the mechanisms and
    the resolved `paths` of the workload's path settings, recorded only), spec,
    placement, probe, provenance. `mechanisms`: the hosts' (None: they never came up); `loaded`: the
    scenario as loaded when `scenario` is None (hosts that never came up), for the
    identity's scenario_key."""
    identity = expected_identity(cell, scenario if loaded is None else loaded, choice,
                                 prov["git"]["commit"])
    return {"schema_version": SCHEMA_VERSION,
            "cell": cell_identity(cell, sweep, choice, scenario, probe, mechanisms,
                                  placement),
            "identity": {**identity, "mechanisms": mechanisms, **_paths(cell)},
            "spec": cell.to_dict(), "spec_key": cell.key, "seed": cell.workload.seed,
            "placement": placement.to_dict(),
            "probe": [r.to_dict() for r in probe], "provenance": prov}
