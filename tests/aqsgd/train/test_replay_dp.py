"""Replayed compute with data-parallel replicas and replayed coding: stand-in weights of
the real stage's size (aqsgd.train.replay_weights), coders that wait the profile's time
(aqsgd.train.replay_coding), and 2 x 2 and 2-rank gloo runs of them."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch
import yaml

from aqsgd.compress.activation import make_compressor
from aqsgd.compress.gradient import GradCompressionConfig, exchange_nbytes
from aqsgd.compress.message import CompressionConfig
from aqsgd.model.config import PRESETS
from aqsgd.train.config import ConfigError, config_from_dict
from aqsgd.train.replay import ReplayStage, StageTimes
from aqsgd.train.replay_coding import ReplayedCoder
from aqsgd.train.replay_weights import ReplayWeights, stage_shapes
from bench.perfmodel.workload import stage_params

B, L, D = 2, 8, 32
TIMES = StageTimes(0.0, 0.0, 0.0)


def test_the_stand_in_weights_have_the_real_stage_s_shapes_and_count():
    for preset, stages in (("tiny", 2), ("gpt2-xl", 8)):
        model = PRESETS[preset]
        counts = [sum(math.prod(s) for s in stage_shapes(model, k, stages))
                  for k in range(stages)]
        assert counts == stage_params(model, stages), preset


def test_a_forward_gives_every_stand_in_weight_its_reused_gradient_view():
    shapes = [(3, 4), (5,)]
    weights = ReplayWeights(shapes, seed=1)
    stage = ReplayStage(TIMES, first=False, last=False, n_embd=D, weights=weights)
    assert [tuple(p.shape) for p in stage.weights.parameters()] == shapes
    stage(torch.zeros(B, L, D))
    grads = [p.grad for p in weights.parameters()]
    assert all(g is not None and g.dtype == torch.float32 for g in grads)
    assert grads[0].data_ptr() + 12 * 4 == grads[1].data_ptr()  # one flat vector
    for p in weights.parameters():
        p.grad = None  # as the optimizer's zero_grad(set_to_none=True)
    stage(torch.zeros(B, L, D))
    assert [p.grad.data_ptr() for p in weights.parameters()] == [g.data_ptr() for g in grads]


def _pair(cfg: CompressionConfig, n: int = 8):
    send = make_compressor(cfg, "send", (L, D), n, "cpu", 0)
    recv = make_compressor(cfg, "recv", (L, D), n, "cpu", 0)
    return send, recv


@pytest.mark.parametrize("mode", [{"mode": "aqsgd", "bits": 2}, {"mode": "directq", "bits": 4},
                                  {"mode": "none"}])
def test_a_replayed_coder_sends_the_real_coder_s_spec_and_hands_on_the_batch_shape(mode):
    cfg = CompressionConfig.from_dict(mode)
    real_send, real_recv = _pair(cfg)
    send, recv = (ReplayedCoder(c, encode_s=1e-6, decode_s=2e-6) for c in _pair(cfg))
    x = torch.randn(B, L, D)
    for epoch, ids in ((0, torch.tensor([0, 1])), (1, torch.tensor([1, 2])),
                       (1, torch.tensor([0, 1]))):
        for c in (real_send, real_recv, send, recv):
            c.set_epoch(epoch)
        want = real_send.encode(x, ids)
        real_recv.decode(want, ids)
        got = send.encode(x, ids)
        assert [(t.shape, t.dtype) for t in got] == [(t.shape, t.dtype) for t in want]
        assert torch.equal(got[0], want[0])  # the header: format, epoch, raw rows, ids
        out = recv.decode(got, ids)
        assert out.shape == (B, L, D) and out.dtype == torch.float32


def test_replayed_coding_waits_the_profile_s_seconds_an_element():
    import time
    send, recv = (ReplayedCoder(c, encode_s=1e-4, decode_s=2e-4)
                  for c in _pair(CompressionConfig.from_dict({"mode": "directq", "bits": 4})))
    x, ids = torch.randn(B, L, D), torch.tensor([0, 1])
    start = time.perf_counter()
    msg = send.encode(x, ids)
    mid = time.perf_counter()
    recv.decode(msg, ids)
    end = time.perf_counter()
    assert mid - start >= 1e-4 * x.numel() and end - mid >= 2e-4 * x.numel()


def _replay_section(coding: str = "real", **extra) -> dict:
    stages = [{"forward_s": 0.002, "backward_s": 0.004, "optimizer_s": 0.001} for _ in (0, 1)]
    section = {"source": "replay:p", "profile": "p", "precision": "fp32",
               "stages": stages, "coding": coding}
    if coding == "replay":
        section["coding_rates"] = {"forward_encode_s": 1e-9, "forward_decode_s": 1e-9,
                                   "backward_encode_s": 2e-9, "backward_decode_s": 2e-9}
    return {**section, **extra}


def test_the_run_config_takes_replicas_and_checks_replayed_coding():
    base = {"pipeline": {"stages": 2}, "compute": _replay_section()}
    assert config_from_dict({"pipeline": {"stages": 2, "replicas": 2},
                             "compute": _replay_section(grad_params=[5, 6])}) \
        .compute.grad_params == (5, 6)
    assert config_from_dict({**base, "compute": _replay_section("replay")}).compute.coding \
        == "replay"
    with pytest.raises(ConfigError, match=r"coding_rates exactly when it is 'replay'"):
        config_from_dict({**base, "compute": {**_replay_section(), "coding": "replay"}})
    with pytest.raises(ConfigError, match=r"forward.mode 'aqsgd' with widths under compute"):
        config_from_dict({**base, "compute": _replay_section("replay"),
                          "forward": {"mode": "aqsgd", "bits": 2, "widths": [2, 4]}})
    with pytest.raises(ConfigError, match=r"grad_params is for replayed compute"):
        config_from_dict({"compute": {"source": "real", "grad_params": [1, 2]}})


def _run(out, ranks: int, **sections) -> list[list[dict]]:
    cfg = {"model": {"preset": "tiny", "n_embd": D, "n_head": 2, "seq_len": L},
           "pipeline": {"stages": 2, "micro_batch_size": B, "num_micro_batches": 2},
           "forward": {"mode": "aqsgd", "bits": 2}, "backward": {"mode": "directq", "bits": 4},
           "train": {"total_steps": 3, "init_from": None, "eval_batches": 0},
           "data": {"name": "synthetic", "max_samples": 4 * B, "eval_samples": 4},
           "dist": {"timeout_s": 60}, "output": {"dir": str(out)}, **sections}
    out.mkdir(parents=True)
    path = out / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    done = subprocess.run([sys.executable, "-m", "aqsgd.train.worker", "--config", str(path),
                           "--local", str(ranks)], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return [[json.loads(line) for line in
             (out / "metrics" / f"rank{r}.jsonl").read_text().splitlines()]
            for r in range(ranks)]


@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(400)
@pytest.mark.parametrize("grad", [
    {"mode": "qadam", "bits": 4, "freeze_after_steps": 1},
    {"mode": "powersgd", "powersgd_start_step": 1, "powersgd_rank": 2}])
def test_two_by_two_replayed_ranks_exchange_the_real_stage_s_gradient_bytes(tmp_path, grad):
    """2 stages x 2 replicas on gloo: every rank's data-parallel bytes a step are the
    codec's size rule for its stage's real parameters (exact at step 0, compressed
    after), whatever the stand-in computes."""
    model = PRESETS["tiny"].replace(n_embd=D, n_head=2, seq_len=L)
    records = _run(tmp_path / "run", 4, pipeline={"stages": 2, "replicas": 2,
                                                  "micro_batch_size": B, "num_micro_batches": 2},
                   grad=grad, compute=_replay_section(grad_params=stage_params(model, 2)))
    cfg = GradCompressionConfig(**grad)
    for rank, recs in enumerate(records):
        stage = rank % 2
        shapes_all = stage_shapes(model, stage, 2)
        numel = sum(math.prod(s) for s in shapes_all)
        assert numel == stage_params(model, 2)[stage]
        sent = [r["bytes_sent"]["dp"] for r in recs if r["kind"] == "train"]
        want = [exchange_nbytes(cfg, numel, 2, frozen=False, shapes=shapes_all)] + \
            [exchange_nbytes(cfg, numel, 2, frozen=True, shapes=shapes_all)] * 2
        assert sent == want, (rank, sent, want)
        assert sent[-1] < 4 * numel  # compressed: under the fp32 gradient


@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(400)
def test_replayed_coding_moves_the_real_coding_s_bytes_and_is_recorded(tmp_path):
    real = _run(tmp_path / "real", 2, compute=_replay_section())
    replayed = _run(tmp_path / "replay", 2, compute=_replay_section("replay"))
    for rank in (0, 1):
        assert [(r["bytes_sent"], r["bytes_recv"]) for r in replayed[rank]] == \
            [(r["bytes_sent"], r["bytes_recv"]) for r in real[rank]]
    for sub, coding in (("real", "real"), ("replay", "replay")):
        recorded = json.loads((tmp_path / sub / "run_config.json").read_text())
        assert recorded["compute"]["coding"] == coding
