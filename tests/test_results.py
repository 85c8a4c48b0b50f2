"""Result files: atomic writes, the tidy loader and schema, summary numbers."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest
from harness_helpers import rank_records
from report_fixtures import write_fixture_cell

from aqsgd import filecache
from aqsgd.filecache import atomic_write_text
from bench.report.summary import summarize
from bench.report.tables import format_table, mode_text
from bench.results import files as results
from bench.results.files import (
    METRIC_COLUMNS,
    SCHEMA_VERSION,
    SchemaError,
    find_cells,
    is_finished,
    load_metas,
    load_results,
    metrics_frame,
    provenance,
    read_rank_jsonl,
)

pytestmark = pytest.mark.timeout(30)


def test_atomic_write_replaces_whole_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "sub" / "meta.json"
    atomic_write_text(path, "first")
    atomic_write_text(path, "second")
    assert path.read_text() == "second"
    assert [p.name for p in path.parent.iterdir()] == ["meta.json"]


def test_atomic_write_failure_keeps_old_file_and_removes_temporary(tmp_path, monkeypatch):
    path = tmp_path / "metrics.csv"
    atomic_write_text(path, "old,complete\n")

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(filecache.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_text(path, "new,half")
    assert path.read_text() == "old,complete\n"
    assert sorted(os.listdir(tmp_path)) == ["metrics.csv"]


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


def test_load_results_and_summary_from_written_cells(tmp_path):
    # 2 warm-up steps (one epoch of 2) at 0.8 s, then 4 measured steps
    fp32 = write_fixture_cell(tmp_path, act_bytes=4_000_000, step_time_s=0.8)
    aq = write_fixture_cell(tmp_path, mode="aqsgd", fw=2, bw=4, act_bytes=250_000,
                            step_time_s=0.2, warmup_step_time_s=0.8, train_loss0=5.01)
    frame = load_results([tmp_path])
    assert set(frame["cell"]) == {fp32.name, aq.name}
    assert {"scenario", "mode", "fw_bits", "launcher", "rate_mbit", "seed", "variant",
            "dropout", "eval_windows"} <= set(frame.columns)
    assert len(frame) == 2 * 2 * 6  # cells x ranks x (2 warm-up + 4 measured steps)

    table = summarize([tmp_path]).set_index("cell")
    assert table.loc[fp32.name, "measured_steps"] == 4
    assert table.loc[fp32.name, "throughput_samples_s"] == pytest.approx(64 / 0.8)
    assert table.loc[aq.name, "speedup_vs_fp32"] == pytest.approx(4.0)
    # end to end, the warm-up steps count at their own time: 6 steps in 2 * 0.8 + 4 * 0.2 s
    assert table.loc[aq.name, "throughput_e2e_samples_s"] == pytest.approx(6 * 64 / 2.4)
    assert table.loc[aq.name, "speedup_e2e_vs_fp32"] == pytest.approx(4.8 / 2.4)
    # both ranks send: activations forward from stage 0, gradients back from stage 1
    assert table.loc[aq.name, "bytes_per_step"] == 2 * 250_000
    assert table.loc[aq.name, "final_loss"] == pytest.approx(5.01 - 0.5)
    assert table.loc[fp32.name, "comm_compute_ratio"] == pytest.approx(0.7 / 0.1)


def test_summary_held_out_loss_is_the_last_evaluation(tmp_path):
    write_fixture_cell(tmp_path, eval_losses=[4.0, 3.5, 3.25, 3.125], eval_windows=256)
    row = summarize([tmp_path]).iloc[0]
    assert row["final_eval_loss"] == pytest.approx(3.125) and row["eval_windows"] == 256
    text = format_table(summarize([tmp_path]))
    assert "held-out loss (256 windows)" in text and "3.1250" in text
    assert "speed-up vs fp32 (steady state)" in text
    assert "end-to-end vs fp32 (warm-up incl.)" in text


def test_speedups_compare_the_same_replicas_and_variant(tmp_path):
    write_fixture_cell(tmp_path, step_time_s=1.0)
    write_fixture_cell(tmp_path, replicas=2, step_time_s=2.0)
    write_fixture_cell(tmp_path, step_time_s=0.5, variant="dropout0", dropout=0.0)
    write_fixture_cell(tmp_path, mode="aqsgd+gc", fw=2, bw=4, grad_mode="ef21", replicas=2,
                       step_time_s=1.0)
    write_fixture_cell(tmp_path, mode="aqsgd", fw=2, bw=4, step_time_s=0.25,
                       variant="dropout0", dropout=0.0)
    table = summarize([tmp_path])
    table["mode_text"] = table.apply(mode_text, axis=1)
    speedup = table.set_index(["mode_text", "replicas"])["speedup_vs_fp32"]
    # dp2 against fp32 dp2 (2 s per step of 128 samples), a variant against its own fp32
    assert speedup[("aqsgd+gc/ef21 2/4", 2)] == pytest.approx(2.0)
    assert speedup[("aqsgd 2/4 [dropout0]", 1)] == pytest.approx(2.0)


def test_finished_means_meta_ok_and_same_spec(tmp_path):
    cell_dir = write_fixture_cell(tmp_path, spec_key="k1")
    assert is_finished(cell_dir, "k1")
    assert not is_finished(cell_dir, "k2")
    assert not is_finished(tmp_path / "missing")
    # a cell measured by another commit of the suite is not reused
    assert is_finished(cell_dir, "k1", git_commit="abc")
    assert not is_finished(cell_dir, "k1", git_commit="def")


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
    assert not is_finished(cell_dir, "k1")  # measured again, never reused


def test_a_cell_block_without_a_schema_2_key_is_refused(tmp_path):
    cell_dir = write_fixture_cell(tmp_path)
    _rewrite_meta(cell_dir, lambda m: m["cell"].pop("eval_windows"))
    with pytest.raises(SchemaError, match="the `cell` block lacks eval_windows"):
        load_results([tmp_path])


def test_failed_cells_are_left_out_unless_asked(tmp_path):
    write_fixture_cell(tmp_path, status="failed")
    assert load_results([tmp_path]).empty
    assert len(load_results([tmp_path], include_failed=True)) == 12
    assert summarize([tmp_path])["status"].tolist() == ["failed"]


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
        load_metas([sweep_dir])
    (sweep_dir / "sweep.json").write_text(json.dumps({"cells": [kept.name, "never-ran"]}))
    assert find_cells([sweep_dir]) == [kept]
    assert [m["cell_dir"] for m in load_metas([sweep_dir])] == [str(kept)]
    assert find_cells([tmp_path / "results"]) == [kept]
