"""The registries of compression, filled from one module per compressor:
`ACTIVATION_MODES` (every `MODE` of aqsgd/compress/modes/: the values of
`CompressionConfig.mode`), `COMPARISONS` (every `COMPARISONS` entry there: the modes a
sweep, a cell and a table name; `SPEEDUP_REFERENCES` those the reports divide by) and
`GRAD_CODECS` (every `CODEC` of aqsgd/compress/codecs/: `GradCompressionConfig.mode`).

    ACTIVATION_MODES["aqsgd"].uses_cache        # True
    COMPARISONS["aqsgd+gc"].backward            # 'directq'
    GRAD_CODECS["ef21"].rounds                  # 1

Each is ordered by rank and read-only; every list of modes in the suite derives from
them, so a new compressor is one module (and its cost in the shipped profiles). A
conflict (one name twice, a comparison over an unregistered mode) raises `RegistryError`
naming the modules. Imports aqsgd.compress.modes and aqsgd.compress.codecs only.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable, Mapping
from types import MappingProxyType, ModuleType

from aqsgd.compress import codecs, modes
from aqsgd.compress.codecs.base import DataParallel
from aqsgd.compress.modes.base import FMT_RAW, FMT_WARMUP, ActivationMode, Comparison

__all__ = ["RegistryError", "ACTIVATION_MODES", "COMPARISONS", "GRAD_CODECS",
           "SPEEDUP_REFERENCES", "build_registries"]


class RegistryError(ValueError):
    """Two compressors that cannot both be registered, or one that is incomplete."""


def _modules(package: ModuleType) -> list[ModuleType]:
    names = sorted(info.name for info in pkgutil.iter_modules(package.__path__))
    return [importlib.import_module(f"{package.__name__}.{name}") for name in names]


def _add(table: dict, entry, where: dict, module: ModuleType, kind: str) -> None:
    """table[entry.name] = entry; where[entry.name] = the declaring module's name."""
    if entry.name in table:
        raise RegistryError(f"{kind} {entry.name!r} is declared by both "
                            f"{where[entry.name]} and {module.__name__}")
    table[entry.name], where[entry.name] = entry, module.__name__


def _ranked(table: dict) -> Mapping:
    return MappingProxyType(dict(sorted(table.items(), key=lambda kv: (kv[1].rank, kv[0]))))


def _check_mode(mode, module: ModuleType) -> None:
    if not (isinstance(mode, type) and issubclass(mode, ActivationMode)):
        raise RegistryError(f"{module.__name__}.MODE must be an ActivationMode subclass, "
                            f"got {mode!r}")
    for attr in ("name", "rank", "bench_cases", "smoke_case"):
        if not hasattr(mode, attr):
            raise RegistryError(f"{module.__name__}: activation mode {mode.__name__} sets "
                                f"no {attr}")
    if mode.codes_rows and mode.wire_format in (None, FMT_RAW, FMT_WARMUP):
        raise RegistryError(f"{module.__name__}: activation mode {mode.name!r} needs a "
                            f"wire_format other than {FMT_RAW} (raw) and {FMT_WARMUP} "
                            f"(warm-up), got {mode.wire_format!r}")


def _check_codec(codec, module: ModuleType) -> None:
    if not (isinstance(codec, type) and issubclass(codec, DataParallel)):
        raise RegistryError(f"{module.__name__}.CODEC must be a DataParallel subclass, "
                            f"got {codec!r}")
    for attr in ("name", "rank"):
        if not hasattr(codec, attr):
            raise RegistryError(f"{module.__name__}: gradient codec {codec.__name__} sets "
                                f"no {attr}")


def _check_comparisons(comparisons: Mapping, act_modes: Mapping, where: dict) -> None:
    for name, c in comparisons.items():
        for direction in ("forward", "backward"):
            mode = getattr(c, direction)
            if mode not in act_modes:
                raise RegistryError(f"{where[name]}: comparison {name!r} has {direction} "
                                    f"mode {mode!r}, which is not registered "
                                    f"(registered: {', '.join(act_modes)})")
        if not act_modes[c.backward].codes_gradients:
            raise RegistryError(f"{where[name]}: comparison {name!r} has backward mode "
                                f"{c.backward!r}, which does not code activation gradients")
        coded = [m for m in (c.forward, c.backward) if act_modes[m].codes_rows]
        if c.adaptive and (len(coded) < 2 or not c.takes_bits):
            raise RegistryError(f"{where[name]}: comparison {name!r} is adaptive, so both "
                                f"directions must code rows and it must take bit widths, got "
                                f"forward {c.forward!r}, backward {c.backward!r}, "
                                f"default_bits {c.default_bits}")
        if c.speedup_reference and (coded or c.takes_bits or c.data_parallel):
            raise RegistryError(f"{where[name]}: comparison {name!r} is a speed-up "
                                f"reference, so it must code nothing (modes that code no "
                                f"rows, no bit widths, no gradient codec), got forward "
                                f"{c.forward!r}, backward {c.backward!r}, default_bits "
                                f"{c.default_bits}, data_parallel {c.data_parallel}")


def build_registries(mode_modules: Iterable[ModuleType], codec_modules: Iterable[ModuleType]
                     ) -> tuple[Mapping, Mapping, Mapping]:
    """(activation modes, comparisons, gradient codecs) declared by these modules (the
    module docstrings of aqsgd.compress.modes and aqsgd.compress.codecs)."""
    act, comp, grad = {}, {}, {}
    where: dict[str, dict[str, str]] = {"act": {}, "comp": {}, "grad": {}}
    for module in mode_modules:
        mode, declared = getattr(module, "MODE", None), getattr(module, "COMPARISONS", ())
        if mode is not None:
            _check_mode(mode, module)
            _add(act, mode, where["act"], module, "activation mode")
        for c in declared:
            if not isinstance(c, Comparison):
                raise RegistryError(f"{module.__name__}.COMPARISONS must hold Comparison "
                                    f"entries, got {c!r}")
            _add(comp, c, where["comp"], module, "comparison")
    for module in codec_modules:
        codec = getattr(module, "CODEC", None)
        if codec is not None:
            _check_codec(codec, module)
            _add(grad, codec, where["grad"], module, "gradient codec")
    act, comp, grad = _ranked(act), _ranked(comp), _ranked(grad)
    _check_comparisons(comp, act, where["comp"])
    return act, comp, grad


ACTIVATION_MODES, COMPARISONS, GRAD_CODECS = build_registries(_modules(modes),
                                                              _modules(codecs))
# the comparisons every speed-up is also shown over (Comparison.speedup_reference), by rank
SPEEDUP_REFERENCES = tuple(name for name, c in COMPARISONS.items() if c.speedup_reference)
