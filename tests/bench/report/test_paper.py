"""The paper report's quality side: its loss figure and verdicts come from convergence
cells, and loss ratios compare cells with the same stages and replicas."""

from __future__ import annotations

import pytest
from report_fixtures import write_fixture_cell

from bench.report.claims import load_claims
from bench.report.convergence import analyse
from bench.report.paper import draw_paper_figures
from bench.report.quality import relative_final

pytestmark = pytest.mark.timeout(120)

# final held-out loss per seed; fp32 with two replicas ends 10% above fp32 with one
FINALS = {("fp32", None, None, "fp32", 1): (3.00, 3.02, 2.98),
          ("fp32", None, None, "fp32", 2): (3.30, 3.32, 3.28),
          ("aqsgd+gc", 2, 4, "qadam", 2): (3.30, 3.32, 3.28),
          ("aqsgd", 2, 4, "fp32", 1): (3.00, 3.02, 2.98),
          ("aqsgd", 3, 6, "fp32", 1): (3.00, 3.02, 2.98),
          ("aqsgd", 4, 8, "fp32", 1): (3.00, 3.02, 2.98),
          ("directq", 2, 4, "fp32", 1): (3.60, 3.62, 3.58)}


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("paper")
    for (mode, fw, bw, grad, dp), finals in FINALS.items():
        for seed, final in enumerate(finals):
            write_fixture_cell(root / "convergence", mode=mode, fw=fw, bw=bw, grad_mode=grad,
                               replicas=dp, seed=seed, scenario="loopback", rate_mbit=None,
                               launcher="local", eval_losses=[4.0, 3.5, 3.2, final])
    for scenario, rate in (("10gbps", 10_000.0), ("100mbps", 100.0)):
        for mode, fw, bw in (("fp32", None, None), ("aqsgd", 2, 4)):
            write_fixture_cell(root / "paper", mode=mode, fw=fw, bw=bw, scenario=scenario,
                               rate_mbit=rate, step_time_s=0.2 if mode == "aqsgd" else 0.8)
    return root / "convergence", root / "paper"


def test_loss_ratio_of_a_dp2_mode_is_against_fp32_with_two_replicas(dirs):
    conv = analyse(dirs[0], dirs[1], load_claims())
    rel = relative_final(conv.quality).set_index("series")
    # against fp32 with one replica this would read 1.10
    assert rel.loc["aqsgd+gc/qadam:2/4 dp2", "rel"] == pytest.approx(1.0)
    assert rel.loc["directq:2/4", "rel"] == pytest.approx(1.2)
    assert (rel.loc["directq:2/4", "rel_lo"], rel.loc["directq:2/4", "rel_hi"]) == \
        pytest.approx((3.58 / 3.0, 3.62 / 3.0))


def test_paper_quality_claims_and_loss_figure_come_from_convergence_cells(dirs, tmp_path):
    figures = draw_paper_figures(dirs[1], tmp_path / "out", conv_dir=dirs[0])
    assert {"paper_loss.png", "paper_loss.svg", "paper_speedup.png"} <= {p.name for p in figures}
    svg = (tmp_path / "out" / "paper_loss.svg").read_text()
    assert "held-out loss" in svg and "same layout" in svg
    text = (tmp_path / "out" / "paper.md").read_text()
    assert f"Quality claims: the convergence cells under `{dirs[0]}`" in text
    assert "| Activations compressed to 2-4 bits without loss of model quality | ~1.0 | " \
        "matched: aqsgd:2/4: 3.0000 vs fp32 3.0000" in text
    # worse at 2 bits; no cells at 3 bits, so only partly
    assert "| >1.0 | partly matched: directq:2/4: 3.6000 vs fp32 3.0000 (+20.00%" in text
    assert "no directq cells at forward 3 bits |" in text


def test_the_paper_report_needs_its_convergence_folder_named():
    with pytest.raises(TypeError, match="takes 2 positional arguments"):
        draw_paper_figures(*[None] * 3)  # the claims file is no longer the third argument
