"""Scenario files: the shipped ones load, malformed ones are rejected by field, and the
committed JSON Schema is the one the types give."""

import json
from pathlib import Path

import pytest

from bench.net.scenario import (
    SCENARIO_DIR,
    HostCaps,
    LinkSpec,
    ScenarioError,
    available_scenarios,
    load_scenario,
    parse_scenario,
)
from bench.net.scenario_file import MIN_RATE_MBIT, scenario_schema

BAD_DIR = Path(__file__).parent / "scenarios_bad"
BAD_FILES = sorted(BAD_DIR.glob("*.yaml"))


def test_shipped_scenarios_load():
    names = available_scenarios()
    for required in ("10gbps", "1gbps", "500mbps", "300mbps", "100mbps", "wan",
                     "heterogeneous", "loopback"):
        assert required in names
    rates = {n: load_scenario(n).link.rate_mbit for n in
             ("10gbps", "1gbps", "500mbps", "300mbps", "100mbps")}
    assert rates == {"10gbps": 10000, "1gbps": 1000, "500mbps": 500, "300mbps": 300,
                     "100mbps": 100}
    wan = load_scenario("wan")
    assert wan.link.delay_ms > 0 and wan.link.loss_pct > 0 and wan.link.queue_bytes


def test_heterogeneous_links_and_caps():
    s = load_scenario("heterogeneous")
    assert s.link_spec(1, 2).rate_mbit == 100 and s.link_spec(2, 1).delay_ms == 10
    assert s.link_spec(0, 1).rate_mbit == 1000
    # host 3: 50 up, 200 down, both under the 1000 Mbit/s link
    assert s.payload_rate_mbit(3, 2) == 50 and s.payload_rate_mbit(2, 3) == 200
    assert s.payload_rate_mbit(0, 1) == 1000


def test_asymmetric_override_is_one_direction():
    raw = {"description": "d", "layout": {"stages": 3}, "link": {"rate_mbit": 100},
           "links": [{"src": 0, "dst": 1, "rate_mbit": 10, "queue_bytes": 30000}]}
    s = parse_scenario(raw, "t")
    assert s.link_spec(0, 1).rate_mbit == 10 and s.link_spec(0, 1).queue_packets is None
    assert s.link_spec(1, 0).rate_mbit == 100 and s.link_spec(1, 0).queue_packets == 1000


def test_override_changes_only_the_keys_it_names():
    raw = {"description": "d", "layout": {"stages": 2},
           "link": {"rate_mbit": 100, "delay_ms": 5, "jitter_ms": 1, "queue_bytes": 30000},
           "links": [{"hosts": [0, 1], "rate_mbit": None}, {"src": 1, "dst": 0, "delay_ms": 7}]}
    s = parse_scenario(raw, "t")
    assert s.link_spec(0, 1) == LinkSpec(None, 5.0, 1.0, queue_packets=None, queue_bytes=30000)
    assert s.link_spec(1, 0) == LinkSpec(100.0, 7.0, 1.0, queue_packets=None, queue_bytes=30000)
    with pytest.raises(ScenarioError, match=r"^t: field 'links\[0\]\.jitter_ms': expected at most"):
        parse_scenario({**raw, "links": [{"hosts": [0, 1], "delay_ms": 0.5}]}, "t")


def test_schema_file_is_what_the_types_give():
    committed = json.loads((SCENARIO_DIR / "scenario.schema.json").read_text())
    assert committed == scenario_schema(), \
        "regenerate: python -m bench.net.scenario_file > scenarios/scenario.schema.json"


def test_every_shipped_scenario_validates_and_names_the_schema():
    for name in available_scenarios():
        path = SCENARIO_DIR / f"{name}.yaml"
        first = path.read_text().splitlines()[0]
        assert first == "# yaml-language-server: $schema=scenario.schema.json", path.name
        assert load_scenario(name).name == name


def test_unreadable_files_name_the_file(tmp_path):
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes("description: caf\xe9\nlayout: {stages: 2}\nlink: {rate_mbit: 1}\n"
                       .encode("latin-1"))
    with pytest.raises(ScenarioError, match=r"latin1\.yaml: not UTF-8 text"):
        load_scenario(latin1)
    broken = tmp_path / "broken.yaml"
    broken.write_text("link: {rate_mbit: [1,\n")
    with pytest.raises(ScenarioError, match=r"broken\.yaml: not valid YAML"):
        load_scenario(broken)


def test_loader_miss_lists_available_names():
    with pytest.raises(ScenarioError, match=r"no scenario 'nosuch'.*available: .*100mbps"):
        load_scenario("nosuch")


def test_linkspec_validates_directly():
    with pytest.raises(ScenarioError, match="rate_mbit.*-1"):
        LinkSpec(rate_mbit=-1)
    with pytest.raises(ScenarioError, match="loss_pct"):
        LinkSpec(rate_mbit=10, loss_pct=float("nan"))


def test_rates_below_what_the_probe_verifies_are_refused_with_both_bounds():
    assert LinkSpec(rate_mbit=MIN_RATE_MBIT).rate_mbit == 0.05
    for rate in (0.049, 0.001, 1e-9):
        with pytest.raises(ScenarioError, match=r"rate_mbit': expected a number >= 0\.05 \(50 "
                                                r"kbit/s, the slowest rate the link probe "
                                                r"verifies; tc's own bound is about 0\.5 "
                                                r"kbit/s\)"):
            LinkSpec(rate_mbit=rate)
    with pytest.raises(ScenarioError, match=r"downlink_mbit': expected a number >= 0\.05"):
        HostCaps(0, downlink_mbit=0.04)
    schema = scenario_schema()["$defs"]["LinkEntry"]["properties"]["rate_mbit"]["anyOf"][0]
    assert schema["minimum"] == MIN_RATE_MBIT


def test_there_are_at_least_20_malformed_fixtures():
    assert len(BAD_FILES) >= 20


@pytest.mark.parametrize("path", BAD_FILES, ids=[p.stem for p in BAD_FILES])
def test_malformed_scenario_rejected_naming_the_field(path):
    first = path.read_text().splitlines()[0]
    assert first.startswith("# field: "), f"{path.name}: first line must name the field"
    field = first.removeprefix("# field: ").strip()
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    message = str(info.value)
    assert path.name in message
    assert f"field '{field}'" in message, message
