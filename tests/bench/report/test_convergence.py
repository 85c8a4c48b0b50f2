"""The convergence report on hand-made cells whose answers are worked out by hand:
seed statistics and bands, gaps to fp32 of the same layout, the verdict rules, the time
axis from measured step times, time to quality, and the written report."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from report_fixtures import write_fixture_cell

from bench.report.claims import load_claims
from bench.report.convergence import analyse, write_convergence_report
from bench.report.quality import (
    at_edge,
    eval_curves,
    interval_text,
    judge_claims,
    judge_width,
    margin_pct,
    quality_table,
    seed_bands,
    significance_of,
)
from bench.report.timetoquality import elapsed_s
from bench.results.files import load_results

pytestmark = pytest.mark.timeout(120)

CURVE = [4.0, 3.5, 3.2]  # held-out loss at step 0 and after epochs 1 and 2; then the final
# series -> (mode, fw, bw, grad, replicas, final loss per seed 0, 1, 2)
SERIES = {
    "fp32": ("fp32", None, None, "fp32", 1, (3.00, 3.02, 2.98)),
    "aqsgd:2/4": ("aqsgd", 2, 4, "fp32", 1, (3.01, 3.03, 2.99)),  # +0.33%, 0.5 spreads
    "aqsgd:3/6": ("aqsgd", 3, 6, "fp32", 1, (3.00, 3.02, 2.98)),
    "aqsgd:4/8": ("aqsgd", 4, 8, "fp32", 1, (3.00, 3.02, 2.98)),
    "directq:2/4": ("directq", 2, 4, "fp32", 1, (3.30, 3.32, 3.28)),  # +10%, 15 spreads
    "directq:3/6": ("directq", 3, 6, "fp32", 1, (3.00, 3.02, 2.98)),  # same as fp32
    "fp32 dp2": ("fp32", None, None, "fp32", 2, (3.10, 3.12, 3.08)),
    "aqsgd+gc/ef21:2/4 dp2": ("aqsgd+gc", 2, 4, "ef21", 2, (3.10, 3.12, 3.08)),
}
# (mode, fw, bw, grad, replicas) -> (warm-up s/step, steady s/step) at 100mbps; 10x faster
# at 10gbps
STEP_S = {("fp32", None, None, "fp32", 1): (1.0, 1.0),
          ("aqsgd", 2, 4, "fp32", 1): (1.0, 0.25),
          ("directq", 2, 4, "fp32", 1): (1.0, 0.25),
          ("fp32", None, None, "fp32", 2): (2.0, 2.0),
          ("aqsgd+gc", 2, 4, "ef21", 2): (2.0, 0.5)}


def _conv(root, *, variants: bool = False):
    for mode, fw, bw, grad, dp, finals in SERIES.values():
        for seed, final in enumerate(finals):
            write_fixture_cell(root, mode=mode, fw=fw, bw=bw, grad_mode=grad, replicas=dp,
                               seed=seed, scenario="local", rate_mbit=None, launcher="local",
                               eval_losses=[*CURVE, final])
    if variants:  # without dropout aqsgd:2/4 matches fp32; its directq stays behind
        for (mode, fw, bw), finals in {("fp32", None, None): (2.90, 2.92, 2.88),
                                       ("aqsgd", 2, 4): (2.90, 2.92, 2.88),
                                       ("directq", 2, 4): (3.19, 3.21, 3.17)}.items():
            for seed, final in enumerate(finals):
                write_fixture_cell(root, mode=mode, fw=fw, bw=bw, seed=seed, dropout=0.0,
                                   variant="dropout0", scenario="local", rate_mbit=None,
                                   launcher="local", eval_losses=[*CURVE, final])
    return root


def _throughput(root):
    for scenario, rate, scale in (("10gbps", 10_000.0, 0.1), ("100mbps", 100.0, 1.0)):
        for (mode, fw, bw, grad, dp), (warm, steady) in STEP_S.items():
            write_fixture_cell(root, mode=mode, fw=fw, bw=bw, grad_mode=grad, replicas=dp,
                               scenario=scenario, rate_mbit=rate, epochs=5,
                               warmup_step_time_s=warm * scale, step_time_s=steady * scale)
    return root


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("conv")
    return _conv(root / "convergence", variants=True), _throughput(root / "paper")


def _quality(conv_dir) -> pd.DataFrame:
    return quality_table(eval_curves(load_results([conv_dir]))).set_index("series")


def test_final_loss_over_seeds_and_gap_to_fp32_of_the_same_layout(dirs):
    q = _quality(dirs[0])
    assert q.loc["aqsgd:2/4", "n_seeds"] == 3 and q.loc["aqsgd:2/4", "seeds"] == [0, 1, 2]
    assert q.loc["aqsgd:2/4", "mean"] == pytest.approx(3.01)
    assert q.loc["aqsgd:2/4", "sd"] == pytest.approx(0.02)
    assert q.loc["aqsgd:2/4", "gap_pct"] == pytest.approx(100 * 0.01 / 3.0)
    assert q.loc["aqsgd:2/4", "gap_spreads"] == pytest.approx(0.5)
    assert q.loc["directq:2/4", "gap_spreads"] == pytest.approx(15.0)
    # the dp2 mode is measured against fp32 dp2 (3.10), not fp32 with one replica (3.00)
    assert q.loc["aqsgd+gc/ef21:2/4 dp2", "fp32_mean"] == pytest.approx(3.10)
    assert q.loc["aqsgd+gc/ef21:2/4 dp2", "gap_pct"] == pytest.approx(0.0, abs=1e-9)
    # a variant is measured against fp32 of the same variant
    assert q.loc["aqsgd:2/4 [dropout0]", "fp32_mean"] == pytest.approx(2.90)
    assert not q["diverged"].any()


def test_bands_are_min_to_max_over_seeds_per_eval_step(dirs):
    bands = seed_bands(eval_curves(load_results([dirs[0]])))
    mine = bands[bands["series"] == "directq:2/4"].set_index("step")
    assert list(mine.index) == [0, 2, 4, 6]
    assert list(mine["epoch_done"]) == [0.0, 1.0, 2.0, 3.0]
    assert (mine.loc[6, "lo"], mine.loc[6, "mean"], mine.loc[6, "hi"]) == pytest.approx(
        (3.28, 3.30, 3.32))
    assert mine.loc[0, "lo"] == mine.loc[0, "hi"] == 4.0


def _row(gap_pct, gap_spreads, diverged=False):
    return {"gap_pct": gap_pct, "gap_spreads": gap_spreads, "diverged": diverged}


@pytest.mark.parametrize(("claim", "row", "expected"), [
    ("no_loss", _row(0.99, 5.0), "matched"),          # within 1%, however many spreads
    ("no_loss", _row(-3.0, -9.0), "matched"),         # better than fp32
    ("no_loss", _row(1.5, 1.9), "inconclusive"),      # above 1% but within seed noise
    ("no_loss", _row(1.5, math.nan), "inconclusive"),  # one seed: no spread to tell
    ("no_loss", _row(1.5, 2.1), "not matched"),
    ("no_loss", _row(0.5, 0.1, diverged=True), "not matched"),
    ("no_loss", _row(math.nan, math.nan), "not judged"),  # no fp32 reference
    ("worse", _row(1.5, 2.1), "matched"),
    ("worse", _row(1.5, 1.9), "inconclusive"),
    ("worse", _row(1.0, 9.0), "not matched"),
    ("worse", _row(math.nan, math.nan, diverged=True), "matched"),
])
def test_verdict_thresholds(claim, row, expected):
    assert judge_width(row, claim) == expected


def test_claims_verdicts_with_their_numbers(dirs):
    verdicts = {v.claim_id: v for v in judge_claims(_quality(dirs[0]).reset_index(),
                                                    load_claims())}
    quality = verdicts["quality_2_4_bits"]
    assert quality.verdict == "matched" and len(quality.evidence) == 3
    assert quality.evidence[0].startswith("aqsgd:2/4: 3.0100 vs fp32 3.0000 (+0.33%, +0.5 "
                                          "spreads, 3 seeds): matched")
    assert "within 1%" in quality.rule and "every width" in quality.rule
    directq = verdicts["directq_worse"]  # worse at 2 bits, not at 3: partly
    assert directq.verdict == "partly matched"
    assert [e.split("): ", 1)[1].split(",")[0] for e in directq.evidence] == [
        "matched", "not matched"]
    # each width states its margin to the 1% line; none of these is at the edge
    assert ", 9.00 points over the 1% line and 13.0 spreads beyond" in directq.evidence[0]
    assert ", 1.00 points under the 1% line and 2.0 spreads within" in directq.evidence[1]
    assert not quality.at_edge and quality.label == "matched"


@pytest.mark.parametrize(("claim", "row", "margin", "edge"), [
    ("no_loss", _row(1.00, 3.1), 0.0, True),     # the fresh clone's +1.00%: on the line
    ("no_loss", _row(1.08, 3.3), -0.08, True),   # another CPU's +1.08% of the same cells
    ("no_loss", _row(0.85, 2.0), 0.15, False),
    ("no_loss", _row(1.15, 4.0), -0.15, False),
    ("no_loss", _row(1.0, 3.0, diverged=True), 0.0, False),  # divergence decides
    ("worse", _row(1.05, 9.0), 0.05, True),
    ("worse", _row(2.4, 9.0), 1.4, False),
])
def test_a_verdict_states_its_margin_and_whether_it_is_at_the_edge(claim, row, margin, edge):
    assert margin_pct(row, claim) == pytest.approx(margin)
    assert at_edge(row, claim) is edge


def test_a_claim_on_the_line_is_reported_at_the_edge(tmp_path):
    # fp32 3.00 every seed; AQ-SGD 2/4 +1.00% (3.03), 3/6 and 4/8 equal to fp32
    for seed in range(3):
        write_fixture_cell(tmp_path, seed=seed, eval_losses=[4.0, 3.0 + 0.01 * seed])
        for fw, final in ((2, 3.03), (3, 3.0), (4, 3.0)):
            write_fixture_cell(tmp_path, mode="aqsgd", fw=fw, bw=2 * fw, seed=seed,
                               eval_losses=[4.0, final + 0.01 * seed])
    verdict = next(v for v in judge_claims(_quality(tmp_path).reset_index(), load_claims())
                   if v.claim_id == "quality_2_4_bits")
    assert verdict.verdict == "matched" and verdict.at_edge
    assert verdict.label == "matched (at the edge)"
    assert "0.00 points under the 1% line" in verdict.evidence[0]
    assert "(at the edge: within 0.1 points" in verdict.evidence[0]
    assert "(at the edge" not in verdict.evidence[1]


def test_a_missing_bit_width_keeps_the_claim_from_being_matched(tmp_path):
    for seed, final in enumerate((3.0, 3.02)):
        write_fixture_cell(tmp_path, seed=seed, eval_losses=[4.0, final])
        write_fixture_cell(tmp_path, mode="aqsgd", fw=2, bw=4, seed=seed,
                           eval_losses=[4.0, final])
    verdicts = {v.claim_id: v for v in judge_claims(_quality(tmp_path).reset_index(),
                                                    load_claims())}
    assert verdicts["quality_2_4_bits"].verdict == "inconclusive"
    assert verdicts["quality_2_4_bits"].evidence[-1] == "no aqsgd cells at forward 3, 4 bits"
    assert verdicts["directq_worse"].verdict == "not judged"


def test_a_run_that_ends_above_its_start_diverged(tmp_path):
    write_fixture_cell(tmp_path, eval_losses=[4.0, 3.0])
    write_fixture_cell(tmp_path, mode="directq", fw=2, bw=4, eval_losses=[4.0, 4.5])
    write_fixture_cell(tmp_path, mode="directq", fw=3, bw=6, eval_losses=[4.0, float("nan")])
    q = _quality(tmp_path)
    assert q.loc["directq:2/4", "diverged"] and q.loc["directq:3/6", "diverged"]
    assert not q.loc["fp32", "diverged"]
    verdict = next(v for v in judge_claims(q.reset_index(), load_claims())
                   if v.claim_id == "directq_worse")
    assert verdict.verdict == "matched"


def test_elapsed_time_counts_warmup_steps_at_their_own_time():
    assert list(elapsed_s([0, 1, 2, 3, 6], 2, 1.0, 0.25)) == [0.0, 1.0, 2.0, 2.25, 3.0]
    assert elapsed_s(4, 2, math.nan, 0.5) == 2.0  # no measured warm-up: steady time


def test_time_axis_and_time_to_quality(dirs):
    conv = analyse(dirs[0], dirs[1], load_claims())
    timed = conv.timed[conv.timed["step"] == 6].set_index("series")
    # 2 warm-up steps at 1 s, 4 steps at 0.25 s, from the 100mbps cell of the same mode
    assert timed.loc["aqsgd:2/4", "time_s"] == pytest.approx(3.0)
    assert timed.loc["aqsgd:2/4", "source"] == "100mbps__aqsgd-fw2-bw4__s0"
    assert timed.loc["fp32", "time_s"] == pytest.approx(6.0)
    assert "aqsgd:3/6" not in timed.index  # no throughput cell: no time axis
    ttq = conv.ttq.set_index(["series", "scenario"])
    assert list(dict.fromkeys(conv.ttq["scenario"])) == ["10gbps", "100mbps"]
    assert ttq.loc[("fp32", "100mbps"), "time_s"] == pytest.approx(6.0)
    assert ttq.loc[("aqsgd:2/4", "100mbps"), "time_s"] == pytest.approx(3.0)
    assert ttq.loc[("aqsgd:2/4", "10gbps"), "time_s"] == pytest.approx(0.3)
    assert ttq.loc[("directq:2/4", "100mbps"), "status"] == "not reached"  # 3.30 > 3.03
    assert ttq.loc[("aqsgd:3/6", "100mbps"), "status"] == "no throughput cell"
    # dp2 against fp32 dp2's target (3.10 * 1.01), at dp2's own step times
    assert ttq.loc[("aqsgd+gc/ef21:2/4 dp2", "100mbps"), "time_s"] == pytest.approx(
        2 * 2.0 + 4 * 0.5)
    assert ttq.loc[("aqsgd+gc/ef21:2/4 dp2", "100mbps"), "target"] == pytest.approx(3.131)


def test_report_writes_tables_figures_and_verdicts(dirs, tmp_path, capsys):
    path = write_convergence_report(dirs[0], dirs[1], tmp_path / "out")
    text = path.read_text()
    assert path == tmp_path / "out" / "convergence.md"
    for stem in ("convergence_loss_epoch", "convergence_loss_time_100mbps", "time_to_quality",
                 "convergence_dropout"):
        assert f"![{stem}]({stem}.png)" in text
        assert (tmp_path / "out" / f"{stem}.svg").stat().st_size > 2000
    # the fixture's cells send 1,000 bytes a step each way for 64 x 64 tokens
    assert ("| aqsgd:2/4 | 0.2 / 0.2 | 3 | 3.0100 | 0.0200 | 2.9900..3.0300 | +0.33 | +0.5 "
            "| fp32 |") in text
    assert "| aqsgd:2/4 | 6 | 0.30 s | 3.00 s |" in text
    assert "| directq:2/4 | not reached | not reached | not reached |" in text
    assert "| aqsgd:2/4 | 100mbps__aqsgd-fw2-bw4__s0 | 1.000 | 0.250 |" in text
    assert "| aqsgd:2/4 | 3.0100 +- 0.0200 (+0.33%) | 2.9000 +- 0.0200 (+0.00%) |" in text
    assert "dropout0 (dropout 0, random masks)" in text
    assert "| Activations compressed to 2-4 bits without loss of model quality | matched |" \
        in text
    out = capsys.readouterr().out
    assert "Published quality claims" in out and "partly matched" in out
    svg = (tmp_path / "out" / "convergence_loss_epoch.svg").read_text()
    assert "min..max over seeds" in svg and "held-out loss" in svg


def test_report_without_cells_says_so(tmp_path):
    path = write_convergence_report(tmp_path / "none", tmp_path / "none", tmp_path / "out",
                                    quiet=True)
    assert "No convergence cells under" in path.read_text()
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["convergence.md"]


def test_a_variant_without_its_fp32_says_so(tmp_path):
    for seed in (0, 1):
        write_fixture_cell(tmp_path, seed=seed, eval_losses=[4.0, 3.0 + seed / 100])
        write_fixture_cell(tmp_path, mode="aqsgd", fw=2, bw=4, seed=seed,
                           variant="masks-per_sample", dropout_masks="per_sample",
                           eval_losses=[4.0, 3.0])
    text = write_convergence_report(tmp_path, tmp_path / "none", tmp_path / "out",
                                    quiet=True).read_text()
    assert "| - | - | none (no fp32 [masks-per_sample] cells) |" in text
    assert "3.0000 +- 0.0000 (no fp32 of this variant)" in text
    assert "No throughput cells under" in text


def test_tah_quants_quality_claim_is_judged_at_3_and_4_bits_only(tmp_path):
    # fp32 3.00; TAH-Quant 2/4 +5% (not judged by the claim), 3/6 +0.5%, 4/8 +2% beyond noise
    for seed in range(3):
        write_fixture_cell(tmp_path, seed=seed, eval_losses=[4.0, 3.0 + 0.001 * seed])
        for fw, final in ((2, 3.15), (3, 3.015), (4, 3.06)):
            write_fixture_cell(tmp_path, mode="tahquant", fw=fw, bw=2 * fw, seed=seed,
                               eval_losses=[4.0, final + 0.001 * seed])
    verdict = next(v for v in judge_claims(_quality(tmp_path).reset_index(), load_claims())
                   if v.claim_id == "tahquant_quality_3_4_bits")
    assert verdict.text.startswith("TAH-Quant: 3-4 bit")
    assert verdict.verdict == "not matched" and len(verdict.evidence) == 2
    assert verdict.evidence[0].startswith("tahquant:3/6: 3.0160 vs fp32 3.0010 (+0.50%")
    assert "): matched" in verdict.evidence[0] and "): not matched" in verdict.evidence[1]
    assert "forward 3, 4 bits" in verdict.rule


@pytest.mark.parametrize(("words", "claim", "combine", "expected"), [
    (["within 1%", "within 1%"], "no_loss", "all", "matched"),
    (["within 1%", "cannot tell with 3 seeds"], "no_loss", "all", "cannot tell with 3 seeds"),
    (["cannot tell with 3 seeds", "beyond 1%"], "no_loss", "all", "not matched"),
    (["within 1%", "diverged"], "no_loss", "all", "not matched"),
    (["within 1%", "not judged"], "no_loss", "all", "not judged"),
    (["beyond 1%", "not judged"], "worse", "any", "matched"),   # one aggressive width
    (["within 1%", "within 1%"], "worse", "any", "not matched"),
    (["within 1%", "cannot tell with 2 seeds"], "worse", "any", "cannot tell with 2 seeds"),
])
def test_a_claim_at_the_intervals_confidence(words, claim, combine, expected):
    assert significance_of(words, claim, combine) == expected


def test_claims_carry_their_significance_and_each_width_its_interval(dirs):
    verdicts = {v.claim_id: v for v in judge_claims(_quality(dirs[0]).reset_index(),
                                                    load_claims())}
    # AQ-SGD differs from fp32 by the same 0.01 every seed: an exact +0.33% interval
    quality = verdicts["quality_2_4_bits"]
    assert quality.significance == "matched"
    assert quality.evidence[0].endswith(
        "; 95% interval +0.33% [+0.33, +0.33] (paired, 3 seeds): within 1%")
    # DirectQ 2/4 +10% every seed: beyond 1%; 3/6 equal to fp32: within
    assert verdicts["directq_worse"].significance == "matched"
    assert verdicts["directq_worse"].evidence[1].endswith("(paired, 3 seeds): within 1%")


def test_one_seed_gives_no_interval_and_cannot_tell(tmp_path):
    write_fixture_cell(tmp_path, eval_losses=[4.0, 3.0])
    write_fixture_cell(tmp_path, mode="directq", fw=2, bw=4, eval_losses=[4.0, 3.3])
    row = _quality(tmp_path).loc["directq:2/4"]
    assert row["gap_pct"] == pytest.approx(10.0) and row["gap_method"] == "none"
    assert interval_text(row) == "no 95% interval: cannot tell with 1 seed"
