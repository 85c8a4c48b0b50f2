"""Compressor plug-ins: a module outside the suite that declares what a built-in module of
aqsgd/compress/modes/ or codecs/ declares (`MODE`, `COMPARISONS`, `CODEC`), found and
identified here; aqsgd.compress.registry registers them.

    import_source("examples/plugins/randproj.py")   # a file: its module, imported
    import_source("mypkg.sketch")                    # a module on sys.path
    installed_entry_points()                         # installed packages' ENTRY_POINT_GROUP
    import_entry_point(point)                        # (module, version), or PluginError
    identify(module, source)                         # Plugin: name, version, source hash
    python -m aqsgd.compress.plugins SOURCE...       # this host's copies, as JSON
    python -m aqsgd.compress.plugins --expect JSON   # exit 1 naming each it lacks
    copy_problems(wanted, copies)                    # why a host cannot run them

A `Plugin` is a plug-in's identity, carried by a cell's spec and run config: an edit
re-measures only its cells; a worker, SSH host, container or Slurm node whose copy
differs or is missing is refused (docs/plugins.md). `PluginError` (and `RegistryError`, a
contract broken) is what the CLI turns into exit status 2. Imports the standard library
only.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import platform
import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType

__all__ = ["ENTRY_POINT_GROUP", "Plugin", "PluginError", "PluginWarning", "RegistryError",
           "copy_problems", "entry_point_modules", "entry_point_name", "host_copies",
           "identify", "import_entry_point", "import_source", "installed_entry_points",
           "is_file_source"]

# the entry-point group an installed package lists its plug-in modules under
# (pyproject.toml: [project.entry-points."aqsgd.compressors"] NAME = "pkg.module")
ENTRY_POINT_GROUP = "aqsgd.compressors"


class PluginError(ValueError):
    """A plug-in that cannot be loaded or registered; the message names its module or file."""


class RegistryError(PluginError):
    """Two compressors that cannot both be registered, or one that is incomplete
    (aqsgd.compress.contract, aqsgd.compress.trial)."""


class PluginWarning(UserWarning):
    """An installed plug-in that the registry leaves out (it fails to import or breaks the
    contract): the suite runs without it; the message names its entry point."""


@dataclass(frozen=True)
class Plugin:
    """A plug-in's identity. `module`: its import name; `source`: what loads it again in a
    worker (a .py file's absolute path, or a module name); `version`: its `__version__`,
    else its distribution's, else ''; `sha256`: the first 16 hex digits of the hash of its
    source files (the file, or every .py file of its top-level package)."""

    module: str
    source: str
    version: str
    sha256: str

    def to_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        version = f" {self.version}" if self.version else ""
        return f"{self.module}{version} ({self.source}, sha256 {self.sha256})"


def is_file_source(source: str) -> bool:
    """A source names a file (ends in .py or holds a path separator), else a module."""
    return source.endswith(".py") or "/" in source


def _import_file(path: Path) -> ModuleType:
    """The module of the .py file `path`, imported under its stem."""
    name = path.stem
    loaded = sys.modules.get(name)
    if loaded is not None:
        if Path(getattr(loaded, "__file__", "") or "").resolve() == path:
            return loaded
        raise PluginError(f"plug-in file {path}: its module name {name!r} is taken by "
                          f"{getattr(loaded, '__file__', None) or 'a built-in module'}; "
                          f"rename the file")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        del sys.modules[name]
        raise PluginError(f"plug-in file {path}: importing it failed: "
                          f"{type(err).__name__}: {err}") from err
    return module


def import_source(source: str, base: Path | None = None) -> tuple[ModuleType, str]:
    """(module, source as a worker loads it again) of a `--plugin` value: a .py file (a
    relative path from `base`, default the working directory) or a module name."""
    if is_file_source(source):
        path = Path(source).expanduser()
        path = (Path(base or Path.cwd()) / path if not path.is_absolute() else path).resolve()
        if not path.is_file():
            raise PluginError(f"plug-in file {path} does not exist on this host (give a "
                              f".py file, or an importable module name)")
        return _import_file(path), str(path)
    try:
        return importlib.import_module(source), source
    except ImportError as err:
        raise PluginError(f"plug-in module {source!r} cannot be imported on this host "
                          f"({err}); install its package or give its .py file") from None


def installed_entry_points() -> list[importlib.metadata.EntryPoint]:
    """The ENTRY_POINT_GROUP entry points of the installed packages, by name (nothing is
    imported)."""
    points = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    return sorted(points, key=lambda p: p.name)


def entry_point_name(point: importlib.metadata.EntryPoint) -> str:
    """How an error names an entry point: its name, its value and its group."""
    return f"entry point {point.name!r} = {point.value!r} of group {ENTRY_POINT_GROUP}"


def import_entry_point(point: importlib.metadata.EntryPoint) -> tuple[ModuleType, str]:
    """(module, distribution version) of an entry point; a PluginError naming it (its
    name, value and group) when it names an object or its module fails to import."""
    where = entry_point_name(point)
    if point.attr:
        raise PluginError(f"{where}: must name a module ('pkg.module'), not an object")
    try:
        module = importlib.import_module(point.module)
    except Exception as err:
        raise PluginError(f"{where}: importing {point.module} failed: "
                          f"{type(err).__name__}: {err}") from err
    dist = getattr(point, "dist", None)
    return module, dist.version if dist is not None else ""


def entry_point_modules() -> list[tuple[ModuleType, str]]:
    """(module, distribution version) of every installed entry point, by entry-point
    name; a PluginError naming the first that fails."""
    return [import_entry_point(point) for point in installed_entry_points()]


def _source_files(module: ModuleType) -> tuple[Path, list[Path]]:
    """(root, files) of the plug-in's source: the module's file, or every .py file of
    its top-level package when it belongs to one."""
    top = sys.modules.get(module.__name__.partition(".")[0], module)
    if getattr(top, "__path__", None) and getattr(top, "__file__", None):
        root = Path(top.__file__).parent
        return root, sorted(root.rglob("*.py"))
    return Path(module.__file__).parent, [Path(module.__file__)]


def identify(module: ModuleType, source: str, dist_version: str = "") -> Plugin:
    """The identity of a loaded plug-in module (Plugin)."""
    digest = hashlib.sha256()
    root, files = _source_files(module)
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    version = str(getattr(module, "__version__", "") or dist_version)
    return Plugin(module.__name__, source, version, digest.hexdigest()[:16])


# --- a host's copies, for the launchers' host checks -----------------------------------------
def host_copies(sources: Iterable[str]) -> dict[str, dict[str, str]]:
    """This host's copy of each plug-in source, imported as a worker imports it:
    {source: {"sha256", "version"}}, or {source: {"error": why}} when it cannot be loaded."""
    out = {}
    for source in sources:
        try:
            found = identify(*import_source(source))
        except PluginError as err:
            out[source] = {"error": str(err)}
        else:
            out[source] = {"sha256": found.sha256, "version": found.version}
    return out


def copy_problems(wanted: Iterable[Plugin], copies: Mapping[str, Mapping[str, str]]
                  ) -> list[str]:
    """Why a host whose host_copies are `copies` cannot run the plug-ins `wanted`: one
    line per plug-in it lacks or has another copy of, naming the plug-in; [] when none."""
    out = []
    for p in wanted:
        found = copies.get(p.source, {"error": f"{p.source} was not looked for"})
        if "error" in found:
            out.append(f"plug-in {p.module}: {found['error']}")
        elif found["sha256"] != p.sha256:
            out.append(f"plug-in {p.module}: another copy of {p.source} (sha256 "
                       f"{found['sha256']}, here {p.sha256}); give every host the same source")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aqsgd.compress.plugins",
                                     description="Print this host's copy of each plug-in "
                                     "(sha256 and version, or why it cannot be loaded) as JSON.")
    parser.add_argument("sources", nargs="*", metavar="SOURCE",
                        help="a plug-in's .py file (absolute path) or module name")
    parser.add_argument("--expect", metavar="JSON", help="a JSON list of Plugin identities "
                        "(module, source, version, sha256): print nothing and exit 0 when "
                        "this host has the same copy of each, else exit 1 with a line per "
                        "plug-in it lacks or has another copy of, naming this host")
    args = parser.parse_args(argv)
    if args.expect is None:
        print(json.dumps(host_copies(args.sources)))
        return 0
    wanted = [Plugin(**entry) for entry in json.loads(args.expect)]
    problems = copy_problems(wanted, host_copies(p.source for p in wanted))
    for line in problems:
        print(f"{platform.node()}: {line}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
