"""Sweeps: which cells to run (scenarios x modes x bit widths x seeds x variants);
bench.harness.run runs them, resumably. A sweep file (YAML, checked against SweepFile):

    name: paper                       # results go to results/<name>/
    scenarios: [10gbps, 1gbps, 100mbps]
    modes: [fp32, directq, aqsgd, aqsgd+gc]   # or "aqsgd:2/4", "aqsgd+gc/ef21:2/4"
    bits: [[2, 4], [4, 8]]            # (forward, backward) pairs, crossed with bare modes
    workload: {steps: 8, preset: tiny, stages: 2}   # any Workload field
    reference: loopback               # optional: fp32 on an unshaped link too
    seeds: [1, 2, 3]                  # optional: every cell once per seed (`__s<seed>`)
    repeats: 3                        # optional: every cell 3 times, interleaved
    variants: [{name: dropout0, modes: [fp32], workload: {dropout: 0.0}}]
    plugins: [my_mode.py]             # optional: compressor plug-ins (docs/plugins.md)

    spec = load_sweep("scenarios/sweeps/paper.yaml"); spec.cells()

Every key, repeats, variants and when a cell counts as finished: docs/architecture/harness.md,
"Sweep files"; the modes' syntax: bench.harness.modes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from pydantic import Field

from aqsgd.compress.plugins import PluginError
from aqsgd.compress.registry import SPEEDUP_REFERENCES, load_plugins
from aqsgd.model.config import PRESETS
from aqsgd.train.settings import TARGET_EVAL_CADENCE, Seed
from bench.harness.modes import DEFAULT_BITS, ModeSpec, first_repeat, parse_mode
from bench.harness.workload import Workload
from specfile import SPEC_CONFIG, SpecError, check_fields, raising, read_file, validate

__all__ = [
    "Workload",
    "Timing",
    "Variant",
    "CellSpec",
    "SweepSpec",
    "SweepFile",
    "VariantFile",
    "load_sweep",
    "PluginSources",
    "TargetLoss",
]

Repeats = Annotated[int, Field(ge=1, description=(
    "run every cell this many times, interleaved (all cells once, then again); tables and "
    "figures show the median with its min..max"))]
TargetLoss = Annotated[float, Field(gt=0, description=(
    "a held-out loss to train to (training from scratch): the report gives each mode's "
    "steps to it over the seeds (bench.report.target); needs eval_every >= 25"))]
PluginSources = Annotated[tuple[str, ...], Field(description=(
    "compressor plug-ins to load: a .py file (in a sweep file: relative to it) or an "
    "importable module; their modes are names like the built-ins' (docs/plugins.md)"))]


@dataclass(frozen=True)
class Timing:
    """Measured rates of the machine a sweep was sized on, for the time stated before
    its first cell: a cell takes about `start_s` (processes, data, checkpoint,
    rendezvous) + steps x ranks x `step_s_per_rank` (the ranks share the cores, so a step's
    time grows with them) + evaluations x windows x `eval_s_per_window`. A preset named in
    `preset_step_s_per_rank` (a sweep over model sizes) steps at its own measured rate;
    `preset_eval_scale` scales the evaluation rate of the presets it names."""

    start_s: float
    step_s_per_rank: float
    eval_s_per_window: float = 0.0
    preset_step_s_per_rank: dict[str, float] = field(default_factory=dict)
    preset_eval_scale: dict[str, float] = field(default_factory=dict)

    def __post_init__(self):
        for name in ("start_s", "step_s_per_rank", "eval_s_per_window"):
            value = getattr(self, name)
            if isinstance(value, bool) or not (isinstance(value, int | float) and value >= 0):
                raise ValueError(f"Timing.{name} must be a number of seconds >= 0, "
                                 f"got {value!r}")
        for name in ("preset_step_s_per_rank", "preset_eval_scale"):
            for preset, value in getattr(self, name).items():
                if preset not in PRESETS or not value >= 0:
                    raise ValueError(f"Timing.{name} must map presets ({', '.join(PRESETS)}) "
                                     f"to numbers >= 0, got {preset!r}: {value!r}")

    def cell_s(self, cell: CellSpec) -> float:
        """Estimated wall time of `cell`, in seconds."""
        w = cell.workload
        step_s = self.preset_step_s_per_rank.get(w.preset, self.step_s_per_rank)
        eval_s = self.eval_s_per_window * self.preset_eval_scale.get(w.preset, 1.0)
        return (self.start_s + w.total_steps * cell.world_size * step_s
                + w.evaluations * w.eval_windows * eval_s)


@dataclass(frozen=True)
class CellSpec:
    """One run: a scenario, a mode, a workload. Its key names its results;
    `seed_in_name`: the sweep runs several seeds, so the name carries the seed;
    `repeat`: 0 for the first measurement of the cell, k for its (k+1)-th (`__r<k+1>`)."""

    scenario: str
    mode: ModeSpec
    workload: Workload = field(default_factory=Workload)
    seed_in_name: bool = False
    repeat: int = 0

    def __post_init__(self):
        if self.mode.compresses_dp and self.workload.replicas < 2:
            raise ValueError(f"mode {self.mode} compresses data-parallel gradients and "
                             f"needs Workload.replicas >= 2, got {self.workload.replicas}")

    @property
    def scenario_name(self) -> str:
        """'100mbps' for the scenario '100mbps' or a file 'path/to/100mbps.yaml'."""
        path = Path(self.scenario)
        return path.stem if path.suffix in (".yaml", ".yml") else self.scenario

    @property
    def name(self) -> str:
        """Directory name, e.g. '100mbps__aqsgd-fw2-bw4' ('-dp2' with replicas),
        'loopback__aqsgd-fw2-bw4__dropout0__s1' (a variant, one of several seeds),
        '100mbps__fp32__r2' (the second measurement of a repeated cell)."""
        w = self.workload
        dp = f"-dp{w.replicas}" if w.replicas > 1 else ""
        variant = f"__{w.label}" if w.label else ""  # the variant and a non-fp32 precision
        seed = f"__s{w.seed}" if self.seed_in_name else ""
        repeat = f"__r{self.repeat + 1}" if self.repeat else ""
        return f"{self.scenario_name}__{self.mode.label}{dp}{variant}{seed}{repeat}"

    @property
    def world_size(self) -> int:
        return self.workload.stages * self.workload.replicas

    def to_dict(self) -> dict:
        """The spec; a plug-in mode's cell also names its plug-ins (module, version, source
        hash), so that editing one re-measures its cells only (docs/plugins.md)."""
        spec = dataclasses.asdict(self)
        if spec["mode"]["coords"] is None:  # a mode without an in-graph half keeps its key
            del spec["mode"]["coords"]
        plugins = [{k: p.to_dict()[k] for k in ("module", "version", "sha256")}
                   for p in self.mode.plugins]
        return {**spec, "plugins": plugins} if plugins else spec

    @property
    def key(self) -> str:
        """Hash of the whole spec: a finished cell is reused only if it matches."""
        blob = json.dumps({**self.to_dict(), "workload": self.workload.identity()},
                          sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


def _with_replicas(workload: Workload, mode: ModeSpec) -> Workload:
    if mode.compresses_dp and workload.replicas < 2:
        return dataclasses.replace(workload, replicas=workload.gc_replicas,
                                   stages=workload.gc_stages or workload.stages)
    return workload


@dataclass(frozen=True)
class Variant:
    """Some modes of a sweep run again with another workload (`workload.variant` is the
    label in their names), e.g. dropout off; the sweep's default cells run as well."""

    modes: tuple[ModeSpec, ...]
    workload: Workload

    def __post_init__(self):
        if not self.workload.label:  # a variant of precision alone is named by it
            raise ValueError("Variant.workload.variant must name the variant, got ''")
        if not self.modes:
            raise ValueError(f"variant {self.workload.label!r} must name at least one mode")


@dataclass(frozen=True)
class SweepSpec:
    """Scenarios x modes x seeds over one workload, plus variants; expands to cells in
    run order."""

    name: str
    scenarios: tuple[str, ...]
    modes: tuple[ModeSpec, ...]
    workload: Workload = field(default_factory=Workload)
    description: str = ""
    # fp32 also runs here (an unshaped scenario such as loopback): the
    # reference for "speed-up over fp32 on an unshaped link".
    reference_scenario: str | None = None
    # when aqsgd+gc runs with more replicas than the sweep's workload, also run
    # fp32 (and bf16, when the sweep runs it: every SPEEDUP_REFERENCES mode it runs) with
    # those replicas: the references for its speed-ups.
    gc_reference: bool = True
    # () = the workload's one seed; else every cell once per seed, the seed in its name
    seeds: tuple[Seed, ...] = ()
    variants: tuple[Variant, ...] = ()
    repeats: Repeats = 1
    timing: Timing | None = None  # measured rates: the time stated before the first cell
    # the sweep (a file in scenarios/sweeps/, by name) whose cells hold each mode's step
    # time at each bandwidth, for this sweep's time-to-quality (bench.harness.convergence)
    throughput: str | None = None
    # a quality task trained to a held-out loss: steps to it in the report (bench.report.target)
    target_loss: TargetLoss | None = None

    def __post_init__(self):
        if not self.name or "/" in self.name or self.name.startswith("."):
            raise ValueError(f"SweepSpec.name must be a plain directory name, got {self.name!r}")
        if not self.scenarios:
            raise ValueError("SweepSpec.scenarios must name at least one scenario, got none")
        if not self.modes:
            raise ValueError("SweepSpec.modes must name at least one mode, got none")
        check_fields(self)
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"SweepSpec.seeds must not repeat a seed, got {list(self.seeds)}")
        for where, modes in [("modes", self.modes), *((f"variant {v.workload.label!r}'s "
                                                       f"modes", v.modes) for v in self.variants)]:
            if (pair := first_repeat(modes)) is not None:
                raise ValueError(f"SweepSpec {where} must not repeat a mode (each runs once; "
                                 f"`repeats` measures it again), got {modes[pair[1]]} twice")
        names = [v.workload.label for v in self.variants]
        if len(set(names)) != len(names):
            raise ValueError(f"SweepSpec.variants must have distinct names, got {names}")
        for v in self.variants:
            missing = [str(m) for m in v.modes if m not in self.modes]
            if missing:
                raise ValueError(f"variant {v.workload.label!r} names modes the sweep does "
                                 f"not run: {', '.join(missing)}")
        for w in (self.workload, *(v.workload for v in self.variants)):
            if self.target_loss is not None and w.eval_every < TARGET_EVAL_CADENCE:
                raise ValueError(f"SweepSpec.target_loss {self.target_loss} counts steps to "
                                 f"a target: workload.eval_every must be at least "
                                 f"{TARGET_EVAL_CADENCE} steps, got {w.eval_every}")

    def cells(self) -> list[CellSpec]:
        """Cells grouped by scenario (one launcher bring-up each), then by repeat (every
        cell once before any twice), then by seed (a killed multi-seed sweep has whole
        seeds done), modes in order, variants last.
        aqsgd+gc with replicas=1 runs with `gc_replicas` replicas (and `gc_stages`
        stages when set): with one replica there is no data-parallel gradient to
        compress."""
        cells: list[CellSpec] = []
        seen: set[str] = set()
        references = [ModeSpec(name) for name in SPEEDUP_REFERENCES
                      if any(m.name == name for m in self.modes)]
        runs = [(m, self.workload) for m in self.modes]
        runs += [(m, v.workload) for v in self.variants for m in v.modes]
        for scenario, repeat in itertools.product(self.scenarios, range(self.repeats)):
            for seed in self.seeds or (None,):
                for mode, base in runs:
                    workload = base if seed is None else dataclasses.replace(base, seed=seed)
                    named = seed is not None
                    cell = CellSpec(scenario, mode, _with_replicas(workload, mode), named,
                                    repeat)
                    group = [cell]
                    if (self.gc_reference and not base.variant
                            and cell.workload.replicas != workload.replicas):
                        group[:0] = [CellSpec(scenario, ref, cell.workload, named, repeat)
                                     for ref in references]
                    for c in group:
                        if c.name not in seen:
                            seen.add(c.name)
                            cells.append(c)
        for repeat in range(self.repeats if self.reference_scenario is not None else 0):
            ref = CellSpec(self.reference_scenario, ModeSpec("fp32"), self.workload,
                           repeat=repeat)
            if ref.name not in seen:
                cells.append(ref)
        return cells

    def estimate_s(self, cells: list[CellSpec]) -> float | None:
        """Estimated wall time of `cells` from the sweep's measured rates (None without)."""
        if self.timing is None:
            return None
        return sum(self.timing.cell_s(c) for c in cells)


@dataclass(frozen=True, kw_only=True)
class VariantFile:
    """A sweep file's `variants` entry: a name (in the cells' names), the modes to run
    again, and the Workload fields that differ from the sweep's workload."""

    name: str = ""  # may be left out by a variant that changes the precision (its label)
    modes: tuple[str, ...]
    workload: dict


@dataclass(frozen=True, kw_only=True)
class SweepFile:
    """What a sweep file may contain (see the module docstring); specfile checks a file
    against it and load_sweep expands it into a SweepSpec."""

    __pydantic_config__ = SPEC_CONFIG

    name: str
    scenarios: tuple[str, ...]
    modes: tuple[str, ...]
    description: str = ""
    bits: tuple[tuple[int, ...], ...] | None = None
    workload: Workload = field(default_factory=Workload)
    reference: str | None = None
    gc_reference: bool = True
    seeds: tuple[Seed, ...] = ()
    variants: tuple[VariantFile, ...] = ()
    repeats: Repeats = 1
    timing: Timing | None = None
    throughput: str | None = None
    target_loss: TargetLoss | None = None
    plugins: PluginSources = ()

    def __post_init__(self):
        if self.bits is not None and not all(len(pair) == 2 for pair in self.bits):
            raise ValueError("bits must be a list of [forward, backward] pairs, "
                             f"got {[list(pair) for pair in self.bits]}")


def _expand_modes(modes: tuple[str, ...], bits: tuple[tuple[int, ...], ...] | None,
                  where: str = "modes") -> tuple[ModeSpec, ...]:
    """Mode names as ModeSpecs; with `bits`, a bare quantized name runs at every pair. A
    mode listed twice (`aqsgd` beside `aqsgd:2/4`, or beside bits [2, 4]) is a SpecError
    at its second place."""
    out: dict[ModeSpec, int] = {}  # each mode and the entry that lists it
    for k, text in enumerate(modes):
        try:
            if bits is not None and text in DEFAULT_BITS:
                listed = [ModeSpec(text, fw, bw) for fw, bw in bits]
            else:
                listed = [parse_mode(text)]
        except ValueError as e:
            raise SpecError(str(e), f"{where}[{k}]") from None
        for mode in listed:
            if mode in out:
                raise SpecError(f"{text!r} is mode {mode}, which {where}[{out[mode]}] lists "
                                f"already: a sweep runs each mode once (`repeats` measures "
                                f"every cell again)", f"{where}[{k}]")
            out[mode] = k
    return tuple(out)


def _variant(k: int, file: VariantFile, base: Workload,
             bits: tuple[tuple[int, ...], ...] | None) -> Variant:
    """A `variants[k]` entry: its workload is the sweep's with the entry's fields on top."""
    where = f"variants[{k}]"
    if "variant" in file.workload:
        raise SpecError("the variant's label is its `name`", f"{where}.workload.variant")
    try:
        workload = validate(Workload, {**dataclasses.asdict(base), **file.workload,
                                       "variant": file.name})
    except SpecError as e:
        raise e.within(f"{where}.workload") from None
    except ValueError as e:  # Workload.__post_init__
        raise SpecError(str(e), f"{where}.workload") from None
    try:
        return Variant(_expand_modes(file.modes, bits, f"{where}.modes"), workload)
    except SpecError:
        raise
    except ValueError as e:
        raise SpecError(str(e), where) from None


def _sweep(file: SweepFile) -> SweepSpec:
    modes = _expand_modes(file.modes, file.bits)
    variants = tuple(_variant(k, v, file.workload, file.bits)
                     for k, v in enumerate(file.variants))
    try:
        return SweepSpec(name=file.name, scenarios=file.scenarios, modes=modes,
                         workload=file.workload, description=file.description,
                         reference_scenario=file.reference, gc_reference=file.gc_reference,
                         seeds=file.seeds, variants=variants, repeats=file.repeats,
                         timing=file.timing, throughput=file.throughput,
                         target_loss=file.target_loss)
    except ValueError as e:
        raise SpecError(str(e), "") from None


def load_sweep(path: str | Path) -> SweepSpec:
    """Parse and validate a sweep file; errors (SpecError, a ValueError) name the file
    and the field. bench.harness.preflight.load_checked_sweep also checks every cell as
    it would run."""
    raw = read_file(path, what="sweep file")
    with raising(source=str(path)):
        file = validate(SweepFile, raw)
        try:  # before the modes are read: a plug-in's modes are names like the others
            load_plugins(file.plugins, base=Path(path).parent)
        except PluginError as err:
            raise SpecError(str(err), "plugins") from None
        return _sweep(file)
