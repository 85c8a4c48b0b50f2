"""What a compressor module must declare to be registered, checked without running it:
the class attributes of its `MODE` (ActivationMode), `CODEC` (DataParallel) and
`COMPARISONS` entries have the types their base declares, the methods it must implement
are its own, no two modes share a `wire_format`, every comparison names registered
modes. aqsgd.compress.registry builds its tables here; the round trip it runs on each
new mode is aqsgd.compress.trial's.

    build_registries(mode_modules, codec_modules)   # (modes, comparisons, codecs)
    mismatches(DirectQ, ActivationMode)             # ['rank: expected float, got ...']

A defect is a RegistryError naming the declaring module. Imports aqsgd.compress.modes.base,
aqsgd.compress.ingraph, aqsgd.compress.codecs.base and aqsgd.compress.plugins only.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterable, Mapping
from types import MappingProxyType, ModuleType

from aqsgd.compress.codecs.base import DataParallel
from aqsgd.compress.ingraph import InGraph
from aqsgd.compress.modes.base import FMT_RAW, FMT_WARMUP, ActivationMode, Comparison
from aqsgd.compress.plugins import RegistryError

__all__ = ["RegistryError", "build_registries", "build_tables", "conforms", "mismatches"]


# --- class attributes against the types their base declares ---------------------------------
def conforms(value, hint) -> bool:
    """Whether `value` is of the annotation `hint` (the forms the bases use: a class,
    `X | None`, `tuple[X, Y]`, `tuple[X, ...]`, `ClassVar[X]`); an int is a float, a bool
    is no int."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.ClassVar:
        return conforms(value, args[0])
    if origin in (typing.Union, types.UnionType):
        return any(conforms(value, arg) for arg in args)
    if origin is tuple:
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(conforms(v, args[0]) for v in value)
        return len(value) == len(args) and all(map(conforms, value, args))
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint) if isinstance(hint, type) else True


def _spelled(hint) -> str:
    """An annotation as its source writes it: 'float', 'tuple[str, int]', 'int | None'."""
    if typing.get_origin(hint) is typing.ClassVar:
        return _spelled(typing.get_args(hint)[0])
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("NoneType", "None")


def mismatches(obj, base: type) -> list[str]:
    """'attr: expected T, got value (type)' for every attribute `base` annotates that
    `obj` (a subclass, or a dataclass instance) has with another type; a missing one
    too, unless `base` gives it a default."""
    out = []
    for attr, hint in typing.get_type_hints(base).items():
        if not hasattr(obj, attr):
            out.append(f"{attr}: expected {_spelled(hint)}, got nothing (it sets no {attr})")
        elif not conforms(value := getattr(obj, attr), hint):
            out.append(f"{attr}: expected {_spelled(hint)}, got {value!r} "
                       f"({type(value).__name__})")
    return out


# --- one module's declarations --------------------------------------------------------------
def _overrides(cls: type, base: type, names: Iterable[str]) -> list[str]:
    """The methods of `names` that `cls` leaves as `base` has them."""
    return [n for n in names if next(k for k in cls.__mro__ if n in vars(k)) is base]


def _check_types(obj, base: type, module: ModuleType, what: str) -> None:
    wrong = mismatches(obj, base)
    if wrong:
        raise RegistryError(f"{module.__name__}: {what} has attributes of the wrong type "
                            f"(the contract: {base.__module__}.{base.__name__}): "
                            + "; ".join(wrong))


def _check_mode(mode, module: ModuleType) -> None:
    if not (isinstance(mode, type) and issubclass(mode, ActivationMode)):
        raise RegistryError(f"{module.__name__}.MODE must be an ActivationMode subclass, "
                            f"got {mode!r}")
    for attr in ("name", "rank", "bench_cases", "smoke_case"):
        if not hasattr(mode, attr):
            raise RegistryError(f"{module.__name__}: activation mode {mode.__name__} sets "
                                f"no {attr}")
    _check_types(mode, ActivationMode, module, f"activation mode {mode.__name__}")
    if mode.codes_rows and mode.wire_format in (None, FMT_RAW, FMT_WARMUP):
        raise RegistryError(f"{module.__name__}: activation mode {mode.name!r} needs a "
                            f"wire_format other than {FMT_RAW} (raw) and {FMT_WARMUP} "
                            f"(warm-up), got {mode.wire_format!r}")
    missing = _overrides(mode, ActivationMode, ("coded_spec", "encode", "decode"))
    if mode.codes_rows and missing:
        raise RegistryError(f"{module.__name__}: activation mode {mode.name!r} codes rows "
                            f"but does not implement {', '.join(missing)}")
    _check_in_graph(mode, module)


def _check_in_graph(mode, module: ModuleType) -> None:
    half = mode.in_graph
    if half is None:
        return
    if not (isinstance(half, type) and issubclass(half, InGraph)):
        raise RegistryError(f"{module.__name__}: activation mode {mode.name!r} has in_graph "
                            f"{half!r}, expected an aqsgd.compress.ingraph.InGraph subclass "
                            f"or None")
    missing = _overrides(half, InGraph, ("sender_module", "receiver_module"))
    if half.calibrates:
        missing += _overrides(half, InGraph, ("calibrate",))
    if missing:
        raise RegistryError(f"{module.__name__}: activation mode {mode.name!r}: its in-graph "
                            f"half {half.__name__} does not implement {', '.join(missing)}")


def _check_codec(codec, module: ModuleType) -> None:
    if not (isinstance(codec, type) and issubclass(codec, DataParallel)):
        raise RegistryError(f"{module.__name__}.CODEC must be a DataParallel subclass, "
                            f"got {codec!r}")
    for attr in ("name", "rank"):
        if not hasattr(codec, attr):
            raise RegistryError(f"{module.__name__}: gradient codec {codec.__name__} sets "
                                f"no {attr}")
    _check_types(codec, DataParallel, module, f"gradient codec {codec.__name__}")
    needed = ("synchronize", "exchange_nbytes") + (("round_trip",) if codec.compresses else ())
    missing = _overrides(codec, DataParallel, needed)
    if missing:
        raise RegistryError(f"{module.__name__}: gradient codec {codec.name!r} does not "
                            f"implement {', '.join(missing)}")


def _check_comparison(c, module: ModuleType) -> None:
    if not isinstance(c, Comparison):
        raise RegistryError(f"{module.__name__}.COMPARISONS must hold Comparison "
                            f"entries, got {c!r}")
    _check_types(c, Comparison, module, f"comparison {c.name!r}")


# --- the tables -----------------------------------------------------------------------------
def _add(table: dict, entry, where: dict, module: ModuleType, kind: str) -> None:
    """table[entry.name] = entry; where[entry.name] = the declaring module's name."""
    if entry.name in table:
        raise RegistryError(f"{kind} {entry.name!r} is declared by both "
                            f"{where[entry.name]} and {module.__name__}")
    table[entry.name], where[entry.name] = entry, module.__name__


def _ranked(table: dict) -> Mapping:
    return MappingProxyType(dict(sorted(table.items(), key=lambda kv: (kv[1].rank, kv[0]))))


def _check_wire_formats(act: Mapping, where: dict) -> None:
    """No two modes send messages of one header[0]: the receiver tells them apart by it."""
    seen: dict[int, str] = {}
    for name, mode in act.items():
        if not mode.codes_rows:
            continue
        other = seen.setdefault(mode.wire_format, name)
        if other != name:
            raise RegistryError(f"{where[name]}: activation mode {name!r} has wire_format "
                                f"{mode.wire_format}, which activation mode {other!r} "
                                f"({where[other]}) has already; pick a number no "
                                f"registered mode uses (a plug-in: 64 and up)")


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
    return build_tables(mode_modules, codec_modules)[:3]


def build_tables(mode_modules: Iterable[ModuleType], codec_modules: Iterable[ModuleType]
                 ) -> tuple[Mapping, Mapping, Mapping, dict[str, dict[str, str]]]:
    """build_registries, and which module declared each entry ('act', 'comp', 'grad')."""
    act, comp, grad = {}, {}, {}
    where: dict[str, dict[str, str]] = {"act": {}, "comp": {}, "grad": {}}
    for module in mode_modules:
        mode, declared = getattr(module, "MODE", None), getattr(module, "COMPARISONS", ())
        if mode is not None:
            _check_mode(mode, module)
            _add(act, mode, where["act"], module, "activation mode")
        for c in declared:
            _check_comparison(c, module)
            _add(comp, c, where["comp"], module, "comparison")
    for module in codec_modules:
        codec = getattr(module, "CODEC", None)
        if codec is not None:
            _check_codec(codec, module)
            _add(grad, codec, where["grad"], module, "gradient codec")
    act, comp, grad = _ranked(act), _ranked(comp), _ranked(grad)
    _check_wire_formats(act, where["act"])
    _check_comparisons(comp, act, where["comp"])
    return act, comp, grad, where

