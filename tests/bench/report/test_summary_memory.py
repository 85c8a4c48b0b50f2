"""Peak resident memory: each record's `peak_rss_bytes` (aqsgd.train.metrics), metrics.csv's
column and the summary's largest rank and sum over ranks (bench.report.summary)."""

from __future__ import annotations

import json
import os
import sys

import pytest
from report_fixtures import write_fixture_cell

from aqsgd.train.metrics import StepMeter, peak_rss_bytes
from bench.report.summary import summarize
from bench.report.tables import _rows
from bench.results.files import METRIC_COLUMNS, read_metrics

pytestmark = pytest.mark.timeout(30)


def test_a_record_carries_the_process_s_peak_resident_memory_which_never_falls():
    meter = StepMeter(rank=0)
    before = meter.record(kind="train", step=0)["peak_rss_bytes"]
    block = bytearray(64 * 2**20)  # 64 MiB touched: resident
    block[::4096] = b"\x01" * len(block[::4096])
    after = meter.record(kind="train", step=1)["peak_rss_bytes"]
    del block
    later = peak_rss_bytes()
    assert isinstance(before, int) and before > 10 * 2**20  # an interpreter with torch
    assert after >= before + 32 * 2**20  # the block raised the high-water mark
    assert later >= after  # a high-water mark: freeing memory does not lower it


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork then exec, Linux")
def test_a_process_forked_from_a_large_parent_reads_its_own_peak_not_the_parents(tmp_path):
    # a launcher forks its ranks from a harness (or a test process) that may be large;
    # getrusage's ru_maxrss keeps that image's peak across exec, VmHWM does not
    block = bytearray(512 * 2**20)
    block[::4096] = b"\x01" * len(block[::4096])
    out = tmp_path / "peak"
    code = "from aqsgd.train.metrics import peak_rss_bytes as p; print(p())"
    pid = os.fork()
    if pid == 0:  # the child: exec at once, as a launcher's rank does
        fd = os.open(out, os.O_WRONLY | os.O_CREAT)
        os.dup2(fd, 1)
        os.execv(sys.executable, [sys.executable, "-c", code])
    _, status = os.waitpid(pid, 0)
    del block
    assert os.waitstatus_to_exitcode(status) == 0
    child = int(out.read_text())
    assert 10 * 2**20 < child < 400 * 2**20  # an interpreter with torch, not 512 MiB more


def test_metrics_csv_has_the_column_and_the_summary_the_largest_rank_and_the_sum(tmp_path):
    cell = write_fixture_cell(tmp_path, stages=4)  # the fixture: 300 MB + rank on rank r
    assert "peak_rss_bytes" in METRIC_COLUMNS
    frame = read_metrics(cell)
    assert frame.groupby("rank")["peak_rss_bytes"].max().tolist() == [
        300_000_000, 300_000_001, 300_000_002, 300_000_003]
    row = summarize([tmp_path]).iloc[0]
    assert row["peak_rss_max_bytes"] == 300_000_003
    assert row["peak_rss_total_bytes"] == 4 * 300_000_000 + 0 + 1 + 2 + 3
    headers, rows = _rows(summarize([tmp_path]))
    assert "peak RSS GB (all ranks)" in headers
    assert rows[0][headers.index("peak RSS GB (all ranks)")] == "1.20"


def test_summary_files_carry_both_memory_columns(tmp_path):
    from bench.report.summary import write_summary_files
    write_fixture_cell(tmp_path, stages=2)
    write_summary_files(tmp_path, summarize([tmp_path]))
    row = json.loads((tmp_path / "summary.json").read_text())[0]
    assert row["peak_rss_max_bytes"] == 300_000_001
    assert row["peak_rss_total_bytes"] == 600_000_001
    header = (tmp_path / "summary.csv").read_text().splitlines()[0].split(",")
    assert {"peak_rss_max_bytes", "peak_rss_total_bytes"} <= set(header)
