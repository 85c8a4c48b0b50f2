"""Settings declared once: a dataclass field's constrained type (`Annotated[int,
Field(ge=1, description="...")]`) is what files are validated against, what a value
built in code is checked against, and what its command-line flag is made from.

    Stages = Annotated[int, Field(ge=1, description="pipeline stages"), Default(2)]
    stages: Stages = setting(Stages)              # the one default, from the declaration
    def __post_init__(self): check_fields(self)   # 'Workload.stages must be >= 1, got 0'
    add_flags(parser, Workload, ("steps", "seed"))  # --steps N (help: description, default)

A setting two classes share (the worker's config and the harness's workload) is one
such `Annotated` alias with its `Default`: both classes' fields are `setting(Alias)`, so
neither can drift (`declaration(cls, name)` finds it again; a test walks them).

`bound(hint)` is the one wording of a range ('>= 1', 'in 1..8', 'in (0, 1)'); specfile's
pydantic errors use it too, so a file and a value built in code fail with the same words.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import typing
from collections.abc import Iterable
from typing import Annotated, Any

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError

from specfile.errors import base_type, bound, constraints, expected, unwrap_optional

__all__ = ["Default", "add_flags", "bound", "check_fields", "declaration", "declared_default",
           "declared_fields", "description", "flag_fields", "or_none", "setting"]

_STRICT = ConfigDict(strict=True)


@dataclasses.dataclass(frozen=True)
class Default:
    """`Annotated[int, Field(ge=1), Default(2)]`: the setting's one default (pydantic
    ignores it; `setting` makes it the dataclass field's default)."""

    value: Any


def declared_default(hint: Any) -> Any:
    """The `Default` value of a declared type; a TypeError when it declares none."""
    values = [m.value for m in constraints(hint) if isinstance(m, Default)]
    if not values:
        raise TypeError(f"{hint!r} declares no Default(...)")
    return values[-1]


def setting(hint: Any) -> Any:
    """The dataclass field of a declared setting, `name: Hint = setting(Hint)`: its
    default is the declaration's, and the declaration rides in the field's metadata."""
    return dataclasses.field(default=declared_default(hint), metadata={"declaration": hint})


def or_none(hint: Any, none: str) -> Any:
    """Declared type `hint` as an optional setting whose default None means `none`: the
    same type and range, its help ending '(none: NONE)'."""
    base, *meta = typing.get_args(hint)
    text = f"{description(hint)} (none: {none})"
    return Annotated[(base, *meta, Field(description=text), Default(None))] | None


def declaration(cls: type, name: str) -> Any:
    """The declared type of field `name` of dataclass `cls` when it was made by `setting`,
    else None."""
    field = next(f for f in dataclasses.fields(cls) if f.name == name)
    return field.metadata.get("declaration")


def description(hint: Any) -> str:
    """The one line of help of a declared type ('' when it has none)."""
    texts = [m.description for m in constraints(hint) if getattr(m, "description", None)]
    return texts[-1] if texts else ""


@functools.cache
def declared_fields(cls: type) -> dict[str, tuple[Any, TypeAdapter]]:
    """{field: (hint, strict validator)} of the fields of dataclass `cls` declared with
    Annotated constraints (plain fields are the file schema's alone)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    return {f.name: (hints[f.name], TypeAdapter(_item(hints[f.name]), config=_STRICT))
            for f in dataclasses.fields(cls) if constraints(_item(hints[f.name]))}


def _item(hint: Any) -> Any:
    """X of `tuple[X, ...]` (each item is declared), else `hint`."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) is tuple and len(args) == 2 and args[1] is Ellipsis:
        return args[0]
    return hint


def check_fields(obj: Any) -> None:
    """Check each declared field of dataclass `obj` against its type and range (what a
    file is validated against, for values built in code): a TypeError or ValueError
    that reads 'Class.field must be BOUND, got VALUE'."""
    for name, (hint, adapter) in declared_fields(type(obj)).items():
        items = _item(hint) is not hint  # tuple[X, ...]: each item checked as an X
        where = f"{type(obj).__name__}.{name}{'[]' if items else ''}"
        hint = _item(hint)
        for value in getattr(obj, name) if items else (getattr(obj, name),):
            try:
                adapter.validate_python(value)
            except ValidationError as e:
                if e.errors()[0]["type"].endswith("_type"):
                    raise TypeError(f"{where} must be {expected(hint)}, got {value!r}") from None
                raise ValueError(f"{where} must be {bound(hint) or expected(hint)}, "
                                 f"got {value!r}") from None


def flag_fields(cls: type, leave_out: Iterable[str] = ()) -> tuple[str, ...]:
    """The fields of `cls` declared with a description (its settings), in order, but for
    `leave_out`: those a command line offers as flags."""
    hints = typing.get_type_hints(cls, include_extras=True)
    return tuple(f.name for f in dataclasses.fields(cls)
                 if f.name not in leave_out and description(hints[f.name]))


def add_flags(parser: argparse.ArgumentParser, cls: type, names: Iterable[str], *,
              unset: dict[str, str] | None = None) -> None:
    """A `--field-name` option per field of `cls` in `names`: its type, default and help
    (the declaration's description, then '(default ...)'); a true/false field is
    `--name/--no-name`. `unset`: fields whose flag defaults to None, each with what
    leaving it out means. An optional string field reads 'none' as None."""
    unset = unset or {}
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls, include_extras=True)
    for name in names:
        hint = hints[name]
        kind = base_type(hint)
        default = None if name in unset else defaults[name]
        shown = unset.get(name) or ("none" if default is None else str(default))
        flag, help = f"--{name.replace('_', '-')}", f"{description(hint)} (default: {shown})"
        if kind is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default,
                                help=help)
            continue
        if typing.get_origin(kind) is typing.Literal:  # one of its values
            parser.add_argument(flag, choices=typing.get_args(kind), default=default, help=help)
            continue
        if kind is str and unwrap_optional(hint) is not hint:  # str | None
            kind = _none_or_str
        parser.add_argument(flag, type=kind, default=default, help=help)


def _none_or_str(text: str) -> str | None:
    return None if text in ("none", "") else text
