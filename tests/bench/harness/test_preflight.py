"""A sweep is checked whole before anything is brought up (bench.harness.preflight): every
cell against its scenario's hosts, its preset's blocks, its training split, its starting
weights and its RunConfig, the error naming the sweep file and the field that decides."""

from __future__ import annotations

import re

import pytest

from bench.__main__ import main
from bench.harness.modes import parse_mode
from bench.harness.preflight import (
    RUNS_DURING_RUN,
    UnplacedCellError,
    check_sweep,
    load_checked_sweep,
    refuse_unsupported,
)
from bench.harness.sweep import SweepSpec, Variant, Workload
from bench.launch.choice import launcher_factory
from bench.net.placement import PlacementError
from specfile import SpecError

pytestmark = pytest.mark.timeout(60)

HEAD = "name: bad\nscenarios: [100mbps]\n"

# (the rest of the file, the field named, what the message says)
BAD_CELLS = [
    ("modes: [fp32]\nworkload: {stages: 3}\n", "workload.stages",
     r"cell 100mbps__fp32: preset 'tiny' has 2 blocks, fewer than its 3 stages.*tiny-4 \(4\)"),
    ("modes: [fp32]\nworkload: {stages: 8, preset: tiny-8}\n", "workload.stages",
     r"cell 100mbps__fp32: cell of 8 stages .*needs 8 hosts; scenario '100mbps' has 4"),
    ("modes: [fp32, aqsgd+gc]\nworkload: {stages: 4, preset: tiny-4}\n", "workload.gc_stages",
     r"cell 100mbps__fp32-dp2: cell of 4 stages x 2 replica\(s\) needs 8 hosts"),
    ("modes: [fp32]\nvariants:\n  - {name: deep, modes: [fp32], workload: {stages: 3}}\n",
     "variants[0].workload.stages", r"cell 100mbps__fp32__deep: preset 'tiny' has 2 blocks"),
    ("modes: [fp32]\nworkload: {train_samples: 32}\n", "workload.train_samples",
     r"train_samples 32 is fewer than the 64 samples of one step"),
    ("modes: [fp32]\nvariants:\n  - {name: small, modes: [fp32], workload: "
     "{train_samples: 32}}\n", "variants[0].workload.train_samples", r"fewer than the 64"),
    ("modes: [fp32]\nworkload: {init_from: /no/such/weights.pt}\n", "workload.init_from",
     r"no starting weights at '/no/such/weights.pt'"),
    ("modes: [fp32]\nworkload: {overrides: {train.lrr: 0.1}}\n", "workload.overrides",
     r"cell 100mbps__fp32: unknown key train.lrr"),
    ("modes: [fp32]\nreference: nosuch\n", "reference", r"no scenario 'nosuch'"),
    ("modes: [fp32]\nthroughput: nosuch\n", "throughput",
     r"no sweep 'nosuch' in .*sweeps.*available: .*convergence"),
    ("modes: [aqsgd]\nbits: [[9, 4]]\n", "modes[0]", r"fw_bits must be in 1..8, got 9"),
]


@pytest.mark.parametrize("body, field, message", BAD_CELLS, ids=[f for _, f, _ in BAD_CELLS])
def test_a_bad_cell_names_the_file_and_field(tmp_path, body, field, message):
    path = tmp_path / "bad.yaml"
    path.write_text(HEAD + body)
    with pytest.raises(ValueError) as err:
        load_checked_sweep(path)
    text = str(err.value)
    assert text.startswith(f"{path}: field '{field}': "), text
    assert re.search(message, text), text


def test_an_unknown_scenario_in_the_list_names_its_index(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: bad\nscenarios: [100mbps, nosuch]\nmodes: [fp32]\n")
    with pytest.raises(ValueError, match=r"field 'scenarios\[1\]': no scenario 'nosuch'"):
        load_checked_sweep(path)


@pytest.mark.parametrize("body", [b for b, _, _ in BAD_CELLS[:3]])
def test_sweep_refuses_before_any_host_or_file(tmp_path, capsys, monkeypatch, body):
    """The stages: 3 sweep used to bring up every host and probe every link, then fail
    its cell; now the command exits 2 before choosing a launcher."""
    def refuse(*args, **kwargs):
        pytest.fail("a bad cell must be refused before a launcher is chosen")

    monkeypatch.setattr("bench.harness.run.choose_launcher", refuse)
    path = tmp_path / "bad.yaml"
    path.write_text(HEAD + body)
    out = tmp_path / "results"
    assert main(["sweep", str(path), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: field ") and "Traceback" not in err
    assert not out.exists()


def test_check_sweep_of_a_spec_built_in_code():
    fine = SweepSpec("ok", ("100mbps",), (parse_mode("fp32"), parse_mode("aqsgd+gc")),
                     Workload(stages=2))
    plan = check_sweep(fine)
    assert [c.name for c in plan.cells] == list(plan.placements)
    assert plan.placements["100mbps__aqsgd+gc-qadam-fw2-bw4-dp2"].world_size == 4
    deep = SweepSpec("deep", ("100mbps",), (parse_mode("fp32"),),
                     Workload(stages=8, preset="tiny-8"))
    with pytest.raises(UnplacedCellError) as err:
        check_sweep(deep)
    assert isinstance(err.value, PlacementError) and err.value.field == "workload.stages"
    variant = Variant((parse_mode("fp32"),), Workload(stages=2, train_samples=16, variant="v"))
    small = SweepSpec("v", ("100mbps",), (parse_mode("fp32"),), Workload(stages=2),
                      variants=(variant,))
    with pytest.raises(SpecError) as err:
        check_sweep(small)
    assert err.value.field == "variants[0].workload.train_samples"


def test_shipped_sweeps_pass_the_check():
    for name in ("paper", "regress", "convergence", "convergence-smoke", "eight-stage",
                 "wide-area"):
        assert load_checked_sweep(f"scenarios/sweeps/{name}.yaml").cells()


@pytest.mark.parametrize("launcher", ["local", "docker", "ssh"])
@pytest.mark.parametrize("scenario, what", [("dynamic-competing", "competing"),
                                            ("dynamic-straggler", "stragglers")])
def test_a_launcher_that_does_not_run_flows_or_stragglers_is_refused(scenario, what, launcher):
    spec = SweepSpec(name="s", scenarios=(scenario,), modes=(parse_mode("fp32"),),
                     workload=Workload(stages=2))
    plan = check_sweep(spec)
    with pytest.raises(SpecError, match=rf"scenario {scenario} has {what}, which the "
                                        rf"{launcher} launcher does not run: use --launcher "
                                        rf"netns") as info:
        refuse_unsupported(spec, plan, launcher)
    assert info.value.field == "scenarios[0]"
    refuse_unsupported(spec, plan, "netns")


def test_the_refusal_is_exit_code_2_before_anything_is_brought_up(capsys):
    code = main(["run", "--scenario", "dynamic-straggler", "--modes", "fp32", "--launcher",
                 "local", "--reference", "none", "--dry-run"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the local launcher does not run: use --launcher netns" in err[0]


def test_the_table_of_what_runs_during_a_run_is_the_launchers_own():
    for name in ("netns", "docker", "ssh"):
        assert launcher_factory(name).during_run == RUNS_DURING_RUN.get(name, frozenset())
