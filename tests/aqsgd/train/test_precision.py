"""Compute precision (`train.precision`): bf16 or fp16 autocast in the stages' forward
and loss, fp16 with dynamic loss scaling (aqsgd.train.loss_scale).

fp32 is no context at all (the pipeline tests' bit-for-bit comparisons with the
unpipelined model hold unchanged); bf16 on CPU computes the matrix products in bfloat16
while weights, gradients and the activations between stages stay fp32; the loss scaler
unscales exactly, skips and halves on an overflow, grows after clean steps, and an
overflow on one of three ranks (or a NaN one sends) makes all three skip; a 2-stage
run of real worker processes trains in bf16 and in fp16: finite losses that fall, a
finite held-out loss, and in fp16 the same loss scale and skipped steps on both ranks.
"""

import json
import math
from contextlib import nullcontext
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import yaml
from harness_helpers import run_ranks

from aqsgd.model.gpt2 import compute_precision, init_stage, lm_loss
from aqsgd.train.config import ConfigError, config_from_dict
from aqsgd.train.loss_scale import LossScaler
from bench.launch.process import free_port

CPU = torch.device("cpu")
SMALL_MODEL = {"n_layer": 4, "n_embd": 64, "n_head": 2, "vocab_size": 128, "seq_len": 16,
               "dropout": 0.0}  # fmt: skip


def test_precision_defaults_to_fp32_and_refuses_other_names():
    assert config_from_dict({}).train.precision == "fp32"
    assert config_from_dict({"train": {"precision": "bf16"}}).train.precision == "bf16"
    assert config_from_dict({"train": {"precision": "fp16"}}).train.precision == "fp16"
    with pytest.raises(ConfigError, match=r"train\.precision"):
        config_from_dict({"train": {"precision": "fp8"}})
    with pytest.raises(ValueError, match=r"precision must be one of fp32\|bf16\|fp16, got 'fp8'"):
        compute_precision("fp8", CPU)


def test_fp32_is_no_context_and_bf16_keeps_stage_boundaries_fp32():
    assert isinstance(compute_precision("fp32", CPU), nullcontext)
    cfg = config_from_dict({"model": {"preset": "tiny", **SMALL_MODEL}}).model
    first, last = init_stage(cfg, 0, 2, seed=1), init_stage(cfg, 1, 2, seed=1)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, cfg.vocab_size, (2, cfg.seq_len), generator=gen)  # (B, L)
    with compute_precision("bf16", CPU):
        hidden = first(ids)  # (B, L, D): the residual stream stays fp32
        logits = last(hidden.detach().requires_grad_())  # (B, L, V)
        loss = lm_loss(logits, ids)
    assert hidden.dtype == torch.float32 and logits.dtype == torch.bfloat16
    assert loss.dtype == torch.float32 and math.isfinite(loss.item())
    loss.backward()
    assert all(p.grad.dtype == torch.float32 for p in last.parameters())
    with torch.no_grad():
        fp32_loss = lm_loss(last(first(ids)), ids)
    assert abs(loss.item() - fp32_loss.item()) < 0.05  # bf16 rounding, not another model


def test_fp16_autocasts_on_cpu_and_only_fp16_gets_a_loss_scaler():
    layer = torch.nn.Linear(8, 8)
    with compute_precision("fp16", CPU):
        assert layer(torch.ones(2, 8)).dtype == torch.float16
    assert LossScaler.for_precision("fp32") is None and LossScaler.for_precision("bf16") is None
    assert LossScaler.for_precision("fp16").scale == 2.0**16  # torch.amp.GradScaler's


def _param(grad: list[float]) -> torch.nn.Parameter:
    p = torch.nn.Parameter(torch.zeros(len(grad)))
    p.grad = torch.tensor(grad)
    return p


def test_loss_scaler_unscales_exactly_skips_on_overflow_and_grows_after_clean_steps():
    scaler = LossScaler(init_scale=8.0, growth_interval=2)
    p = _param([8.0, -24.0, 0.5])
    boundary = scaler.unscale_boundary(torch.tensor([16.0, -4.0]))  # what goes on the wire
    assert boundary.tolist() == [2.0, -0.5]
    assert scaler.unscale_and_agree([p]) and p.grad.tolist() == [1.0, -3.0, 0.0625]
    assert scaler.scale == 8.0  # one clean step of two
    assert scaler.unscale_and_agree([_param([1.0])]) and scaler.scale == 16.0  # grown
    assert not scaler.unscale_and_agree([_param([1.0, math.inf])]) and scaler.scale == 8.0
    scaler.unscale_boundary(torch.tensor([math.nan]))  # a non-finite gradient on the wire
    assert not scaler.unscale_and_agree([_param([1.0])]) and scaler.scale == 4.0
    assert scaler.unscale_and_agree([_param([1.0])])  # the flag lasts one step


def _agree(rank: int, port: int, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=3, timeout=timedelta(seconds=60))  # fmt: skip
    try:
        scaler, taken = LossScaler(init_scale=4.0), []
        for step in range(3):  # an overflow on rank 1 at step 1; rank 2 sends a NaN at step 2
            grad = [1.0, math.inf if (rank, step) == (1, 1) else 2.0]
            if (rank, step) == (2, 2):
                scaler.unscale_boundary(torch.tensor([math.nan]))
            taken.append((scaler.unscale_and_agree([_param(grad)]), scaler.scale))
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(taken))
    finally:
        dist.destroy_process_group()


@pytest.mark.workers
@pytest.mark.timeout(60)
def test_every_rank_skips_the_step_any_rank_overflows_in(tmp_path):
    mp.start_processes(_agree, args=(free_port(), str(tmp_path)), nprocs=3, join=True,
                       start_method="fork")
    runs = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(3)]
    assert runs[0] == runs[1] == runs[2] == [[True, 4.0], [False, 2.0], [False, 1.0]], runs


@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(180)
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_half_compute_trains_a_2_stage_pipeline_on_cpu(tmp_path, precision):
    out = tmp_path / "out"
    cfg = {
        "model": {"preset": "tiny", **SMALL_MODEL},
        "pipeline": {"stages": 2, "micro_batch_size": 2, "num_micro_batches": 3},
        "forward": {"mode": "aqsgd", "bits": 4, "warmup_epochs": 1},
        "train": {"total_steps": 12, "init_from": None,
                  "lr": 3e-3, "seed": 3, "eval_batches": 2, "precision": precision},
        "data": {"name": "synthetic", "max_samples": 24, "eval_samples": 8},
        "dist": {"timeout_s": 30},
        "output": {"dir": str(out)},
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    codes = run_ranks(path, 2, tmp_path / "logs", grace_s=5)
    assert codes == [0, 0], [p.read_text()[-2000:] for p in (tmp_path / "logs").glob("*.log")]
    lines = (out / "metrics" / "rank1.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    losses = [r["loss"] for r in records if r["kind"] == "train"]
    evals = [r["eval_loss"] for r in records if r["kind"] == "eval"]
    assert len(losses) == 12 and all(math.isfinite(x) for x in losses), losses
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.1, losses
    assert len(evals) == 1 and math.isfinite(evals[0]) and evals[0] < losses[0], (evals, losses)
    if precision == "fp16":  # every rank: the same scale and the same skipped steps
        ranks = [[json.loads(line) for line in (out / "metrics" / f"rank{r}.jsonl")
                  .read_text().splitlines() if '"train"' in line] for r in (0, 1)]
        scales = [[(r["loss_scale"], r["step_skipped"]) for r in recs] for recs in ranks]
        assert scales[0] == scales[1] and scales[0][0] == (2.0**16, scales[0][0][1]), scales
        assert sum(skipped for _, skipped in scales[0]) < 6, scales
