"""Cell -> RunConfig (bench.harness.cells): the mode's compression, QuantizedAdam's freeze
point, evaluation sizes, dropout, the refusal of a contradicting gradient override, and
meta.json's cell block."""

from __future__ import annotations

import pytest

from aqsgd.model.config import PRESETS
from bench.harness.cells import FREEZE_FRACTION, freeze_after_steps, run_config
from bench.harness.meta import cell_identity
from bench.harness.modes import parse_mode
from bench.harness.sweep import CellSpec, Workload
from bench.launch.choice import LauncherChoice
from bench.launch.local import LocalLauncher
from bench.net.scenario import load_scenario


def _config(mode: str, tmp_path, **workload):
    cell = CellSpec("loopback", parse_mode(mode), Workload(**workload))
    return cell, run_config(cell, tmp_path)


@pytest.mark.parametrize("mode, fw, bw, grad", [
    ("fp32", "none", "none", "fp32"),
    ("directq:2/4", "directq", "directq", "fp32"),
    ("aqsgd:2/4", "aqsgd", "directq", "fp32"),
    ("aqsgd-lowbits:2/4", "aqsgd-lowbits", "directq", "fp32"),
    ("aqsgd+gc:2/4", "aqsgd", "directq", "qadam"),
    ("aqsgd+gc/ef21:2/4", "aqsgd", "directq", "ef21"),
    ("aqsgd+gc/natural:2/4", "aqsgd", "directq", "natural"),
])
def test_mode_decides_the_compression(tmp_path, mode, fw, bw, grad):
    replicas = 2 if grad != "fp32" else 1
    _, config = _config(mode, tmp_path, replicas=replicas)
    assert (config.forward.mode, config.backward.mode, config.grad.mode) == (fw, bw, grad)
    if fw != "none":
        assert (config.forward.bits, config.backward.bits) == (2, 4)


@pytest.mark.parametrize("workload, expected", [
    # warm-up epoch of 12 steps is more than 10% of 120 steps (dp2: 128 samples a step)
    (dict(epochs=10, train_samples=1536, replicas=2), 12),
    # 10% of 300 steps is more than the warm-up epoch's 6 steps
    (dict(epochs=50, train_samples=768, replicas=2), 30),
    # bench cell, dp2: 1 warm-up step, 11 steps in all: 10% rounds up to 2
    (dict(replicas=2), 2),
])
def test_qadam_freezes_after_the_warmup_and_at_least_a_tenth_of_the_run(tmp_path, workload,
                                                                         expected):
    cell, config = _config("aqsgd+gc:2/4", tmp_path, **workload)
    w = cell.workload
    assert config.grad.freeze_after_steps == freeze_after_steps(w) == expected
    assert expected >= w.warmup_steps and expected >= FREEZE_FRACTION * w.total_steps
    assert expected < w.total_steps  # the compressed phase exists


def test_grad_mode_override_that_contradicts_the_mode_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"overrides\['grad.mode'\]: the mode decides.*"
                                         r"this cell's: 'fp32'.*aqsgd\+gc/ef21:2/4"):
        _config("fp32", tmp_path, overrides={"grad.mode": "ef21"})
    with pytest.raises(ValueError, match="this cell's: 'qadam'"):
        _config("aqsgd+gc:2/4", tmp_path, replicas=2, overrides={"grad.mode": "natural"})
    # the same compressor is no contradiction; other grad keys stay free
    _, config = _config("aqsgd+gc/ef21:2/4", tmp_path, replicas=2,
                        overrides={"grad.mode": "ef21", "grad.topk_ratio": 0.05})
    assert (config.grad.mode, config.grad.topk_ratio) == ("ef21", 0.05)


@pytest.mark.parametrize("replicas", [1, 2])
def test_every_cell_evaluates_at_least_128_windows_each_once(tmp_path, replicas):
    _, config = _config("aqsgd:2/4", tmp_path, replicas=replicas)
    t, p, d = config.train, config.pipeline, config.data
    assert t.eval_batches * p.replicas * p.micro_batch_size == d.eval_samples >= 128
    assert t.eval_every == 0 and not t.eval_at_start  # bench cells: once, at the end
    assert config.output.tensorboard


def test_convergence_cell_evaluates_at_start_and_every_epoch(tmp_path):
    cell, config = _config("aqsgd:2/4", tmp_path, epochs=10, train_samples=768,
                           eval_each_epoch=True)
    assert config.train.steps == 120 and config.train.eval_every == 12
    assert config.train.eval_at_start and config.data.max_samples == 768


def test_dropout_and_masks_reach_the_run_config(tmp_path):
    _, default = _config("aqsgd:2/4", tmp_path)
    assert default.model.dropout == PRESETS["tiny"].dropout > 0
    assert default.train.dropout_masks == "random"
    _, off = _config("aqsgd:2/4", tmp_path, dropout=0.0, dropout_masks="per_sample")
    assert off.model.dropout == 0.0 and off.train.dropout_masks == "per_sample"
    assert off.model.n_embd == default.model.n_embd  # the rest of the preset stays


def test_meta_cell_block_says_what_was_trained():
    cell = CellSpec("loopback", parse_mode("aqsgd:2/4"),
                    Workload(epochs=10, train_samples=768, seed=2, dropout=0.0,
                             variant="dropout0", eval_each_epoch=True), seed_in_name=True)
    choice = LauncherChoice("local", "test", factory=LocalLauncher)
    block = cell_identity(cell, "convergence", choice, load_scenario("loopback"), [])
    assert block["name"] == "loopback__aqsgd-fw2-bw4__dropout0__s2"
    assert {k: block[k] for k in ("seed", "variant", "dropout", "dropout_masks", "epochs",
                                  "steps_per_epoch", "warmup_epochs", "eval_windows")} == {
        "seed": 2, "variant": "dropout0", "dropout": 0.0, "dropout_masks": "random",
        "epochs": 10.0, "steps_per_epoch": 12, "warmup_epochs": 1, "eval_windows": 128}
    gc = CellSpec("100mbps", parse_mode("aqsgd+gc/natural:2/4"), Workload(replicas=2))
    block = cell_identity(gc, "bench", choice, load_scenario("100mbps"), [])
    assert block["grad_mode"] == "natural" and block["label"] == "aqsgd+gc-natural-fw2-bw4"
    assert block["variant"] == "" and block["dropout"] == PRESETS["tiny"].dropout
    assert block["epochs"] == pytest.approx(11 / 1)  # one warm-up step + 10 measured
