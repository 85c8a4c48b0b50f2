"""Read a configuration file and validate its content into a frozen dataclass.

    raw = read_file(path, what="sweep file")        # YAML, or JSON for *.json
    with raising(source=str(path)):                  # any SpecError inside names the file
        spec = validate(SweepFile, raw)              # pydantic, then each __post_init__

The dataclasses stay plain stdlib dataclasses (built in code as cheaply as before, with
`dataclasses.replace` and `asdict`); pydantic only reads their type hints. The outermost
class of a file sets `__pydantic_config__ = SPEC_CONFIG`, and the dataclasses nested in it
take that configuration: no unknown keys, and no coercion ('100' is not a number, `yes` is
not a number, 2.5 is not an integer; an integer is a number and becomes a float).
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

__all__ = ["SPEC_CONFIG", "json_schema", "raising", "read_file", "validate"]

T = TypeVar("T")

SPEC_CONFIG = ConfigDict(extra="forbid", strict=True)

_UNKNOWN_KEY = ("unexpected_keyword_argument", "extra_forbidden")
JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def read_file(path: str | Path, *, error: Callable[[str], Exception] = SpecError,
              what: str = "file") -> Any:
    """The parsed content of a YAML file (JSON for a *.json name). A file that cannot be
    read, is not UTF-8 text or does not parse raises `error` naming the file."""
    path = Path(path)
    try:
        blob = path.read_bytes()
    except OSError as e:
        raise error(f"cannot read {what} {path}: {e}") from None
    try:
        text = blob.decode("utf-8-sig")  # a byte-order mark some editors write is dropped
    except UnicodeDecodeError as e:
        raise error(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    if path.suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise error(f"{path}: not valid JSON: {e}") from None
    stream = io.StringIO(text)
    stream.name = str(path)  # yaml names the stream in its "in FILE, line L" marks
    try:
        return yaml.safe_load(stream)
    except yaml.YAMLError as e:
        raise error(f"{path}: not valid YAML: {e}") from None


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
        # wants an instance), so the data goes back to JSON text first.
        text = json.dumps(data, default=str)
    except (TypeError, ValueError) as e:  # keys that are not names; a self-referencing anchor
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
