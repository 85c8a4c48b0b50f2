"""The registries of compression, filled from one module per compressor:
`ACTIVATION_MODES` (every `MODE` of aqsgd/compress/modes/: `CompressionConfig.mode`),
`COMPARISONS` (every `COMPARISONS` entry there: the modes a sweep, a cell and a table
name; `SPEEDUP_REFERENCES` those the reports divide by), `GRAD_CODECS` (every `CODEC` of
aqsgd/compress/codecs/), then the same of every plug-in (docs/plugins.md): installed
packages' when this module is imported, a file's or module's on `load_plugins`.

    ACTIVATION_MODES["aqsgd"].uses_cache        # True
    load_plugins(["my_mode.py"]); plugins_of("my_mode")   # its Plugin identities

Each is ordered by rank, read-only and live (a plug-in loaded later appears in it, and in
every `Names`/`View` derived from it). A conflict (one name twice, a comparison over an
unregistered mode, a plug-in that breaks the contract) raises `RegistryError` naming the
modules. Imports aqsgd.compress.modes, aqsgd.compress.codecs and .plugins only.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType, ModuleType

from aqsgd.compress import codecs, modes
from aqsgd.compress.codecs.base import DataParallel
from aqsgd.compress.modes.base import FMT_RAW, FMT_WARMUP, ActivationMode, Comparison
from aqsgd.compress.plugins import (
    Plugin,
    PluginError,
    entry_point_modules,
    identify,
    import_source,
)

__all__ = ["RegistryError", "ACTIVATION_MODES", "COMPARISONS", "GRAD_CODECS",
           "SPEEDUP_REFERENCES", "BUILT_IN_MODES", "BUILT_IN_CODECS", "PLUGINS", "Names",
           "View", "build_registries", "load_plugins", "require_plugins", "unload_plugins",
           "plugins_of"]


class RegistryError(PluginError):
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


def _overrides(cls: type, base: type, names: Iterable[str]) -> list[str]:
    """The methods of `names` that `cls` leaves as `base` has them."""
    return [n for n in names if next(k for k in cls.__mro__ if n in vars(k)) is base]


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
    missing = _overrides(mode, ActivationMode, ("coded_spec", "encode", "decode"))
    if mode.codes_rows and missing:
        raise RegistryError(f"{module.__name__}: activation mode {mode.name!r} codes rows "
                            f"but does not implement {', '.join(missing)}")


def _check_codec(codec, module: ModuleType) -> None:
    if not (isinstance(codec, type) and issubclass(codec, DataParallel)):
        raise RegistryError(f"{module.__name__}.CODEC must be a DataParallel subclass, "
                            f"got {codec!r}")
    for attr in ("name", "rank"):
        if not hasattr(codec, attr):
            raise RegistryError(f"{module.__name__}: gradient codec {codec.__name__} sets "
                                f"no {attr}")
    needed = ("synchronize", "exchange_nbytes") + (("round_trip",) if codec.compresses else ())
    missing = _overrides(codec, DataParallel, needed)
    if missing:
        raise RegistryError(f"{module.__name__}: gradient codec {codec.name!r} does not "
                            f"implement {', '.join(missing)}")


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
    return _build(mode_modules, codec_modules)[:3]


def _build(mode_modules: Iterable[ModuleType], codec_modules: Iterable[ModuleType]
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
    return act, comp, grad, where




# --- the live tables: built-ins, then plug-ins ----------------------------------------------
class Names(Sequence):
    """The names of `table`'s entries that `keep` accepts, read when used: a tuple that
    follows the registry (`', '.join(...)`, `in`, `==` a tuple, indexing)."""

    def __init__(self, table: Mapping, keep: Callable[[object], bool] = lambda entry: True):
        self._table, self._keep = table, keep

    def _names(self) -> tuple[str, ...]:
        return tuple(name for name, entry in self._table.items() if self._keep(entry))

    def __getitem__(self, index):
        return self._names()[index]

    def __len__(self) -> int:
        return len(self._names())

    def __eq__(self, other) -> bool:
        return self._names() == (tuple(other) if isinstance(other, Names) else other)

    __hash__ = None

    def __repr__(self) -> str:
        return repr(self._names())


class View(Mapping):
    """`value(entry)` of `table`'s entries that `keep` accepts, read when used."""

    def __init__(self, table: Mapping, value: Callable = lambda entry: entry,
                 keep: Callable[[object], bool] = lambda entry: True):
        self._table, self._value, self._keep = table, value, keep

    def __getitem__(self, name: str):
        entry = self._table[name]
        if not self._keep(entry):
            raise KeyError(name)
        return self._value(entry)

    def __iter__(self) -> Iterator[str]:
        return iter(Names(self._table, self._keep))

    def __len__(self) -> int:
        return len(Names(self._table, self._keep))

    def __repr__(self) -> str:
        return repr(dict(self))


_BUILT_IN_MODES, _BUILT_IN_CODECS = _modules(modes), _modules(codecs)
_PLUGINS: dict[str, tuple[ModuleType, Plugin]] = {}  # module name -> (module, identity)
_TABLES: tuple[dict, dict, dict] = ({}, {}, {})
_WHERE: dict[str, dict[str, str]] = {}
ACTIVATION_MODES, COMPARISONS, GRAD_CODECS = (MappingProxyType(t) for t in _TABLES)
PLUGINS: Mapping[str, Plugin] = View(_PLUGINS, value=lambda entry: entry[1])


def _rebuild(plugins: dict[str, tuple[ModuleType, Plugin]]) -> None:
    """Fill the live tables from the built-ins and `plugins` (all or nothing)."""
    extra = [module for module, _ in plugins.values()]
    built = _build(_BUILT_IN_MODES + extra, _BUILT_IN_CODECS + extra)
    for table, new in zip(_TABLES, built[:3], strict=True):
        table.clear()
        table.update(new)
    _WHERE.clear()
    _WHERE.update(built[3])
    if plugins is not _PLUGINS:
        _PLUGINS.clear()
        _PLUGINS.update(plugins)


def _register(module: ModuleType, plugin: Plugin) -> Plugin:
    """Add a plug-in module's declarations to the live tables; RegistryError naming it."""
    known = _PLUGINS.get(module.__name__)
    if known is not None:
        return known[1]
    declared = [n for n in ("MODE", "COMPARISONS", "CODEC") if getattr(module, n, None)]
    if not declared:
        raise RegistryError(f"plug-in {plugin.source}: module {module.__name__} declares "
                            f"none of MODE, COMPARISONS, CODEC (docs/plugins.md)")
    for c in getattr(module, "COMPARISONS", ()):
        if getattr(c, "speedup_reference", False):
            raise RegistryError(f"plug-in {plugin.source}: comparison {c.name!r} may not be "
                                f"a speed-up reference (the reports' columns are fixed)")
    try:
        _rebuild({**_PLUGINS, module.__name__: (module, plugin)})
    except RegistryError as err:
        raise RegistryError(f"plug-in {plugin.source}: {err}") from None
    return plugin


def load_plugins(sources: Iterable[str], base: Path | None = None) -> tuple[Plugin, ...]:
    """Import and register the plug-ins `sources` name (a .py file, relative to `base`
    or the working directory, or a module name); loading one twice is a no-op.
    PluginError (RegistryError) naming the plug-in when it cannot be loaded or breaks
    the contract (a colliding name included)."""
    out = []
    for source in sources:
        module, resolved = import_source(source, base)
        try:
            out.append(_register(module, identify(module, resolved)))
        except RegistryError:
            if resolved.endswith(".py"):  # refused: a corrected file may load later
                sys.modules.pop(module.__name__, None)
            raise
    return tuple(out)


def unload_plugins(plugins: Iterable[Plugin]) -> None:
    """Remove these plug-ins from the tables (a file plug-in from sys.modules too)."""
    names = {p.module for p in plugins}
    _rebuild({n: entry for n, entry in _PLUGINS.items() if n not in names})
    for p in plugins:
        if p.source.endswith(".py"):
            sys.modules.pop(p.module, None)


def require_plugins(plugins: Iterable[Plugin]) -> None:
    """What a worker does with its run config's plug-ins: load each (an installed one is
    loaded already) and refuse one whose source here differs from the run's, naming it."""
    for wanted in plugins:
        entry = _PLUGINS.get(wanted.module)
        if entry is None:
            (loaded,) = load_plugins([wanted.source])
        else:
            loaded = entry[1]
        if loaded.sha256 != wanted.sha256:
            raise PluginError(f"plug-in {wanted.module}: this host's copy ({loaded}) is not "
                              f"the one the run was planned with ({wanted}); give every "
                              f"host the same source (docs/plugins.md)")


def plugins_of(comparison: str, grad_mode: str | None = None) -> tuple[Plugin, ...]:
    """The plug-ins a comparison's cells run: those declaring it, its forward and backward
    modes, and `grad_mode` when it has a gradient codec; () for the built-ins'."""
    c = COMPARISONS[comparison]
    modules = [_WHERE["comp"][comparison], _WHERE["act"][c.forward], _WHERE["act"][c.backward]]
    if c.data_parallel and grad_mode is not None:
        modules.append(_WHERE["grad"][grad_mode])
    return tuple(_PLUGINS[m][1] for m in dict.fromkeys(modules) if m in _PLUGINS)


_rebuild({})
# the built-in names (a profile needs an entry for each; a plug-in's may be missing)
BUILT_IN_MODES, BUILT_IN_CODECS = tuple(ACTIVATION_MODES), tuple(GRAD_CODECS)
for _module, _version in entry_point_modules():
    _register(_module, identify(_module, _module.__name__, _version))
# the comparisons every speed-up is also shown over (Comparison.speedup_reference), by rank
SPEEDUP_REFERENCES = tuple(name for name, c in COMPARISONS.items() if c.speedup_reference)
