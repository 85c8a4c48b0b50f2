"""Result files: atomic writes, the tidy loader and schema, summary numbers."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest
from harness_helpers import rank_records, write_cell

from aqsgd import filecache
from aqsgd.filecache import atomic_write_text
from bench.harness.sweep import CellSpec, ModeSpec, Workload
from bench.report.summary import summarize
from bench.results import files as results
from bench.results.files import (
    METRIC_COLUMNS,
    is_finished,
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


def _cell(scenario, mode, **kw):
    return CellSpec(scenario, mode, Workload(steps=4, **kw))


def test_load_results_and_summary_from_written_cells(tmp_path):
    fp32 = _cell("100mbps", ModeSpec("fp32"))
    aq = _cell("100mbps", ModeSpec("aqsgd", 2, 4))
    write_cell(tmp_path, fp32, rate_mbit=100, act_bytes=4_000_000, step_time_s=0.8)
    write_cell(tmp_path, aq, rate_mbit=100, act_bytes=250_000, step_time_s=0.2, loss0=5.01)
    frame = load_results([tmp_path])
    assert set(frame["cell"]) == {fp32.name, aq.name}
    assert {"scenario", "mode", "fw_bits", "launcher", "rate_mbit"} <= set(frame.columns)
    assert len(frame) == 2 * 2 * 6  # cells x ranks x (2 warm-up + 4 measured steps)

    table = summarize([tmp_path]).set_index("cell")
    assert table.loc[fp32.name, "measured_steps"] == 4
    assert table.loc[fp32.name, "throughput_samples_s"] == pytest.approx(64 / 0.8)
    assert table.loc[aq.name, "speedup_vs_fp32"] == pytest.approx(4.0)
    # both ranks send: activations forward from stage 0, gradients back from stage 1
    assert table.loc[aq.name, "bytes_per_step"] == 2 * 250_000
    assert table.loc[aq.name, "final_loss"] == pytest.approx(5.01 - 0.5)
    assert table.loc[fp32.name, "comm_compute_ratio"] == pytest.approx(0.7 / 0.1)


def test_finished_means_meta_ok_and_same_spec(tmp_path):
    cell = _cell("100mbps", ModeSpec("fp32"))
    cell_dir = write_cell(tmp_path, cell, rate_mbit=100, act_bytes=10, step_time_s=0.2)
    assert is_finished(cell_dir, cell.key)
    other = _cell("100mbps", ModeSpec("fp32"), seed=1)
    assert not is_finished(cell_dir, other.key)
    assert not is_finished(tmp_path / "missing")
    # a cell measured by another commit of the suite is not reused
    assert is_finished(cell_dir, cell.key, git_commit="abc")
    assert not is_finished(cell_dir, cell.key, git_commit="def")


def test_failed_cells_are_left_out_unless_asked(tmp_path):
    cell = _cell("100mbps", ModeSpec("fp32"))
    cell_dir = write_cell(tmp_path, cell, rate_mbit=100, act_bytes=10, step_time_s=0.2)
    meta = json.loads((cell_dir / "meta.json").read_text())
    meta["status"] = "failed"
    (cell_dir / "meta.json").write_text(json.dumps(meta))
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
