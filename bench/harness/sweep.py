"""Sweeps: which cells to run (scenarios x modes x bit widths). bench.harness.run
runs them, resumably, with a progress bar.

    python -m bench sweep scenarios/sweeps/paper.yaml

A sweep file (YAML, checked against SweepFile: unknown keys and wrong types rejected):

    name: paper                       # results go to results/<name>/
    description: throughput against bandwidth, every mode
    scenarios: [10gbps, 1gbps, 500mbps, 300mbps, 100mbps]
    modes: [fp32, directq, aqsgd, aqsgd+gc]   # or explicit "aqsgd:2/4"
    bits: [[2, 4], [3, 6], [4, 8]]            # (forward, backward) bit pairs,
                                              # crossed with bare quantized modes
    workload: {steps: 8, preset: tiny, stages: 2}   # any Workload field
    reference: loopback               # optional: fp32 on an unshaped link too
    gc_reference: true                # fp32 with aqsgd+gc's replicas too (default)

A cell is finished when its meta.json exists with status ok, the same spec
key and the same git commit of the suite; a rerun skips those and reruns the
rest (including failed cells), so a killed sweep resumes where it stopped,
and a rerun after a commit measures the new code.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from specfile import SPEC_CONFIG, SpecError, raising, read_file, validate

__all__ = [
    "MODE_NAMES",
    "DEFAULT_BITS",
    "DEFAULT_GRID",
    "ModeSpec",
    "Workload",
    "CellSpec",
    "SweepSpec",
    "SweepFile",
    "parse_mode",
    "load_sweep",
]

MODE_NAMES = ("fp32", "directq", "aqsgd", "aqsgd+gc")
# (forward bits, backward bits) used when a quantized mode is named bare.
DEFAULT_BITS = {"directq": (4, 8), "aqsgd": (2, 4), "aqsgd+gc": (2, 4)}
# The grid `python -m bench run` runs by default: every mode, AQ-SGD at three bit widths.
DEFAULT_GRID = ("fp32", "directq:4/8", "aqsgd:2/4", "aqsgd:3/6", "aqsgd:4/8", "aqsgd+gc:2/4")
BITS_RANGE = (1, 8)


def _check_int(owner: str, name: str, value, lo: int, hi: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{owner}.{name} must be an int, got {value!r}")
    if value < lo or (hi is not None and value > hi):
        bound = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise ValueError(f"{owner}.{name} must be in {bound}, got {value}")


@dataclass(frozen=True)
class ModeSpec:
    """One compression mode of the comparison: AQ-SGD and the baselines it is measured against.

    fp32: nothing compressed. directq: activations and their gradients
    quantized directly. aqsgd: activation deltas against the per-sample cache
    forward, DirectQ backward. aqsgd+gc: aqsgd plus compressed data-parallel
    gradients (`grad_mode`, QuantizedAdam by default) -- needs replicas >= 2.
    """

    name: str
    fw_bits: int | None = None
    bw_bits: int | None = None
    grad_mode: str = "qadam"  # only used by aqsgd+gc
    grad_bits: int = 8

    def __post_init__(self):
        if self.name not in MODE_NAMES:
            raise ValueError(f"ModeSpec.name must be one of {', '.join(MODE_NAMES)}, "
                             f"got {self.name!r}")
        if self.name == "fp32":
            for f in ("fw_bits", "bw_bits"):
                if getattr(self, f) is not None:
                    raise ValueError(f"ModeSpec.{f} must be unset for mode fp32, "
                                     f"got {getattr(self, f)}")
        else:
            for f in ("fw_bits", "bw_bits"):
                _check_int(f"ModeSpec({self.name})", f, getattr(self, f), *BITS_RANGE)
        _check_int(f"ModeSpec({self.name})", "grad_bits", self.grad_bits, *BITS_RANGE)
        if self.grad_mode not in ("qadam", "natural", "ef21"):
            raise ValueError(f"ModeSpec.grad_mode must be qadam, natural or ef21, "
                             f"got {self.grad_mode!r}")

    @property
    def compresses_dp(self) -> bool:
        return self.name == "aqsgd+gc"

    @property
    def label(self) -> str:
        """File-name-safe label, e.g. 'aqsgd-fw2-bw4', 'aqsgd+gc-fw2-bw4'."""
        if self.name == "fp32":
            return "fp32"
        return f"{self.name}-fw{self.fw_bits}-bw{self.bw_bits}"

    def __str__(self) -> str:
        return self.name if self.name == "fp32" else f"{self.name}:{self.fw_bits}/{self.bw_bits}"


def parse_mode(text: str) -> ModeSpec:
    """'fp32', 'aqsgd', 'aqsgd:2/4', 'directq:4/8', 'aqsgd+gc:2/4' -> ModeSpec."""
    text = text.strip()
    name, sep, bits = text.partition(":")
    if name not in MODE_NAMES:
        raise ValueError(f"mode must be one of {', '.join(MODE_NAMES)} "
                         f"(optionally NAME:FW/BW), got {text!r}")
    if name == "fp32":
        if sep:
            raise ValueError(f"mode fp32 takes no bit widths, got {text!r}")
        return ModeSpec("fp32")
    if not sep:
        fw, bw = DEFAULT_BITS[name]
        return ModeSpec(name, fw, bw)
    fw_text, slash, bw_text = bits.partition("/")
    if not slash or not fw_text.strip().isdigit() or not bw_text.strip().isdigit():
        raise ValueError(f"mode bit widths must read NAME:FW/BW with integers, got {text!r}")
    return ModeSpec(name, int(fw_text), int(bw_text))


@dataclass(frozen=True)
class Workload:
    """What every worker of a cell trains: model, layout, data, steps.

    `steps` counts measured optimizer steps after the warm-up; the warm-up
    epochs (uncompressed, excluded from throughput) run over `train_samples`
    windows first, so their length is train_samples / global batch steps.
    """

    preset: str = "tiny"
    stages: int = 2
    replicas: int = 1
    micro_batch_size: int = 16  # aqsgd.model.config.TINY_PIPELINE: comm-bound at 100 Mbit/s
    num_micro_batches: int = 4
    steps: int = 10
    warmup_epochs: int = 1
    train_samples: int = 128  # one warm-up epoch = 2 steps of 64 samples
    seed: int = 0
    threads: int = 1
    lr: float = 1e-4
    eval_batches: int = 1  # micro-batches per replica in the final evaluation; 0 = none
    eval_samples: int = 8  # windows held out for evaluation
    dist_timeout_s: float = 60.0  # worker's init_process_group and p2p wait
    # starting weights (RunConfig train.init_from): "pretrained" = the cached
    # checkpoint of aqsgd.model.pretrain (the paper fine-tunes a pre-trained model;
    # AQ-SGD relies on slowly changing activations); None = random init.
    init_from: str | None = "pretrained"
    gc_replicas: int = 2  # replicas for aqsgd+gc when `replicas` is 1
    timeout_s: float = 300.0  # per cell, start to last exit
    # RunConfig values set last, by dotted key path, e.g. {"forward.granularity": "token"}
    overrides: dict = field(default_factory=dict)

    def __post_init__(self):
        for name, lo in (("stages", 1), ("replicas", 1), ("micro_batch_size", 1),
                         ("num_micro_batches", 1), ("steps", 1), ("warmup_epochs", 0),
                         ("train_samples", 1), ("seed", 0), ("threads", 1),
                         ("gc_replicas", 2), ("eval_batches", 0), ("eval_samples", 0)):
            _check_int("Workload", name, getattr(self, name), lo)
        if not isinstance(self.preset, str) or not self.preset:
            raise ValueError(f"Workload.preset must be a preset name, got {self.preset!r}")
        if not (isinstance(self.lr, int | float) and 0 < self.lr < 1):
            raise ValueError(f"Workload.lr must be in (0, 1), got {self.lr!r}")
        if not isinstance(self.overrides, dict) or not all(
                isinstance(k, str) and k.count(".") == 1 for k in self.overrides):
            raise ValueError(f"Workload.overrides must map 'section.key' to a value, "
                             f"got {self.overrides!r}")
        for name in ("timeout_s", "dist_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not (isinstance(value, int | float) and value > 0):
                raise ValueError(f"Workload.{name} must be > 0, got {value!r}")

    @property
    def global_batch(self) -> int:
        return self.micro_batch_size * self.num_micro_batches * self.replicas

    @property
    def warmup_steps(self) -> int:
        """Optimizer steps of the warm-up epochs (partial last batch dropped)."""
        return self.warmup_epochs * max(1, self.train_samples // self.global_batch)

    @property
    def total_steps(self) -> int:
        return self.warmup_steps + self.steps


@dataclass(frozen=True)
class CellSpec:
    """One run: a scenario, a mode, a workload. Its key names its results."""

    scenario: str
    mode: ModeSpec
    workload: Workload = field(default_factory=Workload)

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
        """Directory name, e.g. '100mbps__aqsgd-fw2-bw4' ('-dp2' with replicas)."""
        dp = f"-dp{self.workload.replicas}" if self.workload.replicas > 1 else ""
        return f"{self.scenario_name}__{self.mode.label}{dp}"

    @property
    def world_size(self) -> int:
        return self.workload.stages * self.workload.replicas

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def key(self) -> str:
        """Hash of the whole spec: a finished cell is reused only if it matches."""
        blob = json.dumps(self.to_dict(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


def _with_replicas(workload: Workload, mode: ModeSpec) -> Workload:
    if mode.compresses_dp and workload.replicas < 2:
        return dataclasses.replace(workload, replicas=workload.gc_replicas)
    return workload


@dataclass(frozen=True)
class SweepSpec:
    """Scenarios x modes over one workload; expands to cells in run order."""

    name: str
    scenarios: tuple[str, ...]
    modes: tuple[ModeSpec, ...]
    workload: Workload = field(default_factory=Workload)
    description: str = ""
    # fp32 also runs here (an unshaped scenario such as loopback): the
    # reference for "speed-up over fp32 on an unshaped link".
    reference_scenario: str | None = None
    # when aqsgd+gc runs with more replicas than the sweep's workload, also run
    # fp32 with those replicas: the reference for its speed-up.
    gc_reference: bool = True

    def __post_init__(self):
        if not self.name or "/" in self.name or self.name.startswith("."):
            raise ValueError(f"SweepSpec.name must be a plain directory name, got {self.name!r}")
        if not self.scenarios:
            raise ValueError("SweepSpec.scenarios must name at least one scenario, got none")
        if not self.modes:
            raise ValueError("SweepSpec.modes must name at least one mode, got none")

    def cells(self) -> list[CellSpec]:
        """Cells grouped by scenario (one launcher bring-up each), modes in order.
        aqsgd+gc with replicas=1 runs with `gc_replicas` replicas: with one
        replica there is no data-parallel gradient to compress."""
        cells: list[CellSpec] = []
        seen: set[str] = set()
        has_fp32 = any(m.name == "fp32" for m in self.modes)
        for scenario in self.scenarios:
            for mode in self.modes:
                cell = CellSpec(scenario, mode, _with_replicas(self.workload, mode))
                group = [cell]
                if (self.gc_reference and has_fp32
                        and cell.workload.replicas != self.workload.replicas):
                    group.insert(0, CellSpec(scenario, ModeSpec("fp32"), cell.workload))
                for c in group:
                    if c.name not in seen:
                        seen.add(c.name)
                        cells.append(c)
        if self.reference_scenario is not None:
            ref = CellSpec(self.reference_scenario, ModeSpec("fp32"), self.workload)
            if ref.name not in seen:
                cells.append(ref)
        return cells


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

    def __post_init__(self):
        if self.bits is not None and not all(len(pair) == 2 for pair in self.bits):
            raise ValueError("bits must be a list of [forward, backward] pairs, "
                             f"got {[list(pair) for pair in self.bits]}")


def _expand_modes(modes: tuple[str, ...], bits: tuple[tuple[int, ...], ...] | None
                  ) -> tuple[ModeSpec, ...]:
    """Mode names as ModeSpecs; with `bits`, a bare quantized name runs at every pair."""
    out: list[ModeSpec] = []
    for k, text in enumerate(modes):
        try:
            if bits is not None and text in DEFAULT_BITS:
                out.extend(ModeSpec(text, fw, bw) for fw, bw in bits)
            else:
                out.append(parse_mode(text))
        except ValueError as e:
            raise SpecError(str(e), f"modes[{k}]") from None
    return tuple(out)


def _sweep(file: SweepFile) -> SweepSpec:
    modes = _expand_modes(file.modes, file.bits)
    try:
        return SweepSpec(name=file.name, scenarios=file.scenarios, modes=modes,
                         workload=file.workload, description=file.description,
                         reference_scenario=file.reference, gc_reference=file.gc_reference)
    except ValueError as e:
        raise SpecError(str(e), "") from None


def load_sweep(path: str | Path) -> SweepSpec:
    """Parse and validate a sweep file; errors (SpecError, a ValueError) name the file
    and the field."""
    raw = read_file(path, what="sweep file")
    with raising(source=str(path)):
        return _sweep(validate(SweepFile, raw))
