"""The what-if command (bench.perfmodel.whatif): every mode with its bound."""

from __future__ import annotations

from bench.__main__ import main


def test_whatif_prints_every_mode_with_its_bound(capsys):
    assert main(["model", "--preset", "tiny", "--stages", "2", "--micro-batch-size", "16",
                 "--micro-batches", "4", "--profile", "cpu-2core", "--scenario",
                 "100mbps"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines()
            if line.split() and line.split()[0] in ("fp32", "directq:4/8", "aqsgd:4/8",
                                                     "aqsgd:2/4")}
    assert set(rows) == {"fp32", "directq:4/8", "aqsgd:4/8", "aqsgd:2/4"}
    assert "communication" in rows["fp32"] and "comm-bound below" in out
    # fp32 carries 4.2 MB a step at 100 Mbit/s: 8x the bytes of 4/8-bit AQ-SGD
    assert " 4.2 " in rows["fp32"] and " 0.8 " in rows["aqsgd:4/8"]
