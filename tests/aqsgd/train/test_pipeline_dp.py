"""Two data-parallel replicas of a 2-stage AQ-SGD pipeline with QuantizedAdam, on gloo
over 127.0.0.1: fixed shards (no raw row after the warm-up epoch), one clipping
coefficient for both replicas, evaluation over every held-out window once with raw
activations (also before the first step), and TensorBoard events."""

import json
import math
from pathlib import Path

import pytest
import torch
import yaml
from harness_helpers import run_ranks

from aqsgd.model.gpt2 import init_stage, lm_loss
from aqsgd.train.config import config_from_dict
from aqsgd.train.pipeline import eval_batch_ids
from aqsgd.train.worker import load_tokens

R, M, B, L, D, BITS = 2, 2, 2, 8, 32, 2
STEPS_PER_EPOCH, EPOCHS, EVAL_BATCHES = 4, 3, 2
HEADER = (3 + B) * 8  # int64 [format, epoch, n_raw, ids...]
RAW_MESSAGE = HEADER + B * L * D * 4  # every row raw, fp32
DELTA_MESSAGE = HEADER + math.ceil(B * L * D * BITS / 8) + 2 * D  # codes + per-channel scales


def config(out: Path) -> dict:
    return {
        "model": {"preset": "tiny", "n_embd": D, "vocab_size": 64, "seq_len": L},
        "pipeline": {"stages": 2, "replicas": R, "micro_batch_size": B, "num_micro_batches": M},
        "forward": {"mode": "aqsgd", "bits": BITS, "warmup_epochs": 1},
        "grad": {"mode": "qadam", "freeze_after_steps": STEPS_PER_EPOCH},
        # a small clip: every step is clipped, so the coefficient matters
        "train": {"total_steps": STEPS_PER_EPOCH * EPOCHS, "init_from": None,
                  "lr": 1e-3, "clip": 0.05, "seed": 2,
                  "eval_every": STEPS_PER_EPOCH, "eval_batches": EVAL_BATCHES,
                  "eval_at_start": True},
        # 32 windows: shards of 16, 4 per step and replica, so 4 steps an epoch; the
        # held-out windows are exactly eval_batches x replicas x micro-batch size
        "data": {"name": "synthetic", "max_samples": 32, "eval_samples": EVAL_BATCHES * R * B},
        "dist": {"timeout_s": 60},
        "output": {"dir": str(out), "tensorboard": True},
    }  # fmt: skip


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dp")
    cfg = config(tmp / "out")
    path = tmp / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    codes = run_ranks(path, 4, tmp / "logs", grace_s=5)
    assert codes == [0] * 4, [p.read_text()[-2000:] for p in (tmp / "logs").glob("*.log")]
    records = {r: [json.loads(x) for x in (tmp / "out" / "metrics" / f"rank{r}.jsonl")
                   .read_text().splitlines()] for r in range(4)}  # fmt: skip
    return cfg, tmp / "out", records


def _train(records, rank):
    return [r for r in records[rank] if r["kind"] == "train"]


def _evals(records, rank):
    return [r for r in records[rank] if r["kind"] == "eval"]


@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(300)
def test_no_raw_row_is_sent_after_the_warm_up_epoch(run):
    _, _, records = run
    for first in (0, 2):  # stage 0 of each replica
        sent = [r["bytes_sent"]["activation"] for r in _train(records, first)]
        assert sent[:STEPS_PER_EPOCH] == [M * RAW_MESSAGE] * STEPS_PER_EPOCH
        assert sent[STEPS_PER_EPOCH:] == [M * DELTA_MESSAGE] * (len(sent) - STEPS_PER_EPOCH), sent


@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(300)
def test_quantized_adam_clips_both_replicas_by_one_coefficient(run):
    _, _, records = run
    for stage in (0, 1):
        norms = [[r["grad_norm"] for r in _train(records, rep * 2 + stage)] for rep in range(R)]
        assert norms[0] == norms[1] and all(n > 0.05 for n in norms[0])
    # the replicas saw different data: their losses differ, their clipping does not
    assert [r["loss"] for r in _train(records, 1)] != [r["loss"] for r in _train(records, 3)]


@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(300)
def test_evaluation_covers_every_held_out_window_once_with_raw_activations(run):
    cfg_dict, _, records = run
    steps = [r["step"] for r in _evals(records, 1)]
    assert steps == list(range(0, STEPS_PER_EPOCH * EPOCHS + 1, STEPS_PER_EPOCH))
    for last in (1, 3):
        for rec in _evals(records, last):
            assert rec["warmup"] is False and rec["samples"] == EVAL_BATCHES * B
            # raw fp32 rows, also after warm-up when training messages are 2-bit deltas
            assert rec["bytes_recv"]["activation"] == EVAL_BATCHES * RAW_MESSAGE
    assert [r["eval_loss"] for r in _evals(records, 1)] == [r["eval_loss"] for r in
                                                            _evals(records, 3)]  # fmt: skip
    # step 0 is the starting model on all held-out windows, each once
    cfg = config_from_dict(cfg_dict)
    _, eval_tokens = load_tokens(cfg)
    model = init_stage(cfg.model, 0, 1, seed=cfg.train.seed).eval()
    with torch.no_grad():
        want = sum(lm_loss(model(x), x).item() for x in eval_tokens.split(B)) / (R * EVAL_BATCHES)
    assert abs(_evals(records, 1)[0]["eval_loss"] - want) < 1e-5


def test_eval_batch_ids_take_each_window_once_when_the_sizes_match():
    for replicas, batches, size in ((1, 3, 4), (2, 2, 2), (3, 2, 5)):
        ids = [eval_batch_ids(batches, size, r, replicas, batches * replicas * size)
               for r in range(replicas)]
        flat = torch.cat([i for per in ids for i in per]).tolist()
        assert sorted(flat) == list(range(batches * replicas * size))
    # fewer windows than asked for: batches wrap around, each still a whole micro-batch
    assert [i.tolist() for i in eval_batch_ids(3, 2, 0, 1, 5)] == [[0, 1], [2, 3], [0, 1]]


@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(300)
def test_tensorboard_events_of_the_last_stage_of_replica_zero(run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, out, records = run
    files = list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert len(files) == 1  # one rank writes
    acc = EventAccumulator(str(out / "tensorboard"))
    acc.Reload()
    kinds = ("activation", "gradient", "dp")
    assert set(acc.Tags()["scalars"]) == {"train/loss", "lr", "step_time_s", "eval/loss",
                                          "eval/perplexity", *(f"bytes_{d}/{k}" for d in (
                                              "sent", "recv") for k in kinds)}  # fmt: skip
    train, evals = _train(records, 1), _evals(records, 1)
    loss = acc.Scalars("train/loss")
    assert [e.step for e in loss] == [r["step"] for r in train]
    assert [e.value for e in loss] == pytest.approx([r["loss"] for r in train], rel=1e-6)
    assert [e.step for e in acc.Scalars("eval/loss")] == [r["step"] for r in evals]
    assert [e.value for e in acc.Scalars("bytes_recv/activation")] == [
        r["bytes_recv"]["activation"] for r in train]  # fmt: skip
