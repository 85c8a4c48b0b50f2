"""A sweep checked whole, cell by cell, before anything is brought up.

    plan = check_sweep(spec)                 # SweepPlan, or a SpecError naming the field
    plan.placements["100mbps__fp32"].table() # which rank runs on which host
    spec = load_checked_sweep("scenarios/sweeps/paper.yaml")   # parsed and checked
    refuse_unsupported(spec, plan, "docker") # a scenario the launcher cannot run
    plan, choice, lines = on_hosts(plan, choice, out)   # the launcher's hosts, checked once

Each cell is checked as it would run: its scenario loads, it fits the hosts
(bench.net.placement.place), its preset has a block per stage, one step's samples, its
starting weights exist, its RunConfig builds (bench.harness.cells.run_config: model and
tokenizer found, aqsgd.model.source) and its data fills its windows (data_problem);
refuse_unsupported refuses competing flows or stragglers the launcher does not run
(RUNS_DURING_RUN); on_hosts places the cells on the hosts the launcher gives (an SSH
hostfile's) and checks those hosts once, before any cell (`contact=False`: the count
only, nobody contacted). The first problem is a SpecError naming the sweep field that decides
it ('workload.stages', 'variants[0].workload.train_samples', 'scenarios[1]', ...);
load_checked_sweep puts the file's name in front, `bench run` its flags (exit code 2).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from pathlib import Path

from aqsgd.compress.plugins import Plugin
from aqsgd.data.fit import TokenCounts, count_tokens, fit_problem
from aqsgd.filecache import default_cache_dir
from aqsgd.model.config import PRESETS
from aqsgd.model.source import ModelSourceError, run_tokenizer
from aqsgd.train.config import RunConfig
from bench import SCENARIO_DIR
from bench.harness.cells import model_choice, run_config
from bench.harness.sweep import CellSpec, SweepSpec, Workload, load_sweep
from bench.launch.choice import LauncherChoice
from bench.net.placement import Placement, PlacementError, place
from bench.net.scenario import NetworkScenario, load_scenario
from specfile import SpecError, raising

__all__ = ["RUNS_DURING_RUN", "SWEEPS_DIR", "DataProblem", "SweepPlan", "UnplacedCellError",
           "check_sweep", "data_problem", "load_checked_sweep", "on_hosts", "place_cells",
           "refuse_unsupported"]

SWEEPS_DIR = SCENARIO_DIR / "sweeps"
# which launcher runs which of a scenario's events beside link schedules (the launcher
# classes' `during_run`, bench/launch/schedules.py; a test keeps the two equal)
RUNS_DURING_RUN = {"netns": frozenset({"competing", "stragglers"})}


class UnplacedCellError(SpecError, PlacementError):
    """A cell that does not fit its scenario's hosts: a PlacementError that names the
    sweep's field deciding its layout."""


@dataclass(frozen=True)
class SweepPlan:
    """What a sweep will run, checked: its cells in run order, the scenarios they name
    (by the name a cell gives) and each cell's placement (by cell name)."""

    cells: tuple[CellSpec, ...]
    scenarios: dict[str, NetworkScenario]
    placements: dict[str, Placement]

    @property
    def plugins(self) -> tuple[Plugin, ...]:
        """The plug-ins its cells run, once each (a launcher checks its hosts have them)."""
        return tuple(dict.fromkeys(p for c in self.cells for p in c.mode.plugins))


def place_cells(cells: list[CellSpec], scenarios: dict[str, NetworkScenario]
                ) -> dict[str, Placement]:
    """Each cell's placement on its scenario's hosts (bench.net.placement.place, the one
    rule); a cell that does not fit is refused before anything runs (PlacementError,
    naming the cell, what it asks and what the scenario has)."""
    placements = {}
    for cell in cells:
        w = cell.workload
        try:
            placements[cell.name] = place(scenarios[cell.scenario], w.stages, w.replicas)
        except PlacementError as err:
            raise PlacementError(f"cell {cell.name}: {err}") from None
    return placements


def _source(spec: SweepSpec, cell: CellSpec) -> tuple[str, Workload]:
    """Where in the sweep `cell`'s workload comes from: ('workload', the sweep's) or
    ('variants[K].workload', that variant's)."""
    for k, variant in enumerate(spec.variants):
        if cell.workload.variant and variant.workload.variant == cell.workload.variant:
            return f"variants[{k}].workload", variant.workload
    return "workload", spec.workload


def _field(spec: SweepSpec, cell: CellSpec, key: str) -> str:
    """The sweep field that sets Workload `key` for `cell`: a variant's own value, else
    the sweep's workload."""
    prefix, workload = _source(spec, cell)
    if prefix != "workload" and getattr(workload, key) == getattr(spec.workload, key):
        prefix = "workload"  # the variant inherits it
    return f"{prefix}.{key}"


def _data_parallel(spec: SweepSpec, cell: CellSpec) -> bool:
    """The cell runs with `gc_replicas` replicas (and `gc_stages` stages) instead of its
    workload's: aqsgd+gc on a one-replica workload, and fp32 beside it."""
    return cell.workload.replicas != _source(spec, cell)[1].replicas


def _scenario_field(spec: SweepSpec, name: str) -> str:
    return f"scenarios[{spec.scenarios.index(name)}]" if name in spec.scenarios else "reference"


def _load_scenarios(spec: SweepSpec, cells: list[CellSpec]) -> dict[str, NetworkScenario]:
    scenarios = {}
    for name in dict.fromkeys(c.scenario for c in cells):
        try:
            scenarios[name] = load_scenario(name)
        except ValueError as err:  # ScenarioError: lists the available ones
            raise SpecError(str(err), _scenario_field(spec, name)) from None
    return scenarios


def _deeper_presets(stages: int) -> str:
    deep = sorted((p.n_layer, name) for name, p in PRESETS.items() if p.n_layer >= stages)
    return ", ".join(f"{name} ({n})" for n, name in deep[:3]) or "none"


@dataclass(frozen=True)
class DataProblem:
    """Why a cell's data cannot feed it, and the Workload field that would change that."""

    text: str
    setting: str


def _stamp(path: str | None) -> tuple:
    """(name, size, mtime) of the files at `path`: a cache key that changes with them."""
    if path is None or not Path(path).exists():
        return ()
    files = [Path(path)] if Path(path).is_file() else sorted(Path(path).rglob("*"))
    return tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files if f.is_file())


@functools.lru_cache(maxsize=8)
def _tokenizer(path: str | None, vocab_size: int, checkpoint: str | None, stamp: tuple):
    return run_tokenizer(path, vocab_size, checkpoint=checkpoint)


@functools.lru_cache(maxsize=8)
def _token_counts(name: str, path: str | None, text_field: str, tokenizer,
                  stamp: tuple) -> TokenCounts:
    return count_tokens(name, tokenizer, path, text_field, default_cache_dir())


def data_problem(config: RunConfig) -> DataProblem | None:
    """None when the run's data gives its train and held-out windows (tokenized as the
    worker will; cached per process until the files change), else what falls short and
    what would fit (aqsgd.data.fit); a tokenizer refused (aqsgd.model.source) or data not
    found too."""
    d, model = config.data, config.model
    if d.name == "synthetic":
        return None
    init = config.train.init_from
    checkpoint = None if init in (None, "pretrained") else init
    try:
        tok = _tokenizer(d.tokenizer, model.vocab_size, checkpoint, _stamp(d.tokenizer))
    except ModelSourceError as err:
        return DataProblem(str(err), err.setting)
    try:
        counts = _token_counts(d.name, d.path, d.text_field, tok, _stamp(d.path))
    except (OSError, ValueError) as err:
        return DataProblem(str(err), "data_path")
    held_out = d.eval_samples if config.train.eval_batches else 0
    text = fit_problem(counts, model.seq_len, d.max_samples or 1, held_out)
    if not text:
        return None
    train_short = counts.windows(model.seq_len)[0] < (d.max_samples or 1)
    return DataProblem(text, "train_samples" if train_short else "eval_samples")


def _check_cell(spec: SweepSpec, cell: CellSpec, scenario: NetworkScenario) -> Placement:
    w = cell.workload
    dp = _data_parallel(spec, cell)
    stages_field = _field(spec, cell, "gc_stages" if dp else "stages")
    try:
        placement = place_cells([cell], {cell.scenario: scenario})[cell.name]
    except PlacementError as err:
        raise UnplacedCellError(str(err), stages_field) from None
    try:
        blocks = model_choice(w).config.n_layer
    except ModelSourceError as err:  # the model or tokenizer: the field that names it
        raise SpecError(f"cell {cell.name}: {err}", _field(spec, cell, err.setting)) from None
    if w.model is not None and w.stages > blocks:
        raise SpecError(f"cell {cell.name}: model {w.model} has {blocks} blocks, fewer than "
                        f"its {w.stages} stages (a stage needs at least one): run at most "
                        f"{blocks} stages", stages_field)
    if w.stages > blocks:
        model = f"preset {w.preset!r}" + (f" with n_layer={w.n_layer}" if w.n_layer else "")
        raise SpecError(f"cell {cell.name}: {model} has {blocks} blocks, fewer "
                        f"than its {w.stages} stages (a stage needs at least one): run at "
                        f"most {blocks} stages, or a preset with {w.stages} blocks or more "
                        f"(blocks: {_deeper_presets(w.stages)})", stages_field)
    if w.train_samples < w.global_batch:
        raise SpecError(f"cell {cell.name}: train_samples {w.train_samples} is fewer than "
                        f"the {w.global_batch} samples of one step ({w.replicas} replica(s) x "
                        f"{w.num_micro_batches} micro-batches x {w.micro_batch_size}): give "
                        f"at least {w.global_batch}", _field(spec, cell, "train_samples"))
    if w.init_from not in (None, "pretrained") and not Path(w.init_from).exists():
        raise SpecError(f"cell {cell.name}: no starting weights at {w.init_from!r}: "
                        f"'pretrained' (the cached checkpoint), null (random init) or an "
                        f"existing state-dict file", _field(spec, cell, "init_from"))
    try:
        config = run_config(cell, Path("results") / cell.name)
    except (ValueError, TypeError) as err:  # e.g. a bad Workload.overrides key
        where = _field(spec, cell, "overrides") if w.overrides else _source(spec, cell)[0]
        raise SpecError(f"cell {cell.name}: {err}", where) from None
    problem = data_problem(config)
    if problem:
        raise SpecError(f"cell {cell.name}: {problem.text}", _field(spec, cell, problem.setting))
    return placement


def check_sweep(spec: SweepSpec) -> SweepPlan:
    """Every cell of `spec` checked as it would run (module docstring); the first
    problem raises a SpecError whose field is the sweep's field that decides it."""
    if spec.throughput is not None and not (SWEEPS_DIR / f"{spec.throughput}.yaml").is_file():
        names = ", ".join(sorted(p.stem for p in SWEEPS_DIR.glob("*.yaml")))
        raise SpecError(f"no sweep {spec.throughput!r} in {SWEEPS_DIR} for the step times "
                        f"(available: {names})", "throughput")
    cells = spec.cells()
    scenarios = _load_scenarios(spec, cells)
    placements = {c.name: _check_cell(spec, c, scenarios[c.scenario]) for c in cells}
    return SweepPlan(tuple(cells), scenarios, placements)


def refuse_unsupported(spec: SweepSpec, plan: SweepPlan, launcher: str) -> None:
    """A SpecError naming the scenario (its `scenarios[I]` field) whose competing flows or
    stragglers the launcher `launcher` does not run (module doc)."""
    runs = RUNS_DURING_RUN.get(launcher, frozenset())
    for cell in plan.cells:
        scenario = plan.scenarios[cell.scenario]
        n = cell.world_size
        asked = {"competing": scenario.competing_within(n),
                 "stragglers": scenario.stragglers_within(n)}
        missing = [what for what, entries in asked.items() if entries and what not in runs]
        if missing:
            where = [name for name, r in RUNS_DURING_RUN.items() if set(missing) <= r]
            raise SpecError(f"scenario {scenario.name} has {' and '.join(missing)}, which "
                            f"the {launcher} launcher does not run: use --launcher "
                            f"{' or '.join(where)}", _scenario_field(spec, cell.scenario))


def on_hosts(plan: SweepPlan, choice: LauncherChoice, results_dir: Path, contact: bool = True
             ) -> tuple[SweepPlan, LauncherChoice, list[str]]:
    """The plan with each placement on the hosts the launcher gives (its `host_count`: a
    hostfile's, at most the scenario's), and with `contact` the launcher's factory once
    every host a bring-up will use is checked (its `checked_for`: an SSH launcher's
    HostCheckError names each host that fails, nothing changed) with a line per host; a
    ValueError for a cell that needs more hosts than the launcher gives."""
    placements = {}
    for cell in plan.cells:
        count = choice.factory.host_count(plan.scenarios[cell.scenario])
        if count < cell.world_size:
            raise ValueError(f"cell {cell.name} runs {cell.world_size} ranks; launcher "
                             f"{choice.name} gives {count} host(s) ({choice.reason})")
        placements[cell.name] = plan.placements[cell.name].within(count)
    plan = replace(plan, placements=placements)
    if not contact:
        return plan, choice, []
    widest: dict[str, int] = {}
    for cell in plan.cells:  # one bring-up per scenario, for its widest cell
        widest[cell.scenario] = max(widest.get(cell.scenario, 0), cell.world_size)
    factory, lines = choice.factory.checked_for(
        [(plan.scenarios[name], n) for name, n in widest.items()], results_dir)
    return plan, replace(choice, factory=factory), lines


def load_checked_sweep(path: str | Path) -> SweepSpec:
    """The sweep file at `path` (bench.harness.sweep.load_sweep), every cell checked
    (check_sweep); every error names the file and the field."""
    spec = load_sweep(path)
    with raising(source=str(path)):
        check_sweep(spec)
    return spec
