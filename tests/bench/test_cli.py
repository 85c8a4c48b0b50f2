"""The bench command line (bench.__main__): an unknown scenario, a bad bit width, the
launchers it offers, a bad hostfile, a truncated result file."""

from __future__ import annotations

import re

import pytest
from report_fixtures import write_fixture_cell

from bench.__main__ import main
from bench.net.scenario import ScenarioError, load_scenario

pytestmark = pytest.mark.timeout(60)


def test_unknown_scenario_lists_the_available_ones(capsys):
    with pytest.raises(ScenarioError, match=r"available: .*100mbps"):
        load_scenario("100mbit")
    assert main(["run", "--scenario", "100mbit", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "no scenario '100mbit'" in err and "1gbps" in err and "loopback" in err


def test_cli_bad_bit_width_exits_2_naming_the_field(capsys):
    assert main(["run", "--scenario", "100mbps", "--modes", "aqsgd:2/12"]) == 2
    assert "bw_bits must be in 1..8, got 12" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["run", "--scenario", "100mbps"], ["paper"]])
def test_cli_offers_only_launchers_that_exist(capsys, command):
    with pytest.raises(SystemExit):
        main([*command, "--launcher", "kubernetes"])
    # argparse quotes the choices from Python 3.12.8 on
    assert re.search(r"invalid choice: 'kubernetes' \(choose from '?auto'?, '?netns'?, "
                     r"'?docker'?, '?local'?, '?ssh'?\)", capsys.readouterr().err)


@pytest.mark.parametrize("command", [["run", "--scenario", "loopback", "--stages", "2"],
                                     ["run", "--scenario", "loopback", "--dry-run"]])
def test_a_bad_hostfile_stops_the_command_before_any_cell(tmp_path, capsys, command):
    hostfile = tmp_path / "hosts.txt"
    hostfile.write_text("10.0.0.1 slots=x port=22x\n")
    out = tmp_path / "results"
    assert main([*command, "--launcher", "ssh", "--hostfile", str(hostfile), "--quiet",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{hostfile}: field 'hosts[0].slots': expected an integer, got 'x'" in err
    assert not out.exists()  # no cell, no report


def test_a_report_names_a_truncated_meta_once_and_refuses_a_folder_of_none_readable(
        tmp_path, capsys):
    write_fixture_cell(tmp_path, step_time_s=0.8, eval_losses=[4.0, 3.0])
    write_fixture_cell(tmp_path, mode="aqsgd", fw=2, bw=4, step_time_s=0.2,
                       eval_losses=[4.0, 3.1])
    [broken, kept] = sorted(tmp_path.glob("*/meta.json"), key=lambda p: "aqsgd" not in str(p))
    broken.write_text(broken.read_text()[:120])  # cut as a killed writer would leave it
    assert main(["report", str(tmp_path)]) == 0  # the other cell is read and reported
    err = capsys.readouterr().err
    assert err.count(str(broken)) == 1 and err.startswith(f"warning: {broken}: not a JSON")
    assert "Traceback" not in err and "ResultFileWarning" not in err
    kept.write_text("{")
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"error: no readable result cell under {tmp_path}: the meta.json of each of its 2" \
        in err


def test_version_names_the_suite_and_its_commit(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert re.fullmatch(r"bench \S+ \(commit ([0-9a-f]{12}|unknown)(, modified)?\)\n",
                        capsys.readouterr().out)


def test_every_workload_setting_is_a_run_flag_with_its_declared_default():
    from bench.__main__ import build_parser
    from bench.harness.workload import Workload

    args = build_parser().parse_args(["run", "--scenario", "100mbps"])
    for name in ("steps", "lr", "threads", "eval_samples", "timeout_s", "init_from"):
        assert getattr(args, name) == getattr(Workload(), name), name
    assert (args.stages, args.preset) == (None, None)  # the scenario's layout decides
    assert build_parser().parse_args(["run", "--scenario", "x", "--init-from", "none"]) \
        .init_from is None
