"""A failed cell names why on the terminal and in the table's status column: the rank,
its exit code and the worker's own last error line (the exception's message, with the
mode and the plug-in it ran in), not only 'rank R exited with code 1'."""

from __future__ import annotations

import json
import sys

import pytest
from rich.console import Console

from bench.harness.run import run_sweep
from bench.harness.sweep import SweepSpec, Workload, parse_mode
from bench.report.summary import summarize
from bench.report.tables import format_table, print_table
from bench.results.files import last_error

# What aqsgd.train.worker.main writes when a plug-in's decode raises: the traceback, then
# its own line last.
PLUGIN_NOTE = ("[in decode of activation mode 'sign' (plug-in sign 0.1 (/abs/sign.py, "
               "sha256 0123abcd)), receiver side]")
ERROR = f"ValueError: cache rows must have shape (16, 64, 128), got (16, 4096) {PLUGIN_NOTE}"
WORKER_LOG = f"""rank 1 starting
Traceback (most recent call last):
  File "/work/aqsgd/train/worker.py", line 304, in main
    run_worker(cfg, args.rank, args.world_size, args.master_addr, args.master_port)
ValueError: cache rows must have shape (16, 64, 128), got (16, 4096)
{PLUGIN_NOTE}
aqsgd.train.worker: rank 1 (stage 1, replica 0) failed: {ERROR}
"""

FAILING_WORKER = f'''
import argparse, sys
p = argparse.ArgumentParser()
for name in ("--config", "--rank", "--world-size", "--master-addr", "--master-port"):
    p.add_argument(name, required=True)
if p.parse_args().rank == "1":
    sys.stderr.write({WORKER_LOG!r})
    sys.exit(1)
'''


def test_the_last_error_is_the_workers_own_line_else_the_tracebacks_last():
    assert last_error(WORKER_LOG) == ERROR
    traceback_only = "Traceback (most recent call last):\n  File \"x.py\", line 1\n" \
                     "KeyError: 'rows'\nnoise after it\n"
    assert last_error(traceback_only) == "noise after it"
    assert last_error("Traceback (most recent call last):\n  File \"x.py\"\n"
                      "OSError: [Errno 28] No space left on device\n") == \
        "OSError: [Errno 28] No space left on device"
    assert last_error("fake worker: injected failure\n") == ""


@pytest.mark.slow
@pytest.mark.workers
def test_a_failed_cell_names_the_workers_error_on_the_terminal_and_in_the_table(tmp_path):
    script = tmp_path / "failing_worker.py"
    script.write_text(FAILING_WORKER)
    spec = SweepSpec("t", ("100mbps",), (parse_mode("fp32"),),
                     Workload(steps=2, train_samples=64, timeout_s=60, init_from=None,
                              eval_samples=0))
    out, lines = tmp_path / "results", []
    [outcome] = run_sweep(spec, out, launcher="local", quiet=True,
                          worker_cmd=(sys.executable, str(script)), echo=lines.append)
    reason = f"rank 1 exited with code 1: {ERROR}"
    assert outcome.status == "failed" and outcome.reason == reason
    assert any(line.startswith("failed 100mbps__fp32__local") and line.endswith(reason)
               for line in lines), lines
    meta = json.loads((out / "100mbps__fp32__local" / "meta.json").read_text())
    assert meta["failure"]["reason"] == reason

    summary = summarize([out])
    assert summary["failure"].tolist() == [reason]
    assert f"failed: {reason}" in format_table(summary)  # report.md's table

    def terminal(rows) -> str:
        console = Console(width=100, record=True, color_system=None)
        print_table(rows, console)
        return console.export_text()

    # the terminal's: the reason wraps, and leaves out no column a bare 'failed' keeps
    text = terminal(summary)
    left_out = [line for line in text.splitlines() if line.startswith("left out")]
    bare = terminal(summary.assign(failure=""))
    assert left_out == [line for line in bare.splitlines() if line.startswith("left out")]
    words = " ".join(text.split())
    for word in ("failed:", "ValueError:", "plug-in", "sign", "receiver"):
        assert word in words
