"""`bench compare A B` on hand-made result folders: cells matched by identity across
commits and machines, repeats as median and band, the exit code per metric's direction,
the figure, unmatched cells listed, bad input refused (bench.report.compare)."""

from __future__ import annotations

import json

import pytest
from report_fixtures import write_fixture_cell

from bench.__main__ import main
from bench.report.compare import compare_results

pytestmark = pytest.mark.timeout(120)

# 64 samples a step: fp32 at 0.4 s is 160 samples/s
AQSGD = {"mode": "aqsgd", "fw": 2, "bw": 4}


def _folder(root, fp32_s: float, aqsgd_s: tuple[float, ...], *, commit: str = "abc",
            loss: float = 3.0, act_bytes: int = 1000, workload: dict | None = None):
    """fp32 once and aqsgd 2/4 once per entry of `aqsgd_s` (its repeats), at `commit`;
    `workload`: the spec's workload fields."""
    root.mkdir()
    write_fixture_cell(root, step_time_s=fp32_s, eval_losses=[4.0, 3.0, 3.0, 3.0])
    for repeat, step_s in enumerate(aqsgd_s):
        write_fixture_cell(root, **AQSGD, repeat=repeat, step_time_s=step_s,
                           eval_losses=[4.0, 3.5, 3.2, loss], act_bytes=act_bytes)
    for meta_path in root.glob("*/meta.json"):  # another run: commit and machine differ
        meta = json.loads(meta_path.read_text())
        meta["identity"].update(git_commit=commit, machine={"hostname": commit, "kernel": "7"})
        meta["spec"] = {"workload": workload or {"steps": 8, "overrides": {}}}
        meta_path.write_text(json.dumps(meta))
    return root


@pytest.fixture(scope="module")
def before(tmp_path_factory):
    return _folder(tmp_path_factory.mktemp("cmp") / "before", 0.4, (0.2, 0.25, 0.2))


def test_cells_match_across_commits_with_repeats_as_median_and_band(before, tmp_path):
    # the later commit's workload has a field more: matched on the fields both have
    after = _folder(tmp_path / "after", 0.4, (0.25, 0.25), commit="def", loss=3.3,
                    workload={"steps": 8, "overrides": {}, "precision": "fp32"})
    result = compare_results(before, after)
    assert result.only_a == result.only_b == []
    assert result.one_sided == ["spec.workload.precision"]
    rows = result.rows.set_index("cell")
    aqsgd = rows.loc["100mbps__aqsgd-fw2-bw4__s0"]
    assert (aqsgd["a_repeats"], aqsgd["b_repeats"]) == (3, 2)
    assert (aqsgd["a_lo"], aqsgd["a"], aqsgd["a_hi"]) == pytest.approx((256, 320, 320))
    assert aqsgd["ratio"] == pytest.approx(256 / 320)
    assert (aqsgd["ratio_lo"], aqsgd["ratio_hi"]) == pytest.approx((256 / 320, 1.0))
    assert aqsgd["verdict"] == "regressed"
    assert rows.loc["100mbps__fp32__s0", "verdict"] == "same"
    # loss: higher is worse (3.3 over 3.0: +10 %)
    loss = compare_results(before, after, metric="loss").rows.set_index("cell")
    assert loss.loc["100mbps__aqsgd-fw2-bw4__s0", "change_pct"] == pytest.approx(10.0)
    assert loss.loc["100mbps__aqsgd-fw2-bw4__s0", "verdict"] == "regressed"


def test_a_regression_exits_1_and_draws_the_figure_beside_out(before, tmp_path, capsys):
    after = _folder(tmp_path / "after", 0.4, (0.25,), commit="def", act_bytes=1200)
    out = tmp_path / "cmp" / "bytes.csv"
    assert main(["compare", str(before), str(after), "--metric", "bytes",
                 "--out", str(out)]) == 1
    assert "1 cell(s) regressed past 5%: 100mbps__aqsgd-fw2-bw4__s0" in capsys.readouterr().err
    assert (out.with_suffix(".png")).stat().st_size > 0 and out.with_suffix(".svg").is_file()
    assert "regressed" in out.read_text()
    # the same cells within a threshold of 30 %: no regression
    assert main(["compare", str(before), str(after), "--metric", "bytes",
                 "--threshold", "30"]) == 0


def test_an_improvement_exits_0_with_the_figure_in_b(before, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # rich folds long lines at the terminal's width
    after = _folder(tmp_path / "after", 0.2, (0.1,), commit="def")
    assert main(["compare", str(before), str(after)]) == 0
    printed = capsys.readouterr().out
    assert "improved" in printed and "commit def" in printed
    assert (after / "figures" / "compare_samples_per_s.png").stat().st_size > 0


def test_cells_of_one_side_are_listed_with_what_differs(before, tmp_path, capsys,
                                                       monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    after = tmp_path / "after"
    write_fixture_cell(after, step_time_s=0.4, eval_losses=[4.0, 3.0], eval_windows=64)
    write_fixture_cell(after, mode="bf16", step_time_s=0.3)
    result = compare_results(before, after)
    assert result.rows.empty
    assert result.only_a == ["100mbps__aqsgd-fw2-bw4__s0",
                             "100mbps__fp32__s0 (the other side's cell of this name differs: "
                             "cell.eval_windows 128 -> 64)"]
    assert result.only_b[0] == "100mbps__bf16__s0"
    # nothing in common: nothing to gate on, bad input
    assert main(["compare", str(before), str(after)]) == 2
    captured = capsys.readouterr()
    assert "only in B (2): 100mbps__bf16__s0" in captured.out
    assert "nothing to compare" in captured.err


def test_a_workload_field_of_another_value_is_another_cell(before, tmp_path):
    after = _folder(tmp_path / "after", 0.4, (0.2,),
                    workload={"steps": 8, "overrides": {"lr": 0.1}})
    result = compare_results(before, after)
    assert result.rows.empty and len(result.only_a) == len(result.only_b) == 2
    assert result.only_b[0].endswith('spec.workload.overrides {} -> {"lr": 0.1})')


def test_bad_input_exits_2_naming_the_folder(before, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["compare", str(before), str(empty)]) == 2
    assert f"no result cells under {empty}" in capsys.readouterr().err
    assert main(["compare", str(tmp_path / "missing"), str(before)]) == 2
    assert "missing" in capsys.readouterr().err
    assert main(["compare", str(before), str(before), "--threshold", "-1"]) == 2
    assert "--threshold: expected a percentage >= 0, got -1" in capsys.readouterr().err
    assert main(["compare", str(before), str(before), "--out", str(tmp_path / "x.txt")]) == 2


def test_cells_the_harness_wrote_match_across_commits_and_pool_their_repeats(tmp_path):
    """meta.json as the harness writes it (bench.harness.meta): the spec's repeat and the
    commit are no part of the match; its steps are."""
    from harness_helpers import write_cell

    from bench.harness.sweep import CellSpec, Workload, parse_mode

    def cell(steps: int = 2, repeat: int = 0) -> CellSpec:
        return CellSpec("100mbps", parse_mode("aqsgd:2/4"), Workload(steps=steps),
                        repeat=repeat)

    write_cell(tmp_path / "a", cell(), rate_mbit=100.0, act_bytes=1000, step_time_s=0.2)
    for repeat, step_s in enumerate((0.25, 0.3)):
        write_cell(tmp_path / "b", cell(repeat=repeat), rate_mbit=100.0, act_bytes=1000,
                   step_time_s=step_s)
    # the same name, 3 steps: another cell (in a folder of its own: the name is taken)
    write_cell(tmp_path / "b" / "longer", cell(steps=3), rate_mbit=100.0, act_bytes=1000,
               step_time_s=0.2)
    meta_path = tmp_path / "a" / cell().name / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["identity"]["git_commit"] = "another"
    meta_path.write_text(json.dumps(meta))
    result = compare_results(tmp_path / "a", tmp_path / "b")
    row = result.rows.set_index("cell").loc[cell().name]
    assert (row["a_repeats"], row["b_repeats"]) == (1, 2)
    assert row["cells_b"] == f"{cell().name}, {cell(repeat=1).name}"
    # the median of the two repeats' samples/s over A's
    assert row["ratio"] == pytest.approx((1 / 0.25 + 1 / 0.3) / 2 * 0.2)
    only, = result.only_b
    assert only.startswith(f"{cell().name} (") and "spec.workload.steps 2 -> 3" in only
