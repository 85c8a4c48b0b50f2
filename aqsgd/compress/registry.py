"""The registries of compression, filled on first use: `ACTIVATION_MODES` (every `MODE` of
aqsgd/compress/modes/: `CompressionConfig.mode`), `COMPARISONS` (every `COMPARISONS` entry
there: the modes a sweep, a cell and a table name; `SPEEDUP_REFERENCES` those the reports
divide by), `GRAD_CODECS` (every `CODEC` of aqsgd/compress/codecs/), then the same of every
plug-in (docs/plugins.md): installed packages' when a table is first used, a file's or
module's on `load_plugins`.

    ACTIVATION_MODES["aqsgd"].uses_cache        # True (the first use fills every table)
    load_plugins(["my_mode.py"]); plugins_of("my_mode")   # its Plugin identities
    BROKEN_PLUGINS                               # installed plug-ins left out, and why

Each is ordered by rank, read-only and live (a plug-in loaded later appears in it, and in
every `Names`/`View` derived from it). A conflict or a defect (aqsgd.compress.contract,
and one round trip of each new mode, aqsgd.compress.trial) raises `RegistryError` naming
the module; a broken installed plug-in is left out with a PluginWarning naming its entry
point. Importing this module imports aqsgd.compress.plugins only (Note [first use]).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import threading
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import ModuleType

from aqsgd.compress.plugins import (
    Plugin,
    PluginError,
    PluginWarning,
    RegistryError,
    entry_point_name,
    identify,
    import_entry_point,
    import_source,
    installed_entry_points,
)
from aqsgd.compress.tables import Live, Names, View

__all__ = ["RegistryError", "ACTIVATION_MODES", "COMPARISONS", "GRAD_CODECS",
           "SPEEDUP_REFERENCES", "BUILT_IN_MODES", "BUILT_IN_CODECS", "PLUGINS",
           "BROKEN_PLUGINS", "Names", "View", "build_registries", "load_plugins",
           "require_plugins", "unload_plugins", "plugins_of", "origin", "not_loaded_note"]

# Note [first use]: importing this module registers nothing, so that one broken installed
# plug-in cannot break `import aqsgd...`. The first use of any table below (`_fill`, once a
# process, under a lock) imports the built-in modules of aqsgd/compress/modes/ and
# codecs/, checks and registers them, runs one round trip of each built-in mode, then
# imports and registers each installed plug-in, leaving out (with a PluginWarning) one
# that fails. The round trip (aqsgd.compress.trial) builds the mode's CompressionConfig,
# whose module reads these tables: it is imported by name when it first runs, by which
# time this module is whole and the mode under check already in the tables (a use of a
# table from inside the fill sees the tables as they are so far).
_TRIAL = "aqsgd.compress.trial"
_TABLES: tuple[dict, dict, dict] = ({}, {}, {})  # activation modes, comparisons, codecs
_WHERE: dict[str, dict[str, str]] = {}  # 'act' / 'comp' / 'grad' -> name -> module name
_PLUGINS: dict[str, tuple[ModuleType, Plugin]] = {}  # module name -> (module, identity)
_BROKEN: dict[str, PluginError] = {}  # entry-point name -> why it was left out
_BROKEN_MODULES: dict[str, PluginError] = {}  # the same by the entry point's module
_BUILT_IN: dict[str, list[ModuleType]] = {}  # 'modes' / 'codecs' -> their modules
_BUILT_IN_NAMES: tuple[dict, dict] = ({}, {})  # built-in modes, codecs
_TRIED: set[type] = set()  # modes whose round trip passed in this process


class _Filling:
    """Whether the tables are filled (Note [first use]): `done`, or `running` now."""

    def __init__(self) -> None:
        self.lock, self.done, self.running = threading.RLock(), False, False


_STATE = _Filling()


def _fill() -> None:
    """Fill every table on first use (Note [first use])."""
    if _STATE.done:
        return
    with _STATE.lock:
        if _STATE.done or _STATE.running:
            return
        _STATE.running = True
        try:
            _fill_built_ins()
            for point in installed_entry_points():
                _register_entry_point(point)
            _STATE.done = True
        finally:
            _STATE.running = False


def not_loaded_note() -> str:
    """'' or, when installed plug-ins were left out, a sentence naming each (for an error
    about a name that is not registered: it may be theirs)."""
    _fill()
    if not _BROKEN:
        return ""
    return ("; installed plug-ins left out (their names are not registered): "
            + "; ".join(str(err) for err in _BROKEN.values()))


_KINDS = ("activation mode", "comparison", "gradient codec")  # of _TABLES, for errors
ACTIVATION_MODES, COMPARISONS, GRAD_CODECS = (
    Live(table, _fill, kind, not_loaded_note) for table, kind in zip(_TABLES, _KINDS, strict=True))
PLUGINS: Mapping[str, Plugin] = View(Live(_PLUGINS, _fill, "plug-in"),
                                     value=lambda entry: entry[1])
# installed plug-ins left out: entry-point name -> the error naming it (Note [first use])
BROKEN_PLUGINS: Mapping[str, str] = View(Live(_BROKEN, _fill, "entry point"), value=str)
# the built-in names (a profile needs an entry for each; a plug-in's may be missing)
BUILT_IN_MODES, BUILT_IN_CODECS = (Names(Live(t, _fill, "built-in")) for t in _BUILT_IN_NAMES)
# the comparisons every speed-up is also shown over (Comparison.speedup_reference), by rank
SPEEDUP_REFERENCES = Names(COMPARISONS, lambda c: c.speedup_reference)


# --- building the tables --------------------------------------------------------------------
def _modules(package: ModuleType) -> list[ModuleType]:
    names = sorted(info.name for info in pkgutil.iter_modules(package.__path__))
    return [importlib.import_module(f"{package.__name__}.{name}") for name in names]


def build_registries(mode_modules: Iterable[ModuleType], codec_modules: Iterable[ModuleType]
                     ) -> tuple[Mapping, Mapping, Mapping]:
    """(activation modes, comparisons, gradient codecs) declared by these modules
    (aqsgd.compress.contract.build_registries; no round trip, the tables unchanged)."""
    from aqsgd.compress.contract import build_registries as build
    return build(mode_modules, codec_modules)


def _rebuild(plugins: dict[str, tuple[ModuleType, Plugin]]) -> None:
    """Fill the live tables from the built-ins and `plugins` (all or nothing)."""
    from aqsgd.compress.contract import build_tables
    extra = [module for module, _ in plugins.values()]
    built = build_tables(_BUILT_IN["modes"] + extra, _BUILT_IN["codecs"] + extra)
    for table, new in zip(_TABLES, built[:3], strict=True):
        table.clear()
        table.update(new)
    _WHERE.clear()
    _WHERE.update(built[3])
    if plugins is not _PLUGINS:
        _PLUGINS.clear()
        _PLUGINS.update(plugins)


def _round_trips(module_names: Iterable[str]) -> None:
    """One round trip of each registered mode these modules declare, once a process."""
    round_trip = importlib.import_module(_TRIAL).round_trip  # Note [first use]
    for name, mode in _TABLES[0].items():
        if _WHERE["act"][name] in module_names and mode not in _TRIED:
            round_trip(mode, _WHERE["act"][name])
            _TRIED.add(mode)


def _fill_built_ins() -> None:
    from aqsgd.compress import codecs, modes
    _BUILT_IN.update(modes=_modules(modes), codecs=_modules(codecs))
    _rebuild({})
    for names, table in zip(_BUILT_IN_NAMES, (_TABLES[0], _TABLES[2]), strict=True):
        names.clear()
        names.update(table)
    _round_trips([module.__name__ for module in _BUILT_IN["modes"]])


def _register(module: ModuleType, plugin: Plugin) -> Plugin:
    """Add a plug-in module's declarations to the live tables and run its modes' round
    trips; RegistryError naming it, the tables as they were."""
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
    before = dict(_PLUGINS)
    try:
        _rebuild({**before, module.__name__: (module, plugin)})
        _round_trips([module.__name__])
    except RegistryError as err:
        _rebuild(before)
        raise RegistryError(f"plug-in {plugin.source}: {err}") from None
    return plugin


def _register_entry_point(point) -> None:
    """Register an installed plug-in, or leave it out with a PluginWarning naming its
    entry point (Note [first use])."""
    try:
        module, version = import_entry_point(point)
        _register(module, identify(module, module.__name__, version))
    except PluginError as err:
        if entry_point_name(point) not in str(err):
            err = type(err)(f"{entry_point_name(point)}: {err}")
        _BROKEN[point.name] = err
        _BROKEN_MODULES[point.module] = err
        warnings.warn(f"{err}; the suite runs without it", PluginWarning, stacklevel=2)


# --- plug-ins -------------------------------------------------------------------------------
def load_plugins(sources: Iterable[str], base: Path | None = None) -> tuple[Plugin, ...]:
    """Import and register the plug-ins `sources` name (a .py file, relative to `base`
    or the working directory, or a module name); loading one twice is a no-op.
    PluginError (RegistryError) naming the plug-in when it cannot be loaded or breaks
    the contract (a colliding name included); an installed one left out: its entry point's
    error again."""
    _fill()
    out = []
    for source in sources:
        broken = _BROKEN_MODULES.get(source) or _BROKEN.get(source)
        if broken is not None:
            raise PluginError(str(broken))
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
    _fill()
    plugins = list(plugins)
    names = {p.module for p in plugins}
    _rebuild({n: entry for n, entry in _PLUGINS.items() if n not in names})
    for p in plugins:
        if p.source.endswith(".py"):
            sys.modules.pop(p.module, None)


def require_plugins(plugins: Iterable[Plugin]) -> None:
    """What a worker does with its run config's plug-ins: load each (an installed one is
    loaded already) and refuse one whose source here differs from the run's, naming it."""
    _fill()
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


def origin(mode: str) -> str:
    """Where a registered activation mode comes from, for an error raised while it runs:
    'plug-in randproj 0.1 (/abs/randproj.py, sha256 ...)' or 'built-in
    aqsgd.compress.modes.aqsgd'."""
    _fill()
    module = _WHERE["act"][mode]
    entry = _PLUGINS.get(module)
    return f"plug-in {entry[1]}" if entry is not None else f"built-in {module}"
