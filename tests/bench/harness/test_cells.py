"""Cell -> RunConfig (bench.harness.cells): the mode's compression, QuantizedAdam's freeze
point, evaluation sizes, dropout, the refusal of a contradicting gradient override, and a
run config the worker's loader accepts."""

from __future__ import annotations

import pytest

from aqsgd.model.config import PRESETS
from aqsgd.train.config import load_config
from bench.harness.cells import FREEZE_FRACTION, freeze_after_steps, run_config, write_run_config
from bench.harness.modes import parse_mode
from bench.harness.sweep import CellSpec, Workload


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
    assert config.train.total_steps == 120 and config.train.eval_every == 12
    assert config.train.eval_at_start and config.data.max_samples == 768


def test_dropout_and_masks_reach_the_run_config(tmp_path):
    _, default = _config("aqsgd:2/4", tmp_path)
    assert default.model.dropout == PRESETS["tiny"].dropout > 0
    assert default.train.dropout_masks == "random"
    _, off = _config("aqsgd:2/4", tmp_path, dropout=0.0, dropout_masks="per_sample")
    assert off.model.dropout == 0.0 and off.train.dropout_masks == "per_sample"
    assert off.model.n_embd == default.model.n_embd  # the rest of the preset stays


@pytest.mark.timeout(60)
def test_run_config_is_accepted_by_the_worker_config_loader(tmp_path):
    for mode in ("fp32", "directq:4/8", "aqsgd:2/4"):
        cell = CellSpec("100mbps", parse_mode(mode), Workload(steps=2))
        config = run_config(cell, tmp_path)
        assert config.train.total_steps == cell.workload.warmup_steps + 2
        path = write_run_config(config, tmp_path / "config.yaml")
        assert load_config(path) == config  # what every rank loads is what meta.json keeps
    cell = CellSpec("100mbps", parse_mode("aqsgd"),
                    Workload(overrides={"train.lrr": 1.0}))
    with pytest.raises(ValueError, match="train.lrr"):
        run_config(cell, tmp_path)
