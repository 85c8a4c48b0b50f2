"""meta.json read into a typed record (bench.results.record): a key missing or of another
type, or another schema, is named with the file; a meta.json the harness's writers made
reads back whole."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
from harness_helpers import write_cell
from report_fixtures import launcher_block, outage_block, scheduled_link, write_fixture_cell

from bench.harness.sweep import CellSpec, Workload, parse_mode
from bench.net.scenario import load_scenario
from bench.results.files import (
    CELL_KEYS,
    SCHEMA_VERSION,
    ResultFileError,
    SchemaError,
    file_digests,
    load_records,
    reuse_refusal,
)
from bench.results.record import CellBlock, read_record

pytestmark = pytest.mark.timeout(60)


def _rewrite(cell_dir, change) -> None:
    meta = json.loads((cell_dir / "meta.json").read_text())
    change(meta)
    (cell_dir / "meta.json").write_text(json.dumps(meta))


def _drop(*keys):
    def change(meta):
        block = meta
        for key in keys[:-1]:
            block = block[key]
        del block[keys[-1]]
    return change


@pytest.mark.parametrize("keys", [("cell", "scenario"), ("status",), ("placement", "links"),
                                  ("provenance", "git", "commit"), ("identity", "spec_key"),
                                  ("run_config", "pipeline", "schedule"), ("wall_s",)])
def test_a_missing_key_is_a_result_file_error_naming_the_file_and_the_key(tmp_path, keys):
    cell_dir = write_fixture_cell(tmp_path)
    _rewrite(cell_dir, _drop(*keys))
    path = cell_dir / "meta.json"
    want = f"{path}: lacks {'.'.join(keys)} (schema {SCHEMA_VERSION})"
    with pytest.raises(ResultFileError, match=re.escape(want)):
        read_record(cell_dir)
    with pytest.raises(SchemaError, match=re.escape(want)):  # the loaders stop on it
        load_records([tmp_path])
    assert reuse_refusal(cell_dir) == f"unreadable: {want}"


def test_a_key_in_a_list_and_a_value_of_another_type_are_named(tmp_path):
    cell_dir = write_fixture_cell(tmp_path)
    _rewrite(cell_dir, lambda m: m["placement"]["ranks"][1].pop("host"))
    with pytest.raises(SchemaError, match=re.escape("lacks placement.ranks[1].host")):
        read_record(cell_dir)
    _rewrite(cell_dir, lambda m: m["cell"].update(stages="two"))
    with pytest.raises(SchemaError, match=re.escape("cell.stages is 'two', expected int")):
        read_record(cell_dir)


def test_a_scheduled_cells_blocks_are_checked_too(tmp_path):
    cell_dir = write_fixture_cell(tmp_path)
    run = {"started_unix": 0.0, "stopped_unix": 9.0,
           "changes": [{"src": 0, "dst": 1, "phase": 0, "lap": 0, "t_s": 0.0,
                        "applied_s": 0.0, "rate_mbit": None, "down": False},
                       {"t_s": 1.0, "kind": "flow_start", "applied_s": 1.0}]}
    _rewrite(cell_dir, lambda m: m.update(schedule=outage_block(), launcher=launcher_block(
        [scheduled_link(0, 1)], run)))
    with pytest.raises(SchemaError, match=re.escape(
            "lacks launcher.schedule.run.changes[1].flow")):
        read_record(cell_dir)
    run["changes"][1]["flow"] = 0
    _rewrite(cell_dir, lambda m: m.update(launcher=launcher_block([scheduled_link(0, 1)], run)))
    record = read_record(cell_dir)
    assert record.link_schedule is not None and record.outages is not None
    assert [c.phase for c in record.link_schedule.run.link_changes] == [0]
    assert [(e.kind, e.flow) for e in record.link_schedule.run.events] == [("flow_start", 0)]


def test_another_schema_version_is_named_and_refused_for_reuse_by_its_version(tmp_path):
    cell_dir = write_fixture_cell(tmp_path)
    # an older file lacks keys of schema 5 too: its version is what is said
    _rewrite(cell_dir, lambda m: (m.update(schema_version=4), m.pop("identity")))
    with pytest.raises(SchemaError, match=re.escape(
            f"{cell_dir / 'meta.json'}: schema_version 4, this suite reads schema "
            f"{SCHEMA_VERSION} only")):
        read_record(cell_dir)
    assert reuse_refusal(cell_dir) == f"schema 4, not {SCHEMA_VERSION}"
    assert read_record(tmp_path / "never-ran") is None


def test_a_failed_cell_before_its_hosts_came_up_reads_with_its_absent_blocks(tmp_path):
    cell_dir = write_fixture_cell(tmp_path, status="failed")
    _rewrite(cell_dir, lambda m: [m.pop(k) for k in ("run_config", "scenario", "launcher")])
    record = read_record(cell_dir)
    assert not record.ok and record.failure.reason == "fixture failure"
    assert record.run_config is None and record.schedule is None
    assert record.scenario is None and record.link_schedule is None
    # an ok cell always ran a config: without it the file is refused
    _rewrite(cell_dir, lambda m: m.update(status="ok"))
    with pytest.raises(SchemaError, match="lacks run_config"):
        read_record(cell_dir)


def test_a_meta_json_of_the_harness_writers_reads_back_whole(tmp_path):
    cell = CellSpec("100mbps", parse_mode("aqsgd:2/4"), Workload(steps=3))
    cell_dir = write_cell(tmp_path, cell, rate_mbit=100.0, act_bytes=1000, step_time_s=0.2,
                          ceiling_mbit=150.0, achieved_mbit=80.0)
    scenario = load_scenario("dynamic-competing")
    # the blocks run_cell adds around the writers' head (bench.harness.run.run_cell)
    _rewrite(cell_dir, lambda m: m.update(
        scenario=scenario.to_dict(), started_at="2024-01-01T00:00:00+00:00",
        launcher={"choice": "netns", "reason": "test", "shaped": True, "schedule": None},
        failure=None, files=file_digests(cell_dir)))
    meta = json.loads((cell_dir / "meta.json").read_text())
    record = read_record(cell_dir)

    assert record.path == cell_dir / "meta.json" and record.ok and record.failure is None
    assert record.cell.to_dict() == {f.name: meta["cell"][f.name]
                                     for f in dataclasses.fields(CellBlock)}
    assert set(CELL_KEYS) <= set(record.cell.to_dict())
    assert record.identity.to_dict() == meta["identity"]
    assert (record.spec, record.spec_key) == (meta["spec"], meta["spec_key"])
    assert record.run_config == meta["run_config"]
    assert record.schedule == meta["run_config"]["pipeline"]["schedule"] == "gpipe"
    assert record.pipeline.micro_batches == meta["run_config"]["pipeline"]["num_micro_batches"]
    placement = meta["placement"]
    assert [dataclasses.asdict(r) for r in record.placement.ranks] == [
        {"machine": None, **r} for r in placement["ranks"]]
    assert [(u.src, u.dst, list(u.traffic), u.rate_mbit, u.delay_ms)
            for u in record.placement.links] == [
        (u["src"], u["dst"], u["traffic"], u["rate_mbit"], u["delay_ms"])
        for u in placement["links"]]
    assert (record.placement.stages, record.placement.n_hosts) == (2, placement["n_hosts"])
    probe = record.probe[0]
    assert (probe.rate_mbit_achieved, probe.rate_mbit_ceiling, probe.host_limited) == (
        80.0, 150.0, True)
    assert record.provenance.git_commit == "abc" and record.provenance.hardware.cpu_cores == 2
    assert record.scenario.link_rate_mbit == scenario.link.rate_mbit
    assert [(f.src, f.dst, f.start_s, f.duration_s) for f in record.scenario.competing] == [
        (f.src, f.dst, f.start_s, f.duration_s) for f in scenario.competing]
    assert record.launcher.choice == "netns" and record.link_schedule is None
    assert record.outages is None and record.wall_s == 1.0
    assert {name: dataclasses.asdict(d) for name, d in record.files.items()} == meta["files"]
