"""`python -m bench convergence` (bench.harness.convergence): the time stated up front, and
the smoke size end to end through the real harness and real workers."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from bench.__main__ import main
from bench.harness.convergence import CONVERGENCE_LAUNCHER, plan, state_times, sweep_file

# the default size's promise on a 2-core machine (its sweep file's measured rates): its
# 54 cells were sized for 30 min; bf16's and TAH-Quant's 15 cells take it to about 34,
# tahquant-pub's 6 to about 37, the trainable codecs' 12 (ssn, bottleneck) to about 42.4
DEFAULT_SIZE_MAX_MIN = 43.0


def test_time_is_stated_up_front_for_both_sweeps(tmp_path):
    p = plan("default", tmp_path / "conv", tmp_path / "paper")
    assert p.throughput is not None and p.throughput.name == "paper"
    # a pre-training line comes first only where the tiny checkpoint is not cached yet
    # (a fresh clone): test_convergence_sweeps.py covers it
    said = state_times(p)
    lines = [line for line in said if not line.startswith("pre-training ")]
    assert all(line.startswith("pre-training preset tiny ") for line in said[:-2])
    assert len(lines) == 2
    n_tp, n_conv = len(p.throughput.cells()), len(p.convergence.cells())
    assert lines[0].startswith(f"sweep paper: {n_tp} of {n_tp} cells to run, about ")
    assert "throughput cells for time-to-quality" in lines[0]
    assert lines[1].startswith(f"sweep convergence: {n_conv} of {n_conv} cells to run, about ")
    minutes = float(re.search(r"about ([\d.]+) min", lines[1]).group(1))
    assert minutes == pytest.approx(p.convergence.estimate_s(p.convergence.cells()) / 60, 0.01)
    assert minutes <= DEFAULT_SIZE_MAX_MIN
    # no throughput sweep to run: one line
    assert len([line for line in state_times(plan("default", tmp_path / "c", tmp_path / "t",
                                                  with_throughput=False))
                if not line.startswith("pre-training ")]) == 1


def test_sizes_are_sweep_files():
    assert sweep_file("default").name == "convergence.yaml"
    assert sweep_file("smoke").name == "convergence-smoke.yaml"
    with pytest.raises(ValueError, match="--size must be one of default, smoke"):
        sweep_file("huge")
    assert CONVERGENCE_LAUNCHER == "local"


def _evals(cell_dir) -> pd.DataFrame:
    frame = pd.read_csv(cell_dir / "metrics.csv")
    return frame[(frame["kind"] == "eval") & frame["eval_loss"].notna()]


@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(400)
def test_smoke_convergence_end_to_end(tmp_path, capsys):
    conv, tp = tmp_path / "conv", tmp_path / "paper"
    args = ["convergence", "--size", "smoke", "--results", str(conv),
            "--throughput-results", str(tp), "--quiet"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert re.search(r"sweep convergence-smoke: 6 of 6 cells to run, about [\d.]+ min", out)
    spec = plan("smoke").convergence
    names = sorted(f"{c.name}__local" for c in spec.cells())  # the local launcher's tag
    assert names == sorted(f"loopback__{label}__s{seed}__local" for seed in (1, 2) for label
                           in ("fp32", "aqsgd-fw2-bw4", "aqsgd-fw2-bw4__masks-per_sample"))
    w = spec.workload
    for name in names:
        meta = json.loads((conv / name / "meta.json").read_text())
        assert meta["status"] == "ok", meta.get("failure")
        cell = meta["cell"]
        assert cell["launcher"] == "local" and cell["shaped"] is False
        assert cell["seed"] == int(name.removesuffix("__local")[-1]) and cell["epochs"] == w.epochs
        assert cell["variant"] == ("masks-per_sample" if "masks" in name else "")
        assert cell["dropout_masks"] == ("per_sample" if "masks" in name else "random")
        assert cell["steps_per_epoch"] == w.steps_per_epoch and cell["warmup_epochs"] == 1
        assert cell["eval_windows"] == w.eval_windows
        assert meta["run_config"]["output"]["tensorboard"] is True
        assert list((conv / name / "tensorboard").glob("**/events.out.tfevents.*"))
        # held-out loss before the first step and after every epoch
        steps = sorted(_evals(conv / name)["step"].unique())
        assert steps == [e * w.steps_per_epoch for e in range(w.epochs + 1)], name
    # seeds differ: their held-out losses after training are not all the same
    finals = {n: _evals(conv / n)["eval_loss"].iloc[-1] for n in names if "fp32" in n}
    assert len(set(finals.values())) == 2
    report = conv / "report" / "convergence.md"
    assert report.is_file() and "convergence report: " in out

    # resumable: a second run finds every cell finished and runs none
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "sweep convergence-smoke: 0 of 6 cells to run" in out
    assert out.count("skip loopback__") == 6
