"""What scripts and terminals read of a sweep: summary.csv and summary.json beside
report.md (bench.report.summary.write_summary_files), and the terminal table at the
terminal's width (bench.report.tables.print_table)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from report_fixtures import write_fixture_cell

from bench.harness.modes import parse_mode
from bench.report.summary import SUMMARY_COLUMNS, summarize
from bench.report.tables import TABLE_COLUMNS, print_table, write_report

pytestmark = pytest.mark.timeout(60)

IDENTITY = ("cell", "sweep", "scenario", "mode", "label", "fw_bits", "bw_bits", "grad_mode",
            "stages", "replicas", "seed", "variant", "launcher", "shaped")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    write_fixture_cell(root, step_time_s=0.8, eval_losses=[4.0, 3.0])
    write_fixture_cell(root, mode="bf16", step_time_s=0.4, eval_losses=[4.0, 3.0])
    write_fixture_cell(root, mode="aqsgd", fw=2, bw=4, step_time_s=0.2, eval_losses=[4.0, 3.1],
                       variant="dropout0", dropout=0.0)
    write_fixture_cell(root, mode="aqsgd+gc", fw=2, bw=4, grad_mode="ef21", replicas=2,
                       step_time_s=0.4, launcher="docker")
    write_fixture_cell(root, mode="directq", fw=4, bw=8, status="failed")
    return root


def test_report_writes_summary_csv_and_json_with_one_row_per_cell(sweep):
    summary = summarize([sweep])
    write_report(sweep, summary, [])
    table = pd.read_csv(sweep / "summary.csv", keep_default_na=False, na_values=[""])
    rows = json.loads((sweep / "summary.json").read_text())
    assert len(table) == len(rows) == len(summary) == 5
    assert list(table.columns) == list(rows[0]) and set(SUMMARY_COLUMNS) <= set(rows[0])
    assert set(IDENTITY) <= set(rows[0])
    by_cell = {r["cell"]: r for r in rows}
    gc = by_cell["100mbps__aqsgd+gc-ef21-fw2-bw4-dp2__s0__docker"]
    assert (gc["launcher"], gc["replicas"], gc["mode_spec"]) == ("docker", 2, "aqsgd+gc/ef21:2/4")
    # every spelling a script reads back is the one `--modes` takes
    assert {str(parse_mode(r["mode_spec"])) for r in rows} == {r["mode_spec"] for r in rows}
    failed = by_cell["100mbps__directq-fw4-bw8__s0"]
    assert failed["status"] == "failed" and failed["throughput_samples_s"] is None  # NaN: null
    cells = table.set_index("cell")
    assert cells.loc["100mbps__bf16__s0", "speedup_vs_fp32"] == pytest.approx(2.0)
    # a variant has no fp32 of its own variant here: no speed-up, an empty field
    aq = cells.loc["100mbps__aqsgd-fw2-bw4__s0__dropout0"]
    assert aq["variant"] == "dropout0" and pd.isna(aq["speedup_vs_fp32"])
    # the numbers of the table are there: the speed-ups over each reference
    assert {c for c, _, _ in TABLE_COLUMNS if c.startswith("speedup")} <= set(table.columns)


def _printed(monkeypatch, capsys, summary, columns: int) -> list[str]:
    monkeypatch.setenv("COLUMNS", str(columns))
    print_table(summary)
    return capsys.readouterr().out.splitlines()


def test_the_terminal_table_fits_80_columns_leaving_out_the_least_columns(
        sweep, monkeypatch, capsys):
    lines = _printed(monkeypatch, capsys, summarize([sweep]), 80)
    assert max(len(line) for line in lines) <= 80
    text = "\n".join(lines)
    assert "…" not in text  # no cell and no header word cut short
    assert "aqsgd+gc/ef21:2/4" in text and "dropout0" in text and "failed" in text
    assert "samples/s" in text and "status" in text
    note = text[text.index("left out to fit 80 columns"):]
    assert "tokens/s" in note and "end-to-end vs fp32" in note and "summary.csv" in note
    # rows of two launchers (the fixture has a Docker cell), their column left out: each
    # row's scenario names its launcher
    assert "launcher" in note
    rows = [line for line in lines if "aqsgd+gc/ef21:2/4" in line or "bf16" in line]
    assert any("100mbps docker" in r for r in rows) and any("100mbps netns" in r for r in rows)


def test_one_launchers_rows_name_their_scenario_alone(sweep, monkeypatch, capsys):
    summary = summarize([sweep])
    text = "\n".join(_printed(monkeypatch, capsys, summary[summary["launcher"] == "netns"], 80))
    assert "100mbps " in text and "netns" not in text.split("left out")[0].split("\n", 1)[1]


def test_the_terminal_table_shows_every_column_in_200(sweep, monkeypatch, capsys):
    lines = _printed(monkeypatch, capsys, summarize([sweep]), 200)
    text = "\n".join(lines)
    assert max(len(line) for line in lines) <= 200 and "left out" not in text
    assert "…" not in text
    for header in ("tokens/s", "comm/compute", "MB/step", "held-out"):
        assert header in text
    assert "end-to-end" in text and "(warm-up" in text
