"""Compute precision (`train.precision`): bf16 autocast in the stages' forward and loss.

fp32 is no context at all (the pipeline tests' bit-for-bit comparisons with the
unpipelined model hold unchanged); bf16 on CPU computes the matrix products in bfloat16
while weights, gradients and the activations between stages stay fp32, and a 2-stage
run of real worker processes trains: finite losses that fall, a finite held-out loss.
"""

import json
import math
from contextlib import nullcontext

import pytest
import torch
import yaml
from harness_helpers import run_ranks

from aqsgd.model.gpt2 import compute_precision, init_stage, lm_loss
from aqsgd.train.config import ConfigError, config_from_dict

CPU = torch.device("cpu")
SMALL_MODEL = {"n_layer": 4, "n_embd": 64, "n_head": 2, "vocab_size": 128, "seq_len": 16,
               "dropout": 0.0}  # fmt: skip


def test_precision_defaults_to_fp32_and_refuses_other_names():
    assert config_from_dict({}).train.precision == "fp32"
    assert config_from_dict({"train": {"precision": "bf16"}}).train.precision == "bf16"
    with pytest.raises(ConfigError, match=r"train\.precision"):
        config_from_dict({"train": {"precision": "fp8"}})
    with pytest.raises(ValueError, match="precision must be fp32 or bf16, got 'fp8'"):
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


@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(180)
def test_bf16_compute_trains_a_2_stage_pipeline_on_cpu(tmp_path):
    out = tmp_path / "out"
    cfg = {
        "model": {"preset": "tiny", **SMALL_MODEL},
        "pipeline": {"stages": 2, "micro_batch_size": 2, "num_micro_batches": 3},
        "forward": {"mode": "aqsgd", "bits": 4, "warmup_epochs": 1},
        "train": {"steps": 12, "lr": 3e-3, "seed": 3, "eval_batches": 2, "precision": "bf16"},
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
