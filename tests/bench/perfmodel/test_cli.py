"""`python -m bench model` (bench.perfmodel.cli): it refuses what `bench run` refuses,
shows every row's layout and compares it with fp32 of the same layout, explains its
columns, shows its defaults and lists the profiles there are."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
from report_fixtures import write_fixture_cell

from bench.__main__ import main
from bench.perfmodel.cli import WHATIF_MODES
from bench.perfmodel.whatif import LEGEND

pytestmark = pytest.mark.timeout(120)

TINY = ["model", "--preset", "tiny", "--stages", "2", "--micro-batch-size", "16",
        "--micro-batches", "4", "--profile", "cpu-2core"]


def _rows(out: str) -> list[list[str]]:
    """The table's rows split on runs of 2+ spaces: mode, layout, step s, samples/s, ..."""
    return [re.split(r"\s{2,}", line.strip()) for line in out.splitlines()
            if line.split() and line.split()[0] in ("fp32", "bf16", "aqsgd:2/4",
                                                    "aqsgd+gc:2/4", "directq:4/8",
                                                    "aqsgd:4/8")]


def test_a_layout_that_needs_more_hosts_than_the_scenario_has_is_refused(capsys):
    # the default: gpt2-xl on 8 stages; bench run refuses 8 stages on the 4-host 100mbps
    assert main(["model", "--profile", "a100-bf16", "--scenario", "100mbps"]) == 2
    err = capsys.readouterr().err
    assert "mode fp32 (8 stages x 1 replica(s)): cell of 8 stages" in err
    assert "needs 8 hosts; scenario '100mbps' has 4" in err and "--add-hosts" in err
    # the same what-if on a scenario with the hosts, or with the hosts added on purpose
    assert main(["model", "--profile", "a100-bf16", "--scenario", "100mbps-8hosts",
                 "--modes", "fp32"]) == 0
    on_eight = _rows(capsys.readouterr().out)
    assert main(["model", "--profile", "a100-bf16", "--scenario", "100mbps", "--add-hosts",
                 "--modes", "fp32"]) == 0
    assert _rows(capsys.readouterr().out) == on_eight
    assert on_eight[0][:2] == ["fp32", "8 x 1"]


def test_data_parallel_rows_are_compared_with_fp32_of_their_own_layout(capsys):
    assert main([*TINY, "--scenario", "100mbps", "--modes", "fp32", "aqsgd+gc:2/4"]) == 0
    rows = _rows(capsys.readouterr().out)
    # aqsgd+gc needs 2 replicas: fp32 of that layout runs beside it
    assert [(r[0], r[1]) for r in rows] == [("fp32", "2 x 1"), ("fp32", "2 x 2"),
                                            ("aqsgd+gc:2/4", "2 x 2")]
    assert rows[0][4] == "1.00x" and rows[1][4] == "1.00x"
    samples = {r[1] + r[0]: float(r[3]) for r in rows}
    vs = float(rows[2][4].rstrip("x"))
    assert vs == pytest.approx(samples["2 x 2aqsgd+gc:2/4"] / samples["2 x 2fp32"], rel=0.02)
    assert vs != pytest.approx(samples["2 x 2aqsgd+gc:2/4"] / samples["2 x 1fp32"], rel=0.02)


def test_bf16_is_compared_with_fp32_not_taken_for_it(capsys):
    assert main([*TINY, "--scenario", "100mbps", "--modes", "fp32", "bf16"]) == 0
    fp32, bf16 = _rows(capsys.readouterr().out)
    assert fp32[4] == "1.00x"
    assert float(bf16[4].rstrip("x")) == pytest.approx(float(bf16[3]) / float(fp32[3]),
                                                       rel=0.02)


def test_without_fp32_of_a_layout_there_is_no_comparison(capsys):
    assert main([*TINY, "--scenario", "100mbps", "--modes", "aqsgd:2/4"]) == 0
    (row,) = _rows(capsys.readouterr().out)
    assert row[:2] == ["aqsgd:2/4", "2 x 1"] and row[4] == "-"


def test_the_table_ends_with_a_legend_of_its_columns(capsys):
    assert main([*TINY, "--scenario", "100mbps"]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("mode"))
    legend = " ".join(out[out.index("legend: "):].split())
    assert legend == "legend: " + " ".join(LEGEND.split())
    for column in ("stages x replicas", "step s", "tokens/s", "vs fp32", "MB/step",
                   "bound by (sensitivity)", "comm-bound below"):
        assert column in header and f"{column}:" in legend
    assert "samples/s, tokens/s:" in legend
    assert "1.00: wholly bound by it" in legend and "most: the one stage or link" in legend


def test_help_shows_the_defaults(capsys):
    with pytest.raises(SystemExit) as done:
        main(["model", "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for option, default in (("--preset", "gpt2-xl"), ("--stages", "8"), ("--replicas", "1"),
                            ("--micro-batch-size", "1"), ("--micro-batches", "32"),
                            ("--profile", "a100-bf16: A100s in bf16 compute")):
        own_help = text.split(option, 2)[2].split(" --", 1)[0]
        assert f"(default {default}" in own_help, option
    assert f"(default {' '.join(WHATIF_MODES)})" in text
    assert "(a100-bf16, cpu-2core)" in text  # the profiles there are


@pytest.mark.parametrize("argv, message", [
    (["--profile", "nosuch"], r"--profile 'nosuch': no profile at .*profiles/nosuch.yaml; "
                              r"available: a100-bf16, cpu-2core"),
    (["--profile", "/no/such/profile.yaml"], r"no profile at /no/such/profile.yaml; "
                                             r"available: a100-bf16, cpu-2core"),
    (["--stages", "100"], r"--stages 100: the model \(gpt2-xl\) has 48 blocks"),
    (["--stages", "0"], r"--stages must be >= 1, got 0"),
    (["--replicas", "0"], r"--replicas must be >= 1, got 0"),
    (["--micro-batches", "0"], r"--micro-batches must be >= 1, got 0"),
    (["--rate-mbit", "0"], r"--rate-mbit 0: field 'rate_mbit': expected a number >= 0.05"),
    (["--modes", "aqsgd 2/4"], r"--modes 'aqsgd 2/4'"),
    (["--stages", "4", "--replicas", "2", "--scenario", "100mbps"],
     r"mode fp32 \(4 stages x 2 replica\(s\)\): .*needs 8 hosts"),
])
def test_bad_model_input_exits_2(argv, message, capsys):
    base = {"--profile": "a100-bf16", "--scenario": "100mbps-8hosts"}
    args = dict(zip(argv[::2], argv[1::2], strict=True))
    argv = [x for k, v in {**base, **args}.items() for x in (k, v)]
    assert main(["model", *argv]) == 2
    err = capsys.readouterr().err
    assert re.search(message, err) and "Traceback" not in err, err


def test_json_on_stdout_replaces_the_table_and_a_csv_path_keeps_it(capsys, tmp_path):
    argv = [*TINY, "--scenario", "100mbps", "--modes", "fp32", "aqsgd:2/4"]
    assert main([*argv, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)  # nothing but the JSON on stdout
    assert [r["mode"] for r in rows] == ["fp32", "aqsgd:2/4"]
    assert rows[1]["vs_fp32"] > 1 and (rows[1]["stages"], rows[1]["replicas"]) == (2, 1)
    assert rows[0]["scenario"] == "100mbps" and rows[0]["profile"] == "cpu-2core"
    csv = tmp_path / "model.csv"
    assert main([*argv, "--csv", str(csv)]) == 0
    assert "legend:" in capsys.readouterr().out  # the table as well
    table = pd.read_csv(csv)
    assert list(table["mode"]) == ["fp32", "aqsgd:2/4"]
    assert table["step_s"].tolist() == pytest.approx([r["step_s"] for r in rows])
    assert main([*argv, "--csv"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("mode,stages,replicas,")


@pytest.mark.parametrize("argv, message", [
    (["--json", "--csv"], r"--json and --csv both write to stdout: give one of them a PATH"),
    (["--csv", "DIR"], r"--csv .* is a directory: name the file to write"),
])
def test_bad_output_flags_exit_2(argv, message, capsys, tmp_path):
    argv = [str(tmp_path) if a == "DIR" else a for a in argv]
    assert main([*TINY, "--scenario", "100mbps", *argv]) == 2
    err = capsys.readouterr().err
    assert re.search(message, err) and "Traceback" not in err, err


def test_validate_with_no_readable_cell_exits_2_saying_why(capsys, tmp_path):
    write_fixture_cell(tmp_path, step_time_s=0.8, eval_losses=[4.0, 3.0])
    [meta] = tmp_path.glob("*/meta.json")
    meta.write_text(meta.read_text()[:100])  # truncated, as a killed writer leaves it
    assert main(["validate", "--profile", "cpu-2core", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"warning: {meta}: not a JSON file" in err
    assert f"error: no finished cell with measured steps under {tmp_path}" in err


def test_the_default_profile_is_the_gpu_one_in_bf16_compute_and_says_so(capsys):
    assert main(["model", "--scenario", "100mbps-8hosts", "--modes", "fp32"]) == 0
    assert "profile a100-bf16 (bf16 compute)" in capsys.readouterr().out
    assert main([*TINY, "--scenario", "100mbps", "--modes", "fp32", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert (rows[0]["profile"], rows[0]["precision"]) == ("cpu-2core", "fp32")
