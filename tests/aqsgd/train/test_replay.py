"""Replayed compute (aqsgd.train.replay): the stand-in stage's shapes, dtypes and waits,
the compute section of the run config, and a 2-rank gloo run of stand-in stages."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import torch
import yaml

from aqsgd.model.gpt2 import compute_precision
from aqsgd.train.config import ConfigError, config_from_dict
from aqsgd.train.replay import (
    ComputeConfig,
    ReplayStage,
    StageTimes,
    optimizer_wait,
    profile_reference,
    replay_loss,
)

B, L, D = 3, 7, 24  # irregular on purpose
TIMES = StageTimes(forward_s=0.03, backward_s=0.05, optimizer_s=0.02)


SLACK_S = 5.0  # upper bounds catch a runaway wait only: 2 cores shared, load up to 11


@pytest.fixture(autouse=True, scope="module")
def _autograd_started():
    """A process's first backward starts autograd's engine (about 0.2 s): not a wait's."""
    torch.ones(1, requires_grad=True).sum().backward()


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def test_first_stage_turns_token_ids_into_hidden_states_after_the_forward_time():
    stage = ReplayStage(TIMES, first=True, last=False, n_embd=D)
    ids = torch.randint(0, 50, (B, L))
    out, took = _timed(lambda: stage(ids))
    assert out.shape == (B, L, D) and out.dtype == torch.float32 and out.requires_grad
    assert 0.03 <= took < 0.03 + SLACK_S
    assert not torch.equal(out[0], stage(ids.roll(1, 0))[0])  # depends on the ids
    _, took = _timed(lambda: out.sum().backward())
    assert 0.05 <= took < 0.05 + SLACK_S
    assert stage.gain.grad is not None


def test_a_middle_stage_keeps_shape_and_dtype_and_passes_a_gradient_back():
    stage = ReplayStage(TIMES, first=False, last=False, n_embd=D)
    x = torch.randn(B, L, D, requires_grad=True)
    out = stage(x)
    assert out.shape == x.shape and out.dtype == x.dtype
    g = torch.randn(B, L, D)
    _, took = _timed(lambda: torch.autograd.backward(out, g))
    assert x.grad.shape == (B, L, D) and torch.allclose(x.grad, g)
    assert 0.05 <= took < 0.05 + SLACK_S


def test_the_last_stage_never_makes_logits_and_its_loss_reaches_every_input_element():
    stage = ReplayStage(TIMES, first=False, last=True, n_embd=D)
    x = torch.randn(B, L, D, requires_grad=True)
    tokens = torch.zeros(B, L, dtype=torch.int64)
    with compute_precision("bf16", torch.device("cpu")):
        out = stage(x)
        loss = replay_loss(out, tokens)
    assert out.shape == (B, L) and loss.dim() == 0
    loss.backward()
    assert x.grad.shape == (B, L, D) and x.grad.is_contiguous()
    assert torch.all(x.grad != 0)
    with pytest.raises(ValueError, match=r"\(B, L\) output"):
        replay_loss(torch.zeros(B, L, D), tokens)


def test_the_stand_in_holds_one_scalar_weight_whatever_the_width():
    stage = ReplayStage(TIMES, first=True, last=False, n_embd=1600)
    assert [p.numel() for p in stage.parameters()] == [1]


def test_a_stage_refuses_inputs_of_another_shape():
    with pytest.raises(ValueError, match=r"token ids \(B, L\) int64"):
        ReplayStage(TIMES, first=True, last=False, n_embd=D)(torch.randn(B, L))
    with pytest.raises(ValueError, match=rf"\(B, L, {D}\), got \(3, 7, 5\)"):
        ReplayStage(TIMES, first=False, last=False, n_embd=D)(torch.randn(B, L, 5))


def test_the_optimizer_step_takes_the_profiled_time():
    stage = ReplayStage(TIMES, first=False, last=False, n_embd=D)
    opt = torch.optim.AdamW(stage.parameters())
    optimizer_wait(opt, 0.02)
    _, took = _timed(opt.step)
    assert 0.02 <= took < 0.02 + SLACK_S


def test_stage_times_refuse_negative_or_not_finite_seconds():
    with pytest.raises(ValueError, match=r"StageTimes.backward_s must be seconds >= 0, got -1"):
        StageTimes(0.1, -1, 0.0)
    with pytest.raises(ValueError, match=r"forward_s .* got nan"):
        StageTimes(float("nan"), 0.0, 0.0)


def test_profile_reference_reads_the_compute_setting():
    assert profile_reference("real") is None
    assert profile_reference("replay:results/gpu/profile-bf16.yaml") == \
        "results/gpu/profile-bf16.yaml"


def _config(**compute) -> dict:
    stages = [{"forward_s": 0.01, "backward_s": 0.02, "optimizer_s": 0.001}] * 2
    return {"pipeline": {"stages": 2},
            "compute": {"source": "replay:p", "profile": "p", "precision": "fp32",
                        "stages": stages, **compute}}


def test_the_run_config_checks_its_compute_section():
    assert config_from_dict({}).compute == ComputeConfig()
    assert config_from_dict(_config()).compute.replayed
    with pytest.raises(ConfigError, match=r"compute.stages has 1 entries, one per stage"):
        config_from_dict(_config(stages=[{"forward_s": 0, "backward_s": 0,
                                          "optimizer_s": 0}]))
    with pytest.raises(ConfigError, match=r"compute.precision 'bf16' .* train.precision"):
        config_from_dict(_config(precision="bf16"))
    with pytest.raises(ConfigError, match=r"compute: source must be 'real' or 'replay:PRO"):
        config_from_dict({"compute": {"source": "gpu"}})
    with pytest.raises(ConfigError, match=r"stages\[1\]: StageTimes.optimizer_s"):
        config_from_dict(_config(stages=[{"forward_s": 0, "backward_s": 0, "optimizer_s": 0},
                                         {"forward_s": 0, "backward_s": 0,
                                          "optimizer_s": -2}]))
    # replicas: stand-in weights of the real size, recorded per stage (test_replay_dp)
    replicas = {"pipeline": {"stages": 2, "replicas": 2}}
    assert config_from_dict({**_config(grad_params=[10, 20]), **replicas}) \
        .compute.grad_params == (10, 20)
    with pytest.raises(ConfigError, match=r"compute.grad_params has 0 entries: one per stage"):
        config_from_dict({**_config(), **replicas})


FWD = (0.04, 0.06)
BWD = (0.08, 0.05)
M = 3


def _run_two_ranks(out, compute: dict) -> list[list[dict]]:
    """Every rank's records of a 2-stage run of 2 worker processes under torchrun."""
    cfg = {"model": {"preset": "tiny", "n_embd": D, "n_head": 2, "seq_len": L},
           "pipeline": {"stages": 2, "micro_batch_size": B, "num_micro_batches": M,
                        "schedule": "1f1b"},
           "forward": {"mode": "aqsgd", "bits": 2}, "backward": {"mode": "directq", "bits": 4},
           "train": {"total_steps": 3, "init_from": None, "eval_batches": 1},
           "data": {"name": "synthetic", "max_samples": M * B, "eval_samples": 6},
           "dist": {"timeout_s": 30}, "compute": compute, "output": {"dir": str(out)}}
    out.mkdir(parents=True)
    path = out / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    done = subprocess.run([sys.executable, "-m", "aqsgd.train.worker", "--config", str(path),
                           "--local", "2"], capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stderr[-3000:]
    return [[json.loads(line) for line in
             (out / "metrics" / f"rank{r}.jsonl").read_text().splitlines()] for r in (0, 1)]


@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(300)
def test_two_gloo_ranks_replay_their_stage_times_and_send_the_real_messages(tmp_path):
    """Replayed: every step's compute is the profile's times, no evaluation is recorded,
    and every step sends the bytes the real stages send (a warm-up step of raw fp32,
    then AQ-SGD's 2-bit deltas and 4-bit gradients)."""
    stages = [{"forward_s": f, "backward_s": b, "optimizer_s": 0.01}
              for f, b in zip(FWD, BWD, strict=True)]
    replayed = _run_two_ranks(tmp_path / "replay", {
        "source": "replay:p", "profile": "p", "precision": "fp32", "stages": stages})
    real = _run_two_ranks(tmp_path / "real", {"source": "real"})
    for rank in (0, 1):
        assert {r["kind"] for r in replayed[rank]} == {"train"}  # no held-out loss
        assert "eval" in {r["kind"] for r in real[rank]}
        want = M * (FWD[rank] + BWD[rank]) + 0.01
        for r in replayed[rank]:
            assert want <= r["compute_s"] < want + SLACK_S, (rank, r["compute_s"], want)
        trained = [r for r in real[rank] if r["kind"] == "train"]
        assert [(r["bytes_sent"], r["bytes_recv"]) for r in replayed[rank]] == \
            [(r["bytes_sent"], r["bytes_recv"]) for r in trained]
    assert replayed[1][0]["warmup"] and not replayed[1][-1]["warmup"]
