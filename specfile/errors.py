"""One error for every mistake in a configuration file or value, and its one format.

    field 'link.rate_mbit': expected a number in Mbit/s or null, got '100mbps'
    field 'layout.stages': expected an integer in [1, 64] (pipeline stages), got 0
    field 'workload': Workload.steps must be >= 1, got 0     a declared range (`bound`)
    field 'workload.stepz': unknown workload field 'stepz' (known: lr, preset, ...)
    missing field 'modes'

A dataclass's `__post_init__` raises `SpecError.at(field, expected, value)` with the field
relative to itself; whoever knows where that dataclass sits in the file extends the path
(`within`), and `specfile.raising` adds the file's name.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import MISSING

__all__ = ["SpecError", "Unit", "base_type", "bound", "constraints", "describe", "expected",
           "from_pydantic", "unwrap_optional"]

Kind = Literal["type", "value", "missing", "unknown"]


def join(prefix: str, field: str) -> str:
    """'links[0]' + 'dst' -> 'links[0].dst'; either may be '' (the object itself)."""
    if not prefix or not field:
        return prefix or field
    return f"{prefix}{field}" if field.startswith("[") else f"{prefix}.{field}"


class SpecError(ValueError):
    """A value that does not fit its specification.

    `field` is the dotted path of the offending value ('' = the whole object; None = a
    finished message that names no field, left as it is). `kind`: 'type' (wrong type),
    'value' (the type fits, the value does not), 'missing' (a required key is absent) or
    'unknown' (a key that is not a field; `known` lists the fields there).
    """

    def __init__(self, text: str, field: str | None = None, kind: Kind = "value",
                 known: tuple[str, ...] = ()) -> None:
        super().__init__(text)
        self.text, self.field, self.kind, self.known = text, field, kind, known

    @classmethod
    def at(cls, field: str, expected: str, value: Any) -> SpecError:
        return cls(f"expected {expected}, got {value!r}", field)

    def within(self, prefix: str) -> SpecError:
        """The same error, its field seen from `prefix` (the path of the object that raised it)."""
        if self.field is None:
            return self
        return type(self)(self.text, join(prefix, self.field), self.kind, self.known)

    def __str__(self) -> str:
        return self.text if self.field is None else describe(self)


def describe(err: SpecError) -> str:
    """The one format, without the file name (which `specfile.raising` puts in front):

        field 'PATH': expected WHAT, got VALUE     a wrong type or value
        field 'PATH': MESSAGE                      a __post_init__'s own words
        missing field 'PATH'
        field 'PATH': unknown SECTION field 'KEY' (known: ...)   ('unknown key' at the top)

    PATH '' (the whole document) reads '(top level)'; a __post_init__ message about the
    whole document is the message alone.
    """
    where = err.field or "(top level)"
    if err.kind == "missing":
        return f"missing field '{where}'"
    if err.kind == "unknown":
        parent, _, key = where.rpartition(".")
        section = parent.rsplit(".", 1)[-1].split("[", 1)[0]
        what = f"unknown {section} field" if section else "unknown key"
        return f"field '{where}': {what} '{key}' (known: {', '.join(err.known)})"
    if err.kind == "value" and not err.field:
        return err.text
    return f"field '{where}': {err.text}"


@dataclass(frozen=True)
class Unit:
    """`Annotated[float, Unit("Mbit/s")]`: errors say 'expected a number in Mbit/s'."""

    name: str


# ------------------------------------------------------------ from pydantic

_NAMES = {bool: "true/false", int: "an integer", float: "a number", str: "a string",
          type(None): "null"}  # fmt: skip
_PLURALS = {bool: "true/false values", int: "integers", float: "numbers", str: "strings"}


_RANGE_ERRORS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal")


def from_pydantic(root: type, error: dict) -> SpecError:
    """One entry of `ValidationError.errors()` (validating `root`) as a SpecError."""
    loc, kind = tuple(error["loc"]), error["type"]
    if kind == "value_error":  # a ValueError raised by a __post_init__ on the way
        path = _locate(root, loc)[0]
        cause = error["ctx"]["error"]
        if isinstance(cause, SpecError) and cause.field is not None:
            return cause.within(path)
        return SpecError(str(cause), path)
    if kind in ("unexpected_keyword_argument", "extra_forbidden"):
        path, _, parent = _locate(root, loc)
        known = sorted(f.name for f in dataclasses.fields(parent) if f.init) if parent else []
        return SpecError(f"unknown key {loc[-1]!r}", path, "unknown", tuple(known))
    if kind.startswith("missing") and loc and isinstance(loc[-1], int):
        loc = loc[:-1]  # a list too short for its tuple: report the list
    elif kind.startswith("missing"):
        return SpecError("required, but missing", _locate(root, loc)[0], "missing")
    if kind in _RANGE_ERRORS:  # a declared range (specfile.declared): check_fields' words,
        # on the dataclass that declares it, as its __post_init__ would say them
        at = max(k for k, key in enumerate(loc) if isinstance(key, str))
        _, hint, parent = _locate(root, loc)
        name = f"{loc[at]}{'[]' if at < len(loc) - 1 else ''}"
        owner = f"{parent.__name__}.{name}" if parent else name
        return SpecError(f"{owner} must be {bound(hint)}, got {error['input']!r}",
                         _locate(root, loc[:at])[0])
    path, hint, _ = _locate(root, loc)
    return SpecError(f"expected {expected(hint)}, got {error['input']!r}", path, "type")


def _bare(hint: Any) -> Any:
    return typing.get_args(hint)[0] if typing.get_origin(hint) is Annotated else hint


def _members(hint: Any) -> list[Any]:
    """The alternatives of a union (None and MISSING left out); [hint] for anything else."""
    hint = _bare(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return [_bare(a) for a in typing.get_args(hint) if a is not type(None) and a is not MISSING]
    return [hint]


def _locate(root: type, loc: tuple) -> tuple[str, Any, type | None]:
    """Follow pydantic's error location through the type hints from `root`:
    (the path as written in the file, the hint there, the dataclass holding it)."""
    path, hint, parent = "", root, None
    for key in loc:
        options = _members(hint)
        if isinstance(key, int):
            seq = [h for h in options if typing.get_origin(h) in (tuple, list)]
            if not seq:
                break
            args = typing.get_args(seq[0])
            homogeneous = len(args) == 1 or args[-1] is Ellipsis
            hint = args[0] if homogeneous else args[min(key, len(args) - 1)]
            path += f"[{key}]"
            continue
        classes = [h for h in options if dataclasses.is_dataclass(h)]
        if classes:
            parent = classes[0]
            hint = typing.get_type_hints(parent, include_extras=True).get(key, Any)
        elif len(options) > 1:
            continue  # pydantic names the union member it tried; the path stays at the union
        else:
            args = typing.get_args(options[0])
            hint = args[1] if typing.get_origin(options[0]) is dict and args else Any
        path = join(path, str(key))
    return path, hint, parent


# ------------------------------------------------------------ ranges


def constraints(hint: Any) -> list:
    """The constraint objects of an Annotated hint (a FieldInfo's unpacked), [] otherwise;
    `X | None` looks inside X."""
    hint = unwrap_optional(hint)
    if typing.get_origin(hint) is not Annotated:
        return []
    out = []
    for m in hint.__metadata__:
        out.extend(getattr(m, "metadata", [m]))
        out.append(m)
    return out


def unwrap_optional(hint: Any) -> Any:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return hint


def base_type(hint: Any) -> Any:
    hint = unwrap_optional(hint)
    return typing.get_args(hint)[0] if typing.get_origin(hint) is Annotated else hint


def bound(hint: Any) -> str:
    """The range a constrained type allows, in words: '>= 1', '> 0', 'in 1..8' (integers),
    'in [0, 1)', 'in (0, 1)'; '' when it has none."""
    limits = {}
    for m in constraints(hint):
        for key in ("ge", "gt", "le", "lt"):
            if getattr(m, key, None) is not None:
                limits[key] = getattr(m, key)
    low = next(((k, v) for k, v in limits.items() if k in ("ge", "gt")), None)
    high = next(((k, v) for k, v in limits.items() if k in ("le", "lt")), None)
    if low and high:
        if base_type(hint) is int and (low[0], high[0]) == ("ge", "le"):
            return f"in {low[1]}..{high[1]}"
        return (f"in {'[' if low[0] == 'ge' else '('}{low[1]:g}, "
                f"{high[1]:g}{']' if high[0] == 'le' else ')'}")
    if low:
        return f"{'>=' if low[0] == 'ge' else '>'} {low[1]:g}"
    if high:
        return f"{'<=' if high[0] == 'le' else '<'} {high[1]:g}"
    return ""


def expected(hint: Any) -> str:
    """What a value of type `hint` looks like in a file: 'an integer', 'one of a|b'."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        units = [m.name for m in hint.__metadata__ if isinstance(m, Unit)]
        return expected(args[0]) + "".join(f" in {u}" for u in units)
    if origin is Literal:
        return "one of " + "|".join(map(str, args))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(expected(a) for a in args if a is not MISSING)
    if hint in _NAMES:
        return _NAMES[hint]
    if dataclasses.is_dataclass(hint) or dict in (hint, origin):
        return "a mapping"
    if origin is tuple and args and args[-1] is not Ellipsis:
        kinds = {_bare(a) for a in args}
        noun = _PLURALS.get(kinds.pop(), "values") if len(kinds) == 1 else "values"
        return f"a list of {len(args)} {noun}"
    if tuple in (hint, origin) or list in (hint, origin):
        return "a list"
    return "any value" if hint is Any else getattr(hint, "__name__", str(hint))
