"""A mode with an in-graph half takes its k coordinates as NAME:K (bench.harness.modes):
spellings, errors naming the field and the value, and the run config the cell builds."""

from __future__ import annotations

import pytest

from bench.harness.cells import compression
from bench.harness.modes import COORD_MODES, ModeSpec, parse_mode
from bench.harness.sweep import CellSpec, Workload

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("text, spelled, label", [
    ("ssn:160", "ssn:160", "ssn-k160"), ("ssn-k20", "ssn:20", "ssn-k20"),
    ("bottleneck:32", "bottleneck:32", "bottleneck-k32"), ("ssn", "ssn", "ssn")])
def test_coordinates_round_trip_through_both_spellings(text, spelled, label):
    spec = parse_mode(text)
    assert str(spec) == spelled and spec.label == label
    assert parse_mode(str(spec)) == parse_mode(spec.label) == spec


@pytest.mark.parametrize("text, match", [
    ("ssn:0", r"ModeSpec.coords: mode ssn takes k >= 1 coordinates a token, got 0"),
    ("ssn:2/4", r"ssn:K with an integer K, got 'ssn:2/4'"),
    ("bottleneck:x", r"bottleneck:K with an integer K")])
def test_a_bad_rank_names_the_field_and_the_value(text, match):
    with pytest.raises(ValueError, match=match):
        parse_mode(text)


def test_only_in_graph_modes_take_coordinates():
    assert {"ssn", "bottleneck"} <= set(COORD_MODES) and "aqsgd" not in COORD_MODES
    with pytest.raises(ValueError, match=r"mode aqsgd has no in-graph half.*got 4"):
        ModeSpec("aqsgd", 2, 4, coords=4)


def test_the_cell_carries_k_on_its_forward_direction_and_in_its_key():
    workload = Workload(steps=2)
    forward, backward, _ = compression(parse_mode("ssn:24"), workload)
    assert (forward.mode, forward.coords, forward.dtype) == ("ssn", 24, "bf16")
    assert (backward.mode, backward.coords) == ("none", None)
    keys = {CellSpec("loopback", parse_mode(m), workload).key for m in ("ssn:24", "ssn:32", "ssn")}
    assert len(keys) == 3
    assert "coords" not in CellSpec("loopback", parse_mode("aqsgd:2/4"), workload).to_dict()["mode"]
