"""Summary numbers (bench.report.summary) from written result cells: held-out loss,
speedups of the same replicas and variant, failed cells."""

from __future__ import annotations

import json

import pytest
from report_fixtures import launcher_block, outage_block, scheduled_link, write_fixture_cell

from bench.report.summary import summarize
from bench.report.tables import format_table, mode_text
from bench.results.files import load_results

pytestmark = pytest.mark.timeout(30)


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
    assert speedup[("aqsgd+gc/ef21:2/4", 2)] == pytest.approx(2.0)
    assert speedup[("aqsgd:2/4 [dropout0]", 1)] == pytest.approx(2.0)


def test_failed_cells_are_left_out_unless_asked(tmp_path):
    write_fixture_cell(tmp_path, status="failed")
    assert load_results([tmp_path]).empty
    assert len(load_results([tmp_path], include_failed=True)) == 12
    assert summarize([tmp_path])["status"].tolist() == ["failed"]


def test_cells_of_two_launchers_are_rows_of_their_own_compared_like_with_like(tmp_path):
    from bench.report.plots import launchers_line, series_labels
    from bench.report.tables import _rows

    write_fixture_cell(tmp_path, step_time_s=0.8)
    write_fixture_cell(tmp_path, mode="aqsgd", fw=2, bw=4, step_time_s=0.2)
    write_fixture_cell(tmp_path, step_time_s=0.4, launcher="docker", shaping="htb+netem")
    table = summarize([tmp_path])
    assert len(table) == 3 and table["cell"].is_unique
    by = table.set_index("launcher_label")
    assert set(by.index) == {"netns (htb)", "docker (htb+netem)"}
    # the docker fp32 cell is no reference for the netns aqsgd cell, nor the reverse
    aq = table[table["mode"] == "aqsgd"].iloc[0]
    assert aq["speedup_vs_fp32"] == pytest.approx(4.0)
    assert by.loc["docker (htb+netem)", "speedup_vs_fp32"] == pytest.approx(1.0)
    headers, rows = _rows(table)
    column = [r[headers.index("launcher")] for r in rows]
    assert sorted(column) == ["docker (htb+netem)", "netns (htb)", "netns (htb)"]
    # figures: each series names its launcher, the title every launcher drawn
    assert "fp32 [docker (htb+netem)]" in set(series_labels(table))
    assert launchers_line(table) == "launchers: docker (htb+netem), netns (htb)"
    assert launchers_line(table[table["launcher"] == "netns"]) == "launcher: netns (htb)"
    assert set(series_labels(table[table["launcher"] == "netns"])) == {"fp32", "aqsgd:2/4"}


def test_summarize_of_no_cells_is_an_empty_table_the_table_functions_take(tmp_path):
    from bench.report.summary import SUMMARY_COLUMNS
    from bench.report.tables import _rows

    for paths in ([], [tmp_path]):
        table = summarize(paths)
        assert table.empty
        assert list(table.columns[:len(SUMMARY_COLUMNS)]) == list(SUMMARY_COLUMNS)
        headers, rows = _rows(table)
        assert "launcher" in headers and rows == []


def _on_a_schedule(cell_dir, phases):
    """Give a fixture cell's meta.json a link schedule on 0 <-> 1 that applied `phases`
    ((applied_s, rate_mbit or None for down), then the restoring change at 40 s)."""
    path = cell_dir / "meta.json"
    meta = json.loads(path.read_text())
    changes = [{"src": src, "dst": dst, "phase": k, "lap": 0, "t_s": t, "applied_s": t,
                "rate_mbit": rate, "down": rate is None}
               for src, dst in ((0, 1), (1, 0))
               for k, (t, rate) in [*enumerate(phases), (-1, (40.0, None))]]
    for c in changes:
        c["down"] = c["down"] and c["phase"] >= 0
    meta["schedule"] = outage_block()
    meta["launcher"] = launcher_block(
        [scheduled_link(0, 1), scheduled_link(1, 0)],
        {"started_unix": 0.0, "stopped_unix": 40.0, "changes": changes})
    path.write_text(json.dumps(meta))


def test_a_scheduled_cell_reads_its_mean_rate_and_samples_over_time(tmp_path):
    # 100 Mbit/s for 10 s, 50 for 10, 25 for 10, down 10: mean 43.75, slowest 25
    cell = write_fixture_cell(tmp_path, scenario="dynamic-halving", step_time_s=0.2)
    _on_a_schedule(cell, [(0.0, 100.0), (10.0, 50.0), (20.0, 25.0), (30.0, None)])
    row = summarize([tmp_path]).iloc[0]
    assert row["rate_mbit"] == pytest.approx(43.75)
    assert row["rate_mbit_slowest_phase"] == 25.0
    assert row["throughput_statistic"] == "over time"
    assert row["throughput_samples_s"] == pytest.approx(row["throughput_mean_samples_s"],
                                                        rel=0.01)
    assert "dynamic-halving‡" in format_table(summarize([tmp_path]))


def test_mode_text_shows_the_k_of_a_mode_with_an_in_graph_half():
    row = {"mode": "ssn", "fw_bits": None, "bw_bits": None, "grad_mode": "fp32",
           "variant": "", "label": "ssn-k15"}
    assert mode_text(row) == "ssn:15"
    assert mode_text({**row, "mode": "bottleneck", "label": "bottleneck-k4"}) == "bottleneck:4"
    assert mode_text({**row, "label": "ssn"}) == "ssn"  # k left to the mode's default
    aq = {**row, "mode": "aqsgd", "fw_bits": 2, "bw_bits": 4, "label": "aqsgd-fw2-bw4"}
    assert mode_text(aq) == "aqsgd:2/4"
