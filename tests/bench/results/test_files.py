"""Result files (bench.results.files): the tidy loader and schema, finished cells,
provenance, a sweep directory's cells."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
from harness_helpers import rank_records
from report_fixtures import write_fixture_cell

from bench.report.summary import summarize
from bench.results import files as results
from bench.results.files import (
    IDENTITY_KEYS,
    METRIC_COLUMNS,
    SCHEMA_VERSION,
    ResultFileError,
    ResultFileWarning,
    SchemaError,
    file_digests,
    find_cells,
    is_finished,
    load_records,
    load_results,
    metrics_frame,
    provenance,
    read_rank_jsonl,
    read_record,
    reuse_refusal,
)

pytestmark = pytest.mark.timeout(30)


def _write_jsonl(path, records, tail=""):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)


def test_metrics_frame_is_tidy_one_row_per_rank_per_step(tmp_path):
    d = tmp_path / "metrics"
    _write_jsonl(d / "rank0.jsonl", rank_records(0, 0, 2, 5, 2, 1000, 0.5))
    # rank 1 was killed while writing its last line: that line is dropped
    _write_jsonl(d / "rank1.jsonl", rank_records(1, 1, 2, 5, 2, 1000, 0.5) +
                 [{"kind": "eval", "step": 5, "epoch": 2, "warmup": False, "rank": 1,
                   "stage": 1, "replica": 0, "eval_loss": 4.2, "perplexity": 66.7}],
                 tail='{"kind": "train", "st')
    frame, peers = metrics_frame(sorted(d.glob("*.jsonl")), "c")
    assert list(frame.columns[:len(METRIC_COLUMNS)]) == list(METRIC_COLUMNS)
    train = frame[frame["kind"] == "train"]
    assert len(train) == 10 and not train.duplicated(["rank", "step"]).any()
    assert train["warmup"].tolist() == [True, True, False, False, False] * 2
    assert (train["bytes_sent_total"] == 1000).all()
    assert frame.loc[frame["kind"] == "eval", "eval_loss"].tolist() == [4.2]
    # cumulative wall clock per rank, from step times
    assert train[train["rank"] == 0]["wall_s"].tolist() == pytest.approx([0.5, 1, 1.5, 2, 2.5])
    assert set(peers.columns) >= {"rank", "step", "peer", "bytes_sent", "bytes_recv"}
    assert len(peers) == 10


def test_corrupt_line_in_the_middle_names_file_and_line(tmp_path):
    path = tmp_path / "rank0.jsonl"
    path.write_text('{"step": 0}\nnot json\n{"step": 2}\n')
    with pytest.raises(ValueError, match=r"rank0.jsonl:2"):
        read_rank_jsonl(path)


def test_metrics_file_name_must_carry_the_rank(tmp_path):
    path = tmp_path / "worker.jsonl"
    path.write_text('{"step": 0}\n')
    with pytest.raises(ValueError, match="rank<R>.jsonl"):
        metrics_frame([path], "c")


def _identity(**change) -> dict:
    """The identity write_fixture_cell records (netns, shaped), with `change`."""
    return {"spec_key": "k1", "scenario_key": "scenario", "git_commit": "abc",
            "launcher": {"launcher": "netns", "shaped": True, "options": {}},
            "machine": {"hostname": "test", "kernel": "6"}, **change}


def test_finished_means_meta_ok_and_the_same_identity_in_every_key(tmp_path):
    cell_dir = write_fixture_cell(tmp_path, spec_key="k1")
    assert set(_identity()) == set(IDENTITY_KEYS)
    assert is_finished(cell_dir, _identity())
    assert is_finished(cell_dir)  # no identity asked: any finished cell
    assert not is_finished(tmp_path / "missing")
    assert reuse_refusal(tmp_path / "missing", _identity()) == "not measured yet"
    # each key alone makes it another cell: spec, scenario file, commit, machine, launcher
    others = {"spec_key": "k2", "scenario_key": "edited", "git_commit": "def",
              "machine": {"hostname": "test", "kernel": "7"},
              "launcher": {"launcher": "docker", "shaped": True, "options": {}}}
    for key, value in others.items():
        why = reuse_refusal(cell_dir, _identity(**{key: value}))
        assert why.startswith(f"{key} ") and repr(value) in why, why
    # shaped or not is the launcher's identity too (ssh --no-shaping)
    unshaped = {"launcher": "netns", "shaped": False, "options": {}}
    assert not is_finished(cell_dir, _identity(launcher=unshaped))


def test_a_failed_cell_is_never_reused(tmp_path):
    cell_dir = write_fixture_cell(tmp_path, spec_key="k1", status="failed")
    assert reuse_refusal(cell_dir, _identity()) == "status 'failed'"


@pytest.mark.parametrize("text", ['{"schema_version": 4, "cell": {"na', "", "[1, 2]",
                                  "\xff\xfe"])
def test_a_truncated_meta_json_is_named_its_cell_measured_again_and_the_others_read(
        tmp_path, text):
    broken = write_fixture_cell(tmp_path, spec_key="k1")
    good = write_fixture_cell(tmp_path, mode="aqsgd", fw=2, bw=4, spec_key="k1")
    (broken / "meta.json").write_bytes(text.encode("latin-1"))
    with pytest.raises(ResultFileError, match=re.escape(str(broken / "meta.json"))):
        read_record(broken)
    why = reuse_refusal(broken, _identity())
    assert why.startswith(f"unreadable: {broken / 'meta.json'}: "), why
    with pytest.warns(ResultFileWarning, match=re.escape(str(broken / "meta.json"))):
        records = load_records([tmp_path])
    assert [r.cell_dir for r in records] == [good]
    with pytest.warns(ResultFileWarning):
        table = summarize([tmp_path])
    assert table["cell"].tolist() == [good.name] and table["status"].tolist() == ["ok"]


@pytest.mark.parametrize(("text", "what"), [("cell,rank,ste", "lacks the column"),
                                            ("", "not a CSV file"),
                                            (None, "missing")])
def test_a_corrupt_metrics_csv_is_named_its_cell_measured_again_and_the_others_read(
        tmp_path, text, what):
    broken = write_fixture_cell(tmp_path, spec_key="k1")
    good = write_fixture_cell(tmp_path, mode="aqsgd", fw=2, bw=4, spec_key="k1")
    path = broken / "metrics.csv"
    if text is None:
        path.unlink()
    else:
        path.write_text(text)
    why = reuse_refusal(broken, _identity())
    assert why.startswith(f"unreadable: {path}: ") and what in why, why
    with pytest.warns(ResultFileWarning, match=re.escape(str(path))):
        frame = load_results([tmp_path])
    assert set(frame["cell_dir"]) == {str(good)}
    with pytest.warns(ResultFileWarning, match=re.escape(str(path))):
        table = summarize([tmp_path]).set_index("cell")
    assert table.loc[broken.name, "status"] == "unreadable"
    assert table.loc[good.name, "status"] == "ok" and table.loc[good.name, "measured_steps"] > 0


@pytest.mark.parametrize(("name", "cut", "what"), [
    ("metrics.csv", lambda b: b[:len(b) // 2], "truncated or replaced"),  # still parses
    ("peers.csv", lambda b: b[:-1], "truncated or replaced"),
    ("metrics.csv", lambda b: b.replace(b"5.0", b"5.1", 1), "sha256 differs"),
    ("metrics.csv", None, "missing")])
def test_a_recorded_file_cut_or_edited_after_meta_json_is_never_counted_finished(
        tmp_path, name, cut, what):
    broken = write_fixture_cell(tmp_path, spec_key="k1")
    good = write_fixture_cell(tmp_path, mode="aqsgd", fw=2, bw=4, spec_key="k1")
    for cell_dir in (broken, good):
        _rewrite_meta(cell_dir, lambda m, d=cell_dir: m.update(files=file_digests(d)))
    assert reuse_refusal(broken, _identity()) == ""
    path = broken / name
    if cut is None:
        path.unlink()
    else:
        before = path.read_bytes()
        path.write_bytes(cut(before))
        assert path.read_bytes() != before
    why = reuse_refusal(broken, _identity())
    assert why.startswith(f"unreadable: {path}: ") and what in why, why
    assert reuse_refusal(good, _identity()) == ""
    if name == "metrics.csv":  # the loaders skip it, naming it, and read the others
        with pytest.warns(ResultFileWarning, match=re.escape(str(path))):
            frame = load_results([tmp_path])
        assert set(frame["cell_dir"]) == {str(good)}


def test_a_corrupt_sweep_json_is_named_and_every_cell_under_it_read(tmp_path):
    sweep_dir = tmp_path / "sweep"
    cell = write_fixture_cell(sweep_dir)
    (sweep_dir / "sweep.json").write_text('{"cells": ["a"')
    with pytest.warns(ResultFileWarning, match=re.escape(str(sweep_dir / "sweep.json"))):
        assert find_cells([sweep_dir]) == [cell]


def _rewrite_meta(cell_dir, change) -> None:
    meta = json.loads((cell_dir / "meta.json").read_text())
    change(meta)
    (cell_dir / "meta.json").write_text(json.dumps(meta))


def test_a_cell_of_schema_1_is_refused_by_name_and_version(tmp_path):
    cell_dir = write_fixture_cell(tmp_path, spec_key="k1")
    _rewrite_meta(cell_dir, lambda m: m.update(schema_version=1))
    with pytest.raises(SchemaError, match=rf"{cell_dir / 'meta.json'}: schema_version 1, "
                                          rf"this suite reads schema {SCHEMA_VERSION} only"):
        load_results([tmp_path])
    with pytest.raises(SchemaError, match="schema_version 1"):
        summarize([tmp_path])
    # measured again, never reused
    assert reuse_refusal(cell_dir) == f"schema 1, not {SCHEMA_VERSION}"


def test_a_cell_block_without_a_schema_2_key_is_refused(tmp_path):
    cell_dir = write_fixture_cell(tmp_path)
    _rewrite_meta(cell_dir, lambda m: m["cell"].pop("eval_windows"))
    with pytest.raises(SchemaError, match=re.escape(
            f"{cell_dir / 'meta.json'}: lacks cell.eval_windows (schema {SCHEMA_VERSION})")):
        load_results([tmp_path])


def test_provenance_records_git_versions_and_hardware():
    prov = provenance(results.__file__.rsplit("/bench/", 1)[0])
    assert len(prov["git"]["commit"]) == 40 and isinstance(prov["git"]["dirty"], bool)
    assert prov["versions"]["torch"] and prov["versions"]["python"]
    assert prov["hardware"]["cpu_cores"] >= 1 and prov["hardware"]["memory_gib"] > 0


def test_load_results_of_a_missing_path_says_which(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        load_results([tmp_path / "nowhere"])
    assert isinstance(load_results([tmp_path]), pd.DataFrame)


def test_a_sweep_directory_reads_only_the_cells_its_sweep_json_lists(tmp_path):
    # A cell left from an earlier version of the sweep (here: renamed, of schema 1) must
    # neither be read nor stop the reader; outside a sweep directory every cell counts.
    sweep_dir = tmp_path / "results" / "regress"
    kept = write_fixture_cell(sweep_dir, spec_key="k1")
    stale = write_fixture_cell(sweep_dir, mode="aqsgd", fw=2, bw=4, spec_key="k2")
    _rewrite_meta(stale, lambda m: m.update(schema_version=1))
    with pytest.raises(SchemaError):
        load_records([sweep_dir])
    (sweep_dir / "sweep.json").write_text(json.dumps({"cells": [kept.name, "never-ran"]}))
    assert find_cells([sweep_dir]) == [kept]
    assert [r.cell_dir for r in load_records([sweep_dir])] == [kept]
    assert find_cells([tmp_path / "results"]) == [kept]
