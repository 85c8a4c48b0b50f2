"""The hardware profile the performance model is calibrated from: one YAML file.

    profile = load_profile("profiles/cpu-2core.yaml")    # or a name: load_profile("cpu-2core")
    write_profile(profile, path)                          # what load_profile reads back

Sections: what and where (`name`, `device`, `source`, `date`, `kind: measured |
published`, `assumptions`), `cores`, `compute` (per-stage measured times, or an
achieved FLOP rate), `compress` (seconds per element, one entry per built-in mode and
gradient codec, and any plug-in's: a plug-in's mode without one is unprofiled) and
`comm` (`message_overhead_s`, `overlap`, `unshaped_rate_mbit`, `wake_s`) and, for a CPU
profile, `contention` (`base`, `per_rank`, `fitted_on`: its ranks' compute together
against one stage alone). Every key
is checked by specfile (unknown keys refused, errors naming the file, field and value);
the format is docs/performance-model.md, "Profile format".
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml

from aqsgd.compress import registry
from aqsgd.filecache import atomic_write_text
from aqsgd.train.settings import Precision
from bench import PROFILE_DIR
from specfile import SPEC_CONFIG, SpecError, raising, read_file, validate

__all__ = ["ProfileError", "StageCost", "ComputeProfile", "CompressProfile", "CommProfile",
           "ContentionProfile", "Profile", "load_profile", "write_profile", "profile_path",
           "PROFILE_DIR"]

# the keys of the compress tables: every registered activation mode and gradient codec
# (plug-ins included); a profile needs the built-ins' (registry.BUILT_IN_MODES, _CODECS)
ACTIVATION_MODES = registry.Names(registry.ACTIVATION_MODES)
GRAD_MODES = registry.Names(registry.GRAD_CODECS)


class ProfileError(SpecError):
    """A profile file or value that cannot be used; names the file and the field."""


def _positive(owner: str, name: str, value, allow_zero: bool = True) -> None:
    ok = value is not None and (value >= 0 if allow_zero else value > 0)
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise SpecError.at(name, f"a number {bound} ({owner})", value)


@dataclass(frozen=True)
class StageCost:
    """Measured cost of one stage of `preset` cut into `stages` stages, per micro-batch of
    `micro_batch_size` samples (forward, backward) and per optimizer step (optimizer)."""

    preset: str
    stages: int
    stage: int
    micro_batch_size: int
    forward_s: float
    backward_s: float
    optimizer_s: float

    def __post_init__(self) -> None:
        if self.stages < 1 or not 0 <= self.stage < self.stages:
            raise SpecError.at("stage", f"an int in [0, {self.stages})", self.stage)
        if self.micro_batch_size < 1:
            raise SpecError.at("micro_batch_size", "an int >= 1", self.micro_batch_size)
        for name in ("forward_s", "backward_s", "optimizer_s"):
            _positive("StageCost", name, getattr(self, name))


@dataclass(frozen=True)
class ComputeProfile:
    flop_rate_tflops: float | None = None
    optimizer_gbyte_s: float | None = None
    stages: tuple[StageCost, ...] = ()

    def __post_init__(self) -> None:
        for name in ("flop_rate_tflops", "optimizer_gbyte_s"):
            value = getattr(self, name)
            if value is not None:
                _positive("ComputeProfile", name, value, allow_zero=False)
        if self.flop_rate_tflops is None and not self.stages:
            raise SpecError.at("stages", "measured stages or a flop_rate_tflops", [])

    def measured(self, preset: str, stages: int, micro_batch_size: int) -> list[StageCost]:
        """The measured costs of every stage of that cut, in stage order ([] if none)."""
        rows = sorted((c for c in self.stages if (c.preset, c.stages, c.micro_batch_size)
                       == (preset, stages, micro_batch_size)), key=lambda c: c.stage)
        return rows if [c.stage for c in rows] == list(range(stages)) else []


def _per_element(names: tuple[str, ...]) -> dict[str, float]:
    return dict.fromkeys(names, 0.0)


@dataclass(frozen=True)
class CompressProfile:
    encode_s_per_element: dict[str, float] = field(
        default_factory=lambda: _per_element(ACTIVATION_MODES))
    decode_s_per_element: dict[str, float] = field(
        default_factory=lambda: _per_element(ACTIVATION_MODES))
    grad_s_per_element: dict[str, float] = field(
        default_factory=lambda: _per_element(GRAD_MODES))

    def __post_init__(self) -> None:
        for name, modes in (("encode_s_per_element", registry.BUILT_IN_MODES),
                            ("decode_s_per_element", registry.BUILT_IN_MODES),
                            ("grad_s_per_element", registry.BUILT_IN_CODECS)):
            table = getattr(self, name)
            if not set(modes) <= set(table):
                raise SpecError.at(name, f"one entry per built-in mode {list(modes)} (and "
                                         f"any plug-in's)", sorted(table))
            for mode, value in table.items():
                _positive("CompressProfile", f"{name}.{mode}", value)

    def unprofiled(self, modes: tuple[str, ...] = (), grad_mode: str = "fp32"
                   ) -> tuple[str, ...]:
        """Those of these activation modes and this gradient codec without an entry (a
        plug-in's not measured with this profile): the model costs their coding at 0."""
        missing = [m for m in modes if m not in self.encode_s_per_element
                   or m not in self.decode_s_per_element]
        return tuple(dict.fromkeys(missing + [grad_mode] * (
            grad_mode not in self.grad_s_per_element)))


@dataclass(frozen=True)
class CommProfile:
    message_overhead_s: float = 0.0
    overlap: float = 1.0
    unshaped_rate_mbit: float = 10_000.0
    wake_s: float = 0.0

    def __post_init__(self) -> None:
        _positive("CommProfile", "message_overhead_s", self.message_overhead_s)
        _positive("CommProfile", "wake_s", self.wake_s)
        if not 0.0 <= self.overlap <= 1.0:
            raise SpecError.at("overlap", "a number in [0, 1]", self.overlap)
        _positive("CommProfile", "unshaped_rate_mbit", self.unshaped_rate_mbit, False)


@dataclass(frozen=True)
class ContentionProfile:
    """How much longer the ranks of a cell compute together on a profile's `cores` than
    one stage timed alone: every compute and coding time of a cell of `n` ranks is
    `factor(n) = 1 + base + per_rank * (n - 1)` times the profile's, before the cores are
    shared (docs/performance-model.md, "Contention"). Fitted from measured cells
    (bench.perfmodel.contention); `fitted_on` says which, and under what load."""

    base: float = 0.0
    per_rank: float = 0.0
    fitted_on: str = ""

    def __post_init__(self) -> None:
        if not self.base > -1.0:
            raise SpecError.at("base", "a number > -1 (ContentionProfile)", self.base)
        _positive("ContentionProfile", "per_rank", self.per_rank)
        if not self.fitted_on.strip():
            raise SpecError.at("fitted_on", "a text naming the cells it was fitted on",
                               self.fitted_on)

    def factor(self, ranks: int) -> float:
        return 1.0 + self.base + self.per_rank * (ranks - 1)


@dataclass(frozen=True)
class Profile:
    __pydantic_config__ = SPEC_CONFIG

    name: str
    device: str
    source: str
    date: str
    kind: Literal["measured", "published"]
    compute: ComputeProfile
    cores: int | None = None
    # the compute precision its stage costs (or FLOP rate) stand for (train.precision):
    # a GPU profile's is bf16, what fine-tuning on GPUs runs (docs/performance-model.md)
    precision: Precision = "fp32"
    compress: CompressProfile = field(default_factory=CompressProfile)
    comm: CommProfile = field(default_factory=CommProfile)
    # a CPU profile's (cores set): its ranks' compute together against alone; None: 1x
    contention: ContentionProfile | None = None
    assumptions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.cores is not None and self.cores < 1:
            raise SpecError.at("cores", "an int >= 1 or null", self.cores)
        if self.contention is not None and self.cores is None:
            raise SpecError.at("contention", "null for a profile without shared cores "
                                             "(cores: null)", dataclasses.asdict(self.contention))
        for name in ("name", "device", "source", "date"):
            if not getattr(self, name).strip():
                raise SpecError.at(name, "a non-empty text", getattr(self, name))

    def replace(self, **changes) -> Profile:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["compute"]["stages"] = [dict(c) for c in data["compute"]["stages"]]
        data["assumptions"] = list(self.assumptions)
        return data


def load_profile(path: str | Path) -> Profile:
    """The profile in `path` (a file, or a name under profiles/ without .yaml)."""
    path = profile_path(str(path))
    raw = read_file(path, error=ProfileError, what="profile")
    with raising(ProfileError, source=str(path)):
        return validate(Profile, raw)


def write_profile(profile: Profile, path: str | Path, header: str = "") -> Path:
    """`profile` as YAML (what load_profile reads back), after an optional comment."""
    comment = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    text = yaml.safe_dump(profile.to_dict(), sort_keys=False, width=96)
    return atomic_write_text(path, comment + text)


def profile_path(reference: str) -> Path:
    """The file of a profile reference: a path, or a name under profiles/ without .yaml."""
    path = Path(reference)
    return PROFILE_DIR / f"{path}.yaml" if not path.suffix and not path.exists() else path
