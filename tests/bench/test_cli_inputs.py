"""Bad input on the command line (bench.__main__): every `python -m bench` subcommand
answers with exit 2 and one or two lines naming the flag or file, the value and the fix,
before anything is brought up, measured or written; every default is in `--help`."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

import pytest

from bench import REPO_ROOT
from bench.__main__ import build_parser, main

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def nothing_runs(monkeypatch):
    """Fail the test if a command gets as far as hosts, checkpoints, sweeps or measuring."""
    def refuse(*args, **kwargs):
        pytest.fail("bad input must be refused before anything runs")

    for target in ("bench.harness.run._run_group", "bench.harness.run.prepare_builds",
                   "bench.harness.run.run_sweep", "bench.harness.convergence.run_sweep",
                   "bench.perfmodel.cli.measure_profile",
                   "bench.launch.docker.compose.write_compose"):
        monkeypatch.setattr(target, refuse)


def _paths(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    afile = tmp_path / "afile"
    afile.write_text("x\n")
    return {"EMPTY": str(empty), "FILE": str(afile), "MISSING": str(tmp_path / "missing")}


# (argv, what the message says); EMPTY, FILE and MISSING are a directory without cells,
# a plain file and a path that does not exist
BAD_INPUTS = [
    (["run", "--scenario", "100mbps", "--preset", "tiny8"],
     r"preset 'tiny8' is not a model preset: one of tiny, tiny-4"),
    (["run", "--scenario", "100mbps", "--preset", "tiny", "--stages", "4"],
     r"--stages: cell 100mbps__fp32: preset 'tiny' has 2 blocks, fewer than its 4 stages"),
    (["run", "--scenario", "100mbps", "--stages", "0"], r"stages must be >= 1, got 0"),
    (["run", "--scenario", "100mbps", "--repeats", "0"],
     r"--repeats: SweepSpec.repeats must be >= 1, got 0"),
    (["run", "--scenario", "100mbps", "--stages", "3"], r"no tiny preset is sized for 3"),
    (["run", "--scenario", "100mbps", "--stages", "8"],
     r"--stages: cell 100mbps__fp32: cell of 8 stages .* needs 8 hosts; scenario '100mbps' "
     r"has 4"),
    (["run", "--scenario", "100mbps", "--replicas", "3"],
     r"3 replicas on scenario '100mbps' \(4 hosts\) leave 1 stage\(s\) each.*--stages and "
     r"--preset"),
    (["run", "--scenario", "100mbps", "--steps", "0"], r"--steps: Workload.steps"),
    (["run", "--scenario", "100mbps", "--seed", "-1"], r"--seed: Workload.seed"),
    (["run", "--scenario", "100mbps", "--train-samples", "10"],
     r"--train-samples: cell 100mbps__fp32: train_samples 10 is fewer than the 64 samples"),
    (["run", "--scenario", "100mbps", "--init-from", "MISSING"],
     r"--init-from: cell 100mbps__fp32: no starting weights at"),
    (["run", "--scenario", "100mbps", "--reference", "nosuch"],
     r"--reference: no scenario 'nosuch'.*available: 100mbps"),
    (["run", "--scenario", "nosuch"], r"no scenario 'nosuch'.*available: 100mbps"),
    (["run", "--scenario", "100mbps", "--modes", "aqsgd 2/4"],
     r"--modes 'aqsgd 2/4': mode must be one of .*\n  a mode reads NAME\[/GRAD\]\[:FW/BW\]"),
    (["run", "--scenario", "100mbps", "--modes", "aqsgd-fw2-bw4-dp2"],
     r"--modes 'aqsgd-fw2-bw4-dp2': '-dp2' is 2 data-parallel replicas, no part of a mode: "
     r"give the mode 'aqsgd-fw2-bw4' and --replicas 2"),
    (["run", "--scenario", "100mbps", "--modes", "aqsgd:9/4"], r"fw_bits must be in 1..8"),
    (["run", "--scenario", "100mbps", "--modes", "fp32:2/4"], r"fp32 takes no bit widths"),
    (["run", "--scenario", "100mbps", "--out", "FILE"],
     r"--out .*afile is a file, not a results directory"),
    (["report", "EMPTY"], r"no result cells under .*empty \(no \*/meta.json\): write them"),
    (["report", "FILE"], r"afile is a file: name a results directory"),
    (["report", "MISSING"], r"no results at .*missing"),
    (["regress", "--baseline", "MISSING"],
     r"--baseline .*missing: no baseline at .*regress.csv; write one with"),
    (["regress", "--compare-only", "EMPTY", "--update-baseline"],
     r"--compare-only .*empty: no result cells there"),
    (["docker", "compose", "--scenario", "100mbps", "--out", "EMPTY"],
     r"--out .*empty is a directory: name the compose file"),
    (["docker", "compose", "--scenario", "100mbps", "--image", ""], r"--image '': name"),
    (["paper", "--no-run", "--results", "EMPTY"], r"--no-run: no throughput cells under"),
    (["paper", "--claims", "MISSING"], r"--claims .*missing: no such file"),
    (["convergence", "--no-run", "--results", "EMPTY"],
     r"--no-run: no convergence cells under .*empty"),
    (["profile", "--repeats", "0"], r"--repeats must be >= 1, got 0"),
    (["profile", "--name", ""], r"--name '': name the profile"),
    (["profile", "--out", "EMPTY"], r"--out .*empty is a directory: name the profile file"),
    (["profile", "--cells", "EMPTY"], r"--cells .*empty: no finished fp32 cell"),
    (["validate", "--profile", "cpu-2core", "EMPTY"], r"no result cells under .*empty"),
    (["validate", "--profile", "cpu-2core", "EMPTY", "--csv", "EMPTY"],
     r"--csv .*empty is a directory"),
    (["validate", "--profile", "nosuch", "EMPTY"],
     r"--profile 'nosuch': no profile at .*nosuch.yaml; available: a100-bf16, cpu-2core"),
]


@pytest.mark.parametrize("argv, message", BAD_INPUTS,
                         ids=[" ".join(a)[:60] for a, _ in BAD_INPUTS])
def test_bad_input_exits_2_naming_the_flag_value_and_fix(argv, message, tmp_path, capsys,
                                                         nothing_runs):
    paths = _paths(tmp_path)
    argv = [paths.get(a, a) for a in argv]
    assert main(argv) == 2
    out = capsys.readouterr()
    text = out.err + out.out
    assert "Traceback" not in text
    assert len([line for line in text.splitlines() if line.strip()]) <= 2, text
    assert re.search(message, text), text
    assert not (tmp_path / "missing").exists()


def test_a_bad_preset_is_refused_by_the_real_process_without_a_traceback():
    done = subprocess.run([sys.executable, "-m", "bench", "run", "--scenario", "100mbps",
                           "--preset", "tiny8"], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith("error: preset 'tiny8' is not a model preset")
    assert "Traceback" not in done.stderr + done.stdout


def _optional_actions(parser: argparse.ArgumentParser, name: str = ""):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, p in action.choices.items():
                yield from _optional_actions(p, f"{name} {sub}".strip())
        elif action.option_strings and action.dest != "help":
            yield name, action


def test_every_option_with_a_default_states_it_in_help():
    missing = [f"{name} {action.option_strings[0]}"
               for name, action in _optional_actions(build_parser())
               if not action.required and not isinstance(action, argparse._StoreTrueAction)
               and "default" not in (action.help or "")]
    assert missing == []
