"""Settings declared once (specfile.declared): the same range and words from a file, from
a value built in code, and on the command line."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Annotated

import pytest
from pydantic import Field

from specfile import SPEC_CONFIG, SpecError, add_flags, bound, check_fields, flag_fields, validate

Count = Annotated[int, Field(ge=1, description="how many")]


@dataclass(frozen=True)
class Inner:
    __pydantic_config__ = SPEC_CONFIG

    count: Count = 2
    rate: Annotated[float, Field(gt=0, lt=1, description="a rate")] = 0.5
    level: Annotated[int, Field(ge=1, le=8)] | None = None
    seeds: tuple[Annotated[int, Field(ge=0)], ...] = ()
    name: Annotated[str, Field(description="a name or none")] | None = "x"
    on: Annotated[bool, Field(description="switched on")] = False
    plain: int = 0

    def __post_init__(self):
        check_fields(self)


@dataclass(frozen=True)
class Outer:
    __pydantic_config__ = SPEC_CONFIG

    inner: Inner = field(default_factory=Inner)


def test_bound_words_each_kind_of_range():
    assert [bound(h) for h in (Count, Annotated[float, Field(gt=0, lt=1)],
                               Annotated[float, Field(ge=0, lt=1)],
                               Annotated[int, Field(ge=1, le=8)], int)] == [
        ">= 1", "in (0, 1)", "in [0, 1)", "in 1..8", ""]


@pytest.mark.parametrize("values, error, message", [
    ({"count": 0}, ValueError, "Inner.count must be >= 1, got 0"),
    ({"rate": 1.0}, ValueError, "Inner.rate must be in (0, 1), got 1.0"),
    ({"level": 9}, ValueError, "Inner.level must be in 1..8, got 9"),
    ({"seeds": (1, -1)}, ValueError, "Inner.seeds[] must be >= 0, got -1"),
    ({"count": True}, TypeError, "Inner.count must be an integer, got True"),
    ({"count": "2"}, TypeError, "Inner.count must be an integer, got '2'"),
])
def test_a_value_built_in_code_fails_with_its_declaration_s_words(values, error, message):
    with pytest.raises(error) as info:
        Inner(**values)
    assert str(info.value) == message


def test_a_file_fails_with_the_same_words_on_the_declaring_object():
    with pytest.raises(SpecError) as info:
        validate(Outer, {"inner": {"count": 0}})
    assert str(info.value) == "field 'inner': Inner.count must be >= 1, got 0"
    with pytest.raises(SpecError, match=r"field 'inner': Inner\.seeds\[\] must be >= 0"):
        validate(Outer, {"inner": {"seeds": [1, -1]}})
    assert validate(Outer, {"inner": {"level": None, "plain": -5}}).inner.plain == -5


def test_flags_take_name_type_default_and_help_from_the_declaration():
    assert flag_fields(Inner) == ("count", "rate", "name", "on")
    parser = argparse.ArgumentParser()
    add_flags(parser, Inner, flag_fields(Inner, leave_out=("rate",)), unset={"count": "all"})
    helps = {a.dest: a.help for a in parser._actions}
    assert helps["count"] == "how many (default: all)"
    assert helps["name"] == "a name or none (default: x)"
    args = parser.parse_args(["--count", "3", "--name", "none", "--on"])
    assert (args.count, args.name, args.on) == (3, None, True)
    assert parser.parse_args([]).count is None and not hasattr(args, "rate")
