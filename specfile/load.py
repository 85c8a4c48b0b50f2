"""Read a configuration file and validate its content into a frozen dataclass.

    raw = read_file(path, what="sweep file")        # YAML, or JSON for *.json
    with raising(source=str(path)):                  # any SpecError inside names the file
        spec = validate(SweepFile, raw)              # pydantic, then each __post_init__

The dataclasses stay plain stdlib dataclasses (built in code as cheaply as before, with
`dataclasses.replace` and `asdict`); pydantic only reads their type hints. The outermost
class of a file sets `__pydantic_config__ = SPEC_CONFIG`, and the dataclasses nested in it
take that configuration: no unknown keys, and no coercion ('100' is not a number, `yes` is
not a number, 2.5 is not an integer; an integer is a number and becomes a float).

read_file takes plain YAML only (specfile.plainyaml, Note [plain YAML]: no anchors, aliases
or merge keys, no key twice) and files of at most MAX_FILE_BYTES.
"""

from __future__ import annotations

import functools
import io
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import ConfigDict, TypeAdapter, ValidationError

from specfile.errors import SpecError, describe, from_pydantic
from specfile.plainyaml import PlainYamlError, load_plain

__all__ = ["MAX_FILE_BYTES", "SPEC_CONFIG", "json_schema", "raising", "read_file", "validate"]

T = TypeVar("T")

SPEC_CONFIG = ConfigDict(extra="forbid", strict=True)

_UNKNOWN_KEY = ("unexpected_keyword_argument", "extra_forbidden")
JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
# The largest file the suite ships or writes is under 8 KiB. The pure-Python loader that
# Note [plain YAML] needs reads 150-200 KiB/s on a 2-core machine, so a file at the bound
# is answered in about a second and a larger one at once.
MAX_FILE_BYTES = 256 * 2**10


def read_file(path: str | Path, *, error: Callable[[str], Exception] = SpecError,
              what: str = "file") -> Any:
    """The parsed content of a YAML file (JSON for a *.json name). A file that cannot be
    read, is larger than MAX_FILE_BYTES, is not UTF-8 text, does not parse, or holds what
    Note [plain YAML] refuses (anchors, aliases, merge keys, a key written twice) raises
    `error` naming the file."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            blob = f.read(MAX_FILE_BYTES + 1)  # never more than the bound into memory
    except OSError as e:
        raise error(f"cannot read {what} {path}: {e}") from None
    if len(blob) > MAX_FILE_BYTES:
        raise error(f"{path}: larger than {MAX_FILE_BYTES // 2**10} KiB, the limit for a "
                    f"{what} (they are a few KiB); is this the right file?")
    try:
        text = blob.decode("utf-8-sig")  # a byte-order mark some editors write is dropped
    except UnicodeDecodeError as e:
        raise error(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    if path.suffix == ".json":
        return _read_json(text, path, error)
    stream = io.StringIO(text)
    stream.name = str(path)  # yaml names the stream in its "in FILE, line L" marks
    try:
        return load_plain(stream)
    except PlainYamlError as e:
        raise error(f"{path}: {e}") from None
    except yaml.YAMLError as e:  # PyYAML's message spans lines; one line reads better
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        raise error(f"{path}: not valid YAML: {'; '.join(lines)}") from None


def _read_json(text: str, path: Path, error: Callable[[str], Exception]) -> Any:
    """JSON with the rules of Note [plain YAML] that apply to it: no key twice in one
    object (json gives no positions, so the message names the key and the object's keys),
    no nesting so deep that the parser runs out of stack."""
    def unique(pairs: list[tuple[str, Any]]) -> dict:
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise error(f"{path}: key {key!r} appears twice in the object with keys "
                            f"{sorted(seen)} (the second would replace the first); keep one")
            seen.add(key)
        return dict(pairs)

    try:
        return json.loads(text, object_pairs_hook=unique)
    except json.JSONDecodeError as e:
        raise error(f"{path}: not valid JSON: {e}") from None
    except RecursionError:
        raise error(f"{path}: nested too deep to read (mappings and lists inside one "
                    "another)") from None


@functools.cache
def _adapter(cls: type) -> TypeAdapter:
    config = getattr(cls, "__pydantic_config__", {})
    assert config.get("extra") == "forbid" and config.get("strict"), \
        f"{cls.__name__} is validated from files: it needs __pydantic_config__ = SPEC_CONFIG"
    return TypeAdapter(cls)


def validate(cls: type[T], data: Any) -> T:
    """`data` (parsed YAML or JSON) as a `cls`: pydantic checks keys and types against the
    type hints, then each dataclass's `__post_init__` checks the values. Any mistake raises
    a SpecError whose field is the path in `data`."""
    try:
        # Strict mode takes a mapping for a dataclass only from JSON (from Python objects it
        # wants an instance), so the data goes back to JSON text first. read_file refuses
        # anchors and aliases (Note [plain YAML]), so no shared subtree of a file is
        # written out more than once here.
        text = json.dumps(data, default=str)
    except (TypeError, ValueError) as e:  # keys that are not names; data that contains itself
        raise SpecError(f"expected plain mappings, lists and values: {e}", "") from None
    try:
        return _adapter(cls).validate_json(text)
    except ValidationError as e:
        # One mistake is reported: a misspelt key also leaves its field missing, and the
        # unknown key is what to fix, so unknown keys come first.
        errors = sorted(e.errors(), key=lambda err: err["type"] not in _UNKNOWN_KEY)
        raise from_pydantic(cls, errors[0]) from None


@contextmanager
def raising(error: Callable[[str], Exception] = SpecError, source: str | None = None,
            render: Callable[[SpecError], str] = describe) -> Iterator[None]:
    """Inside the block, a SpecError that names a field becomes `error`, its message
    `render(err)` (the one format by default) after `source: ` (the file)."""
    try:
        yield
    except SpecError as e:
        if e.field is None:
            raise
        message = render(e)
        raise error(f"{source}: {message}" if source else message) from None


def json_schema(cls: type) -> dict:
    """The JSON Schema of files that validate as `cls` (for editors), from the same types."""
    return {"$schema": JSON_SCHEMA_DIALECT, **_adapter(cls).json_schema()}
