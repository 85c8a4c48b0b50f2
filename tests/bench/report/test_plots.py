"""Figures, the Markdown report and the paper figures, made from result files."""

from __future__ import annotations

import pytest
from report_fixtures import write_fixture_cell

from bench.report.claims import load_claims
from bench.report.convergence import analyse
from bench.report.paper import claims_table, draw_paper_figures, relative_throughput
from bench.report.plots import make_figures, mode_colors, mode_order, series_color
from bench.report.summary import summarize
from bench.report.tables import format_table, write_report

pytestmark = pytest.mark.timeout(90)

# (scenario, rate Mbit/s) x mode -> step time: fp32 slows down with bandwidth, aqsgd less.
RATES = {"10gbps": 10_000, "500mbps": 500, "100mbps": 100}
MODES = {"fp32": (None, None), "aqsgd": (2, 4), "directq": (4, 8)}


def _sweep(tmp_path, host_limited: bool = False):
    for scenario, rate in RATES.items():
        # with host_limited: the 10 Gbit/s links deliver what this host carries, 4.2 Gbit/s
        limited = host_limited and rate == 10_000
        for name, (fw, bw) in MODES.items():
            traffic = 8e6 if name == "fp32" else 1e6  # bits per step
            write_fixture_cell(tmp_path, mode=name, fw=fw, bw=bw, scenario=scenario,
                               rate_mbit=rate, act_bytes=int(traffic / 8),
                               step_time_s=0.2 + traffic / (rate * 1e6),
                               train_loss0=5.0 if name != "directq" else 5.3,
                               eval_losses=[5.0, 4.5] if name != "directq" else [5.0, 4.8],
                               achieved_mbit=4_234.5 if limited else None,
                               ceiling_mbit=5_012.3 if limited else None)
    return tmp_path


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    return _sweep(tmp_path_factory.mktemp("sweep"))


def test_figures_are_written_as_png_and_svg(sweep_dir, tmp_path):
    figures = make_figures([sweep_dir], tmp_path / "figures")
    names = sorted(p.name for p in figures)
    for stem in ("throughput_vs_bandwidth", "speedup", "bytes_per_step", "loss_100mbps"):
        assert f"{stem}.png" in names and f"{stem}.svg" in names
    for path in figures:
        assert path.stat().st_size > 2000
        if path.suffix == ".png":
            assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = (tmp_path / "figures" / "throughput_vs_bandwidth.svg").read_text()
    assert "Mbit/s" in svg and "samples/s" in svg  # axes carry units


def test_report_has_table_figures_and_probe(sweep_dir, tmp_path):
    summary = summarize([sweep_dir])
    figures = make_figures([sweep_dir], sweep_dir / "figures")
    report = write_report(sweep_dir, summary, figures).read_text()
    assert "| scenario | mode |" in report and "aqsgd:2/4" in report
    assert "![throughput_vs_bandwidth](figures/throughput_vs_bandwidth.png)" in report
    assert "## Link probe" in report
    text = format_table(summary)
    assert "speed-up vs fp32" in text and text.count("\n") == 2 + len(summary) - 1


def test_summary_rows_are_in_reading_order(sweep_dir):
    summary = summarize([sweep_dir])
    assert list(summary["scenario"].unique()) == ["10gbps", "500mbps", "100mbps"]
    assert list(summary["mode"][:3]) == ["fp32", "directq", "aqsgd"]
    assert mode_order(["aqsgd+gc-fw2-bw4", "aqsgd-fw2-bw4", "fp32"])[0] == "fp32"


def test_paper_figures_and_claims_table(sweep_dir, tmp_path):
    claims = load_claims()
    assert {c["id"] for c in claims} >= {"max_speedup", "max_speedup_gc", "slowdown_500mbps"}
    rel = relative_throughput(summarize([sweep_dir]))
    fp32_fast = rel[(rel["mode"] == "fp32") & (rel["scenario"] == "10gbps")]
    assert fp32_fast["rel_fp32_fastest"].iloc[0] == pytest.approx(1.0)
    figures = draw_paper_figures(sweep_dir, tmp_path / "paper",
                                 conv_dir=tmp_path / "no-convergence")
    assert {p.name for p in figures} >= {"paper_throughput.png", "paper_speedup.png",
                                          "paper_speedup.svg"}
    # the few steps of a throughput cell say nothing about quality: no loss figure
    assert "paper_loss.png" not in {p.name for p in figures}
    conv = analyse(tmp_path / "no-convergence", sweep_dir, claims)
    headers, rows = claims_table(summarize([sweep_dir]), claims, conv)
    by_claim = {r[0]: r for r in rows}
    speedup_row = next(r for t, r in by_claim.items() if t.startswith("Up to 4.3x"))
    assert speedup_row[1] == "up to 4.3x" and "steady state" in speedup_row[2]
    assert "@ 100mbps" in speedup_row[2]
    quality_row = next(r for t, r in by_claim.items() if t.startswith("Activations"))
    assert quality_row[2].startswith("not judged: no convergence cells under")
    paper_md = (tmp_path / "paper" / "paper.md").read_text()
    assert "Quality claims: not judged. There are no convergence cells under" in paper_md


def test_claims_file_must_hold_a_list_of_claims(tmp_path):
    bad = tmp_path / "claims.yaml"
    bad.write_text("claims: {a: 1}\n")
    with pytest.raises(ValueError, match="claims.yaml"):
        load_claims(bad)


def test_report_probe_table_is_formatted_with_the_ratio(sweep_dir):
    report = write_report(sweep_dir, summarize([sweep_dir]), []).read_text()
    assert "| achieved/configured |" in report
    assert "| 10gbps | 0 -> 1 | 10000.0 | 10000.0 | 1.000 | - | no | 0.100 |" in report


def test_host_limited_links_are_labelled_in_table_report_and_figures(tmp_path):
    sweep = _sweep(tmp_path / "sweep", host_limited=True)
    summary = summarize([sweep])
    fast = summary[summary["scenario"] == "10gbps"]
    assert fast["host_limited"].all() and not summary[summary["scenario"] != "10gbps"][
        "host_limited"].any()
    assert fast["rate_mbit_achieved"].iloc[0] == pytest.approx(4_234.5)
    text = format_table(summary)
    assert text.count("10gbps (host-limited)") == 3 and "100mbps (host-limited)" not in text
    assert text.splitlines()[-1].startswith("host-limited: 10gbps links delivered 4234.5 "
                                            "Mbit/s of 10000 Mbit/s configured")
    figures = make_figures([sweep], sweep / "figures")
    svg = (sweep / "figures" / "throughput_vs_bandwidth.svg").read_text()
    assert "host-limited link (achieved &lt; configured)" in svg
    assert "4234 of 10000 Mbit/s" in svg
    assert "(HOST-LIMITED)" in (sweep / "figures" / "speedup.svg").read_text()
    report = write_report(sweep, summary, figures).read_text()
    assert "| 10gbps (host-limited) | fp32 |" in report
    assert "**host-limited: 10gbps links delivered 4234.5 Mbit/s" in report
    assert "| 10gbps | 0 -> 1 | 10000.0 | 4234.5 | 0.423 | 5012.3 | **yes** | 0.100 |" in report
    paper = draw_paper_figures(sweep, tmp_path / "paper", conv_dir=tmp_path / "no-convergence")
    svg = next(p for p in paper if p.name == "paper_speedup.svg").read_text()
    assert "host-limited link (achieved &lt; configured)" in svg


def test_report_draws_the_placement_and_what_each_probed_link_carries(sweep_dir):
    report = write_report(sweep_dir, summarize([sweep_dir]), []).read_text()
    assert "## Placement" in report
    assert "2 stages x 1 replica(s) on 10gbps" in report
    assert "| 0 | 0 | 0 | 0 |\n| 1 | 1 | 1 | 0 |" in report
    assert ("| 10gbps | 0 -> 1 | 10000.0 | 10000.0 | 1.000 | - | no | 0.100 | "
            "activations stage 0->1 |") in report


def test_one_colour_per_series_in_every_figure_and_twelve_stay_distinct():
    """The convergence sweep's twelve series in one figure: twelve colours; a series keeps
    its colour whatever else a figure shows (the panels of model_projection drop fp32)."""
    series = ["fp32", "fp32 dp2", "directq:2/4", "directq:3/6", "aqsgd:2/4", "aqsgd:3/6",
              "aqsgd:4/8", "aqsgd-lowbits:2/4", "aqsgd+gc/qadam:2/4 dp2",
              "aqsgd+gc/ef21:2/4 dp2", "aqsgd:2/4 [dropout0]", "bf16"]
    colors = mode_colors(series)
    assert len(set(colors.values())) == 12
    assert mode_colors(series[2:5]) == {s: colors[s] for s in series[2:5]}
    # a result file's label and the projection's names read as the same series
    assert series_color("aqsgd-fw2-bw4") == colors["aqsgd:2/4"]
    assert series_color("aqsgd+gc-qadam-fw2-bw4-dp2") == colors["aqsgd+gc/qadam:2/4 dp2"]
    assert series_color("gone:2/4") == series_color("nosuch")  # unregistered: grey


def _drawn(monkeypatch) -> dict:
    """The figures the plot functions draw, by stem, instead of writing them."""
    from bench.report import paper, plots

    drawn = {}
    for module in (plots, paper):
        monkeypatch.setattr(module, "save", lambda fig, out_dir, stem: drawn.update(
            {stem: fig}) or [])
    return drawn


def test_one_link_rate_draws_bars_not_points_on_one_log_tick(tmp_path, monkeypatch):
    from bench.report.plots import plot_loss, plot_throughput_vs_bandwidth
    from bench.results.files import load_results

    for name, (fw, bw) in MODES.items():
        write_fixture_cell(tmp_path, mode=name, fw=fw, bw=bw, step_time_s=0.3)
    drawn = _drawn(monkeypatch)
    plot_throughput_vs_bandwidth(summarize([tmp_path]), tmp_path)
    ax = drawn["throughput_vs_bandwidth"].axes[0]
    assert ax.get_xscale() == "linear" and len(ax.patches) == len(MODES)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["fp32", "directq:4/8", "aqsgd:2/4"]
    assert "at 100 Mbit/s" in ax.get_title()
    # the loss figure's one legend sits outside both panels, covering no curve
    plot_loss(load_results([tmp_path]), tmp_path)
    fig = drawn["loss_100mbps"]
    assert all(a.get_legend() is None for a in fig.axes) and len(fig.legends) == 1
    fig.canvas.draw()
    box = fig.legends[0].get_window_extent()
    assert all(box.x0 >= a.get_window_extent().x1 for a in fig.axes)


def test_several_link_rates_draw_lines_on_a_log_axis(sweep_dir, tmp_path, monkeypatch):
    from bench.report.plots import plot_throughput_vs_bandwidth

    drawn = _drawn(monkeypatch)
    plot_throughput_vs_bandwidth(summarize([sweep_dir]), tmp_path)
    ax = drawn["throughput_vs_bandwidth"].axes[0]
    assert ax.get_xscale() == "log" and len(ax.get_lines()) == len(MODES)
    assert {line.get_label() for line in ax.get_lines()} == {"fp32", "directq:4/8",
                                                            "aqsgd:2/4"}


def test_a_mode_keeps_its_colour_in_every_panel_of_the_projection(monkeypatch, tmp_path):
    import pandas as pd

    from bench.report.paper import _fig_projection

    rows = [{"model": "gpt2-xl", "mode": mode, "family": mode.split(":")[0].split(" ")[0],
             "rate_mbit": rate, "throughput_samples_s": tp * rate,
             "speedup_vs_fp32": tp, "speedup_vs_bf16": tp / 2}
            for mode, tp in (("fp32", 1.0), ("bf16", 2.0), ("aqsgd:2/4", 4.0),
                             ("fp32 dp2", 0.9))
            for rate in (100.0, 1000.0)]
    drawn = _drawn(monkeypatch)
    _fig_projection(pd.DataFrame(rows), [], tmp_path)
    colours: dict[str, set] = {}
    for ax in drawn["model_projection"].axes:
        for line in ax.get_lines():
            if not line.get_label().startswith("_"):
                colours.setdefault(line.get_label(), set()).add(line.get_color())
    assert set(colours) == {"fp32", "bf16", "aqsgd:2/4", "fp32 dp2"}
    assert all(len(c) == 1 for c in colours.values()), colours


def test_the_claim_over_another_mode_pairs_cells_of_the_same_bits_and_scenario(tmp_path):
    # TAH-Quant as published against AQ-SGD at 2/4 on two scenarios, three repeats each:
    # the best pair (500mbps, 1.25x in the median) with its band over repeats, the count
    for scenario, rate, tah_s in (("100mbps", 100, 0.25), ("500mbps", 500, 0.16)):
        for repeat, jitter in enumerate((0.0, 0.01, -0.01)):
            for mode, step in (("tahquant-pub", tah_s), ("aqsgd", 0.2)):
                write_fixture_cell(tmp_path, mode=mode, fw=2, bw=4, scenario=scenario,
                                   rate_mbit=rate, repeat=repeat, step_time_s=step + jitter,
                                   eval_losses=[5.0, 4.5])
        write_fixture_cell(tmp_path, mode="aqsgd", fw=4, bw=8, scenario=scenario,
                           rate_mbit=rate, eval_losses=[5.0, 4.5])  # no TAH-Quant 4/8: unpaired
    claims = load_claims()
    _, rows = claims_table(summarize([tmp_path]), claims,
                           analyse(tmp_path / "none", tmp_path, claims))
    row = next(r for r in rows if r[0].startswith("TAH-Quant: up to 1.33x"))
    assert row[1] == "up to 1.33x"
    # samples/s are samples / step time: 0.2/0.16 = 1.25 in the median; band 0.19/0.17 .. 0.21/0.15
    assert row[2].startswith("1.25x [1.12-1.40 over 3 repeats] (tahquant-pub:2/4 over "
                             "aqsgd:2/4 @ 500mbps"), row[2]
    assert row[2].endswith("1 of 2 pairs at 1x or more, median 1.02x"), row[2]
