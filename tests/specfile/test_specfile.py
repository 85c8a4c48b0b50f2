"""specfile: reading configuration files, validating them into frozen dataclasses, and the
one error format (file, field path, value)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Annotated, Literal

import pytest
import yaml

from specfile import (
    SPEC_CONFIG,
    SpecError,
    Unit,
    describe,
    json_schema,
    raising,
    read_file,
    validate,
)


@dataclass(frozen=True)
class Inner:
    count: int
    rate_mbit: Annotated[float, Unit("Mbit/s")] = 1.0
    mode: Literal["a", "b"] = "a"
    name: str | None = None
    pair: tuple[int, int] = (0, 0)

    def __post_init__(self):
        if self.count < 0:
            raise SpecError.at("count", ">= 0", self.count)
        if self.count == 13:
            raise ValueError("count must not be 13")


@dataclass(frozen=True)
class Outer:
    __pydantic_config__ = SPEC_CONFIG

    inner: Inner
    items: tuple[Inner, ...] = ()
    flag: bool = False


@dataclass(frozen=True)
class Unconfigured:
    count: int = 0


def test_validated_objects_are_the_plain_frozen_dataclasses():
    got = validate(Outer, {"inner": {"count": 1, "rate_mbit": 100, "pair": [1, 2]},
                           "items": [{"count": 2}]})
    assert got == Outer(Inner(1, rate_mbit=100.0, pair=(1, 2)), items=(Inner(2),))
    assert type(got.inner.rate_mbit) is float  # an integer is a number
    assert dataclasses.asdict(got)["items"] == (dataclasses.asdict(Inner(2)),)
    assert dataclasses.replace(got, flag=True).flag
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.flag = True  # type: ignore[misc]
    # building in code does not go through pydantic: as cheap as before, no type checks
    assert Inner(1, mode="c").mode == "c"  # type: ignore[arg-type]


@pytest.mark.parametrize("data, message", [
    ({"inner": {"count": "3"}}, "field 'inner.count': expected an integer, got '3'"),
    ({"inner": {"count": True}}, "field 'inner.count': expected an integer, got True"),
    ({"inner": {"count": 2.5}}, "field 'inner.count': expected an integer, got 2.5"),
    ({"inner": {"count": 1, "rate_mbit": "100mbps"}},
     "field 'inner.rate_mbit': expected a number in Mbit/s, got '100mbps'"),
    ({"inner": {"count": 1}, "flag": "yes"}, "field 'flag': expected true/false, got 'yes'"),
    ({"inner": {"count": 1, "mode": "c"}}, "field 'inner.mode': expected one of a|b, got 'c'"),
    ({"inner": {"count": 1, "name": 3}}, "field 'inner.name': expected a string or null, got 3"),
    ({"inner": {"count": 1, "pair": [1]}},
     "field 'inner.pair': expected a list of 2 integers, got [1]"),
    ({"inner": []}, "field 'inner': expected a mapping, got []"),
    ([1], "field '(top level)': expected a mapping, got [1]"),
    ({}, "missing field 'inner'"),
    ({"inner": {}}, "missing field 'inner.count'"),
    ({"inner": {"count": 1, "size": 2}},
     "field 'inner.size': unknown inner field 'size' (known: count, mode, name, pair, rate_mbit)"),
    ({"inner": {"count": 1}, "bogus": 1},
     "field 'bogus': unknown key 'bogus' (known: flag, inner, items)"),
    # a misspelt key is reported as unknown, not as the field it leaves missing
    ({"inner": {"cout": 1}}, "field 'inner.cout': unknown inner field 'cout'"),
    # __post_init__ checks: a SpecError names its field relative to its dataclass
    ({"inner": {"count": -1}}, "field 'inner.count': expected >= 0, got -1"),
    ({"inner": {"count": 1}, "items": [{"count": 1}, {"count": -1}]},
     "field 'items[1].count': expected >= 0, got -1"),
    ({"inner": {"count": 13}}, "field 'inner': count must not be 13"),
])
def test_every_mistake_names_the_field_and_the_value(data, message):
    with pytest.raises(SpecError) as info:
        validate(Outer, data)
    assert message in str(info.value)


def test_raising_names_the_file_and_uses_the_surface_error():
    class SurfaceError(ValueError):
        pass

    with pytest.raises(SurfaceError, match=r"^run\.yaml: field 'inner\.count': expected >= 0"):
        with raising(SurfaceError, source="run.yaml"):
            validate(Outer, {"inner": {"count": -1}})
    # a surface whose users know another wording renders the same error its own way
    with pytest.raises(SurfaceError, match=r"^inner\.count: expected an integer, got 'x'$"):
        with raising(SurfaceError, render=lambda e: f"{e.field}: {e.text}"):
            validate(Outer, {"inner": {"count": "x"}})
    # a conversion after validation reports a SpecError the same way
    with pytest.raises(SurfaceError, match=r"^s\.yaml: field 'links\[0\]\.dst': expected"):
        with raising(SurfaceError, source="s.yaml"):
            raise SpecError.at("dst", "a host index in [0, 2)", 9).within("links[0]")
    # finished messages and other errors pass through unchanged
    with pytest.raises(SpecError, match=r"^done$"):
        with raising(SurfaceError, source="s.yaml"):
            raise SpecError("done")
    with pytest.raises(KeyError):
        with raising(SurfaceError, source="s.yaml"):
            raise KeyError("x")


def test_spec_error_text_and_paths():
    err = SpecError.at("rate_mbit", "a number > 0", -1)
    assert str(err) == "field 'rate_mbit': expected a number > 0, got -1"
    assert describe(err.within("link")) == "field 'link.rate_mbit': expected a number > 0, got -1"
    assert err.within("links[2]").within("").field == "links[2].rate_mbit"
    assert SpecError.at("", "two different hosts", [1, 1]).within("links[0]").field == "links[0]"


def test_read_file_names_the_file(tmp_path):
    (tmp_path / "a.yaml").write_text("x: 1\n")
    (tmp_path / "a.json").write_text('{"x": [1, 2]}')
    (tmp_path / "bom.yaml").write_bytes(b"\xef\xbb\xbfx: 2\n")
    assert read_file(tmp_path / "a.yaml") == {"x": 1}
    assert read_file(tmp_path / "a.json") == {"x": [1, 2]}
    assert read_file(tmp_path / "bom.yaml") == {"x": 2}
    with pytest.raises(SpecError, match=r"cannot read sweep file .*missing\.yaml"):
        read_file(tmp_path / "missing.yaml", what="sweep file")
    (tmp_path / "latin1.yaml").write_bytes("description: caf\xe9\n".encode("latin-1"))
    with pytest.raises(SpecError, match=r"latin1\.yaml: not UTF-8 text"):
        read_file(tmp_path / "latin1.yaml")
    (tmp_path / "bad.yaml").write_text("x: [1,\n")
    with pytest.raises(SpecError, match=r"bad\.yaml: not valid YAML") as info:
        read_file(tmp_path / "bad.yaml")
    # yaml's own position mark names the file too, not "<unicode string>"
    assert f'in "{tmp_path / "bad.yaml"}", line 2' in str(info.value)
    (tmp_path / "bad.json").write_text("{'x': 1}")
    with pytest.raises(KeyError, match=r"bad\.json: not valid JSON"):
        read_file(tmp_path / "bad.json", error=KeyError)


def test_yaml_values_that_are_not_plain_data():
    # a YAML date is text where a string is expected, not a number anywhere else
    with pytest.raises(SpecError, match=r"field 'inner\.count': expected an integer, got '20"):
        validate(Outer, yaml.safe_load("inner: {count: 2024-01-01}"))
    loop: list = []
    loop.append(loop)  # what a self-referencing YAML anchor parses to
    with pytest.raises(SpecError, match="expected plain mappings"):
        validate(Outer, {"inner": loop})


def test_a_class_validated_from_files_must_forbid_unknown_keys():
    with pytest.raises(AssertionError, match="SPEC_CONFIG"):
        validate(Unconfigured, {})


def test_json_schema_comes_from_the_same_types():
    schema = json_schema(Outer)
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert schema["required"] == ["inner"] and schema["additionalProperties"] is False
    inner = schema["$defs"]["Inner"]
    assert inner["required"] == ["count"] and inner["additionalProperties"] is False
    assert inner["properties"]["mode"]["enum"] == ["a", "b"]
    json.dumps(schema)
