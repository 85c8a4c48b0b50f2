"""Multi-process pipeline runs on gloo over 127.0.0.1 against the unpipelined model.

With compression off (mode none, fp32) and dropout 0, a pipelined step must give
the unpipelined model's loss and gradients, parameter by parameter, and after one
AdamW steps (global-norm clipping, linear LR decay) the same losses and
evaluation loss. The 2-stage run also checks byte counts and the trace. With dropout
masks seeded by sample id, the same holds with dropout on: every rank draws the
masks the unpipelined model draws for the same samples.
"""

import json
import math
from contextlib import nullcontext
from pathlib import Path

import pytest
import torch
import yaml
from harness_helpers import run_ranks

from aqsgd.data.sampler import Sampler
from aqsgd.model.dropout import use_sample_dropout
from aqsgd.model.gpt2 import init_stage, lm_loss
from aqsgd.train.config import config_from_dict
from aqsgd.train.metrics import MetricsWriter, StepMeter
from aqsgd.train.pipeline import Topology, linear_warmup_decay
from aqsgd.train.worker import load_tokens

TOL = 1e-5

SMALL_MODEL = {"preset": "tiny", "n_layer": 4, "n_embd": 64, "n_head": 2, "vocab_size": 128,
               "seq_len": 16, "dropout": 0.0}  # fmt: skip


def run_config(tmp_path: Path, **sections) -> dict:
    base = {
        "model": dict(SMALL_MODEL),
        "pipeline": {"stages": 2, "replicas": 1, "micro_batch_size": 2, "num_micro_batches": 3},
        "train": {"total_steps": 2, "init_from": None,
                  "lr": 1e-3, "clip": 0.05, "threads": 1, "eval_batches": 1,
                  "dump_grads": True, "seed": 3},
        "data": {"name": "synthetic", "max_samples": 48, "eval_samples": 8},
        "dist": {"timeout_s": 30},
        "output": {"dir": str(tmp_path / "out")},
    }  # fmt: skip
    for name, values in sections.items():
        base.setdefault(name, {}).update(values)
    return base


def launch(tmp_path: Path, cfg: dict, timeout_s: float = 90) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    world = cfg["pipeline"]["stages"] * cfg["pipeline"]["replicas"]
    codes = run_ranks(path, world, tmp_path / "logs", grace_s=5)
    if any(codes):
        logs = "\n".join(p.read_text()[-3000:] for p in sorted((tmp_path / "logs").glob("*.log")))
        pytest.fail(f"workers exited with {codes}:\n{logs}")
    return Path(cfg["output"]["dir"])


def read_metrics(out: Path, rank: int) -> list[dict]:
    lines = (out / "metrics" / f"rank{rank}.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def reference(cfg_dict: dict):
    """Unpipelined, same data and optimizer: per-step per-replica losses, step-0
    gradients, and the evaluation loss after the last step."""
    cfg = config_from_dict(cfg_dict)
    p, t = cfg.pipeline, cfg.train
    train_tokens, eval_tokens = load_tokens(cfg)
    model = init_stage(cfg.model, 0, 1, seed=t.seed)
    masks = use_sample_dropout(model, t.seed) if t.dropout_masks == "per_sample" else None

    def forward(ids: torch.Tensor) -> torch.Tensor:  # loss of the windows `ids`
        x = train_tokens[ids.reshape(-1)]
        with masks.samples(ids.reshape(-1)) if masks else nullcontext():
            return lm_loss(model(x), x)

    sampler = Sampler(len(train_tokens), p.micro_batch_size, p.num_micro_batches, t.seed,
                      p.replicas)  # fmt: skip
    opt = torch.optim.AdamW(model.parameters(), lr=t.lr, weight_decay=t.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, linear_warmup_decay(t.lr_warmup_steps, t.total_steps))
    losses, grads = [], None
    for step in range(t.total_steps):
        ids = torch.stack([sampler.step_ids(step, r) for r in range(p.replicas)])  # (R, M, B)
        forward(ids).backward()  # all R * M * B windows as one batch
        with torch.no_grad():
            losses.append([forward(ids[r]).item() for r in range(p.replicas)])
        if step == 0:
            grads = {n: q.grad.clone() for n, q in model.named_parameters()}
        torch.nn.utils.clip_grad_norm_(model.parameters(), t.clip)
        opt.step()
        sched.step()
        opt.zero_grad()
    B, R = p.micro_batch_size, p.replicas
    with torch.no_grad():
        model.eval()
        evals = [lm_loss(model(eval_tokens[r * B:(r + 1) * B]), eval_tokens[r * B:(r + 1) * B])
                 for r in range(R)]  # fmt: skip
    return losses, grads, float(sum(evals) / len(evals))


def check_bytes_and_trace(cfg: dict, out: Path) -> None:
    """Bytes are numel * element_size of every message, per kind and peer; the
    trace has compute, send, recv and compress spans."""
    B, M = cfg["pipeline"]["micro_batch_size"], cfg["pipeline"]["num_micro_batches"]
    L, D = cfg["model"]["seq_len"], cfg["model"]["n_embd"]
    header = (3 + B) * 8  # the compressor's int64 header [format, epoch, n_raw, ids]
    per_msg = header + B * L * D * 4
    r0, r1 = read_metrics(out, 0), read_metrics(out, 1)
    for rec in r0[:2]:
        assert rec["kind"] == "train" and rec["loss"] is None
        assert rec["bytes_sent"] == {"activation": M * per_msg, "gradient": 0, "dp": 0}
        assert rec["bytes_recv"] == {"activation": 0, "gradient": M * per_msg, "dp": 0}
        assert rec["bytes_by_peer"] == {"1": {"sent": M * per_msg, "recv": M * per_msg}}
        assert rec["samples"] == M * B and rec["tokens"] == M * B * L
        assert 0 < rec["compute_s"] < rec["step_time_s"]
        assert 0 <= rec["comm_wait_s"] < rec["step_time_s"]
    assert r1[0]["bytes_by_peer"] == {"0": {"sent": M * per_msg, "recv": M * per_msg}}
    assert r1[1]["lr"] < r1[0]["lr"]  # linear decay
    ev = [m for m in r1 if m["kind"] == "eval"]
    assert len(ev) == 1 and ev[0]["step"] == cfg["train"]["total_steps"]
    assert ev[0]["bytes_recv"]["activation"] == header + B * L * D * 4
    trace = json.loads((out / "trace" / "rank0.json").read_text())["traceEvents"]
    cats = {e.get("cat") for e in trace if e["ph"] == "X"}
    assert {"compute", "compress", "send", "recv", "comm_wait"} <= cats
    names = {e["name"] for e in trace}
    assert {"F0", f"B{M - 1}", "encode act mb0", "recv gradient mb0 step 0"} <= names


@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "stages,replicas,schedule,masks",
    [(2, 1, "gpipe", None), (4, 1, "1f1b", None), (2, 2, "gpipe", None),
     (4, 1, "gpipe", "per_sample")],
    ids=["2stages", "4stages-1f1b", "2stages-x2replicas", "4stages-per-sample-dropout"],
)
def test_pipelined_equals_unpipelined(tmp_path, stages, replicas, schedule, masks):
    cfg = run_config(tmp_path, pipeline={"stages": stages, "replicas": replicas,
                                         "schedule": schedule},
                     output={"trace": stages == 2 and replicas == 1})  # fmt: skip
    if masks is not None:
        cfg["model"]["dropout"] = 0.2
        cfg["train"]["dropout_masks"] = masks
    out = launch(tmp_path, cfg)
    ref_losses, ref_grads, ref_eval = reference(cfg)
    assert not (out / "tensorboard").exists()  # output.tensorboard is off by default

    for r in range(replicas):
        last = r * stages + stages - 1
        train, evals = [[m for m in read_metrics(out, last) if m["kind"] == k]
                        for k in ("train", "eval")]  # fmt: skip
        for step, rec in enumerate(train):
            assert abs(rec["loss"] - ref_losses[step][r]) < TOL, (step, rec["loss"], ref_losses)
        assert abs(evals[0]["eval_loss"] - ref_eval) < TOL, (evals[0]["eval_loss"], ref_eval)
        assert math.isclose(evals[0]["perplexity"], math.exp(ref_eval), rel_tol=1e-4)

        got: dict[str, torch.Tensor] = {}
        for s in range(stages):
            got.update(torch.load(out / "grads" / f"rank{r * stages + s}.pt"))
        assert sorted(got) == sorted(ref_grads)
        for name, g in got.items():
            diff = (g - ref_grads[name]).abs().max().item()
            assert diff < TOL, f"replica {r} {name}: max |grad diff| {diff:.2e}"
    if cfg["output"]["trace"]:
        check_bytes_and_trace(cfg, out)
    if replicas > 1:
        dp = read_metrics(out, 0)[0]
        assert dp["bytes_sent"]["dp"] > 0 and dp["bytes_recv"]["dp"] > 0


@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(120)
def test_records_flag_warm_up_steps_per_direction(tmp_path):
    """Forward warm-up 1 epoch, backward 2: a train step is a warm-up step while either
    direction still sends raw rows (epochs 0 and 1), as the bytes show; evaluation
    records are never warm-up steps."""
    cfg = run_config(tmp_path, forward={"mode": "aqsgd", "bits": 4, "warmup_epochs": 1},
                     backward={"mode": "directq", "bits": 8, "warmup_epochs": 2},
                     train={"total_steps": 6, "init_from": None, "dump_grads": False},
                     data={"max_samples": 12})  # 12 windows / (3 x 2) a step: 2 steps an epoch
    out = launch(tmp_path, cfg)
    for rank in (0, 1):
        records = read_metrics(out, rank)
        train = [m for m in records if m["kind"] == "train"]
        assert [m["warmup"] for m in train] == [True] * 4 + [False] * 2
        assert [m["warmup"] for m in records if m["kind"] == "eval"] == [False]
    train = [m for m in read_metrics(out, 0) if m["kind"] == "train"]
    act = [m["bytes_sent"]["activation"] for m in train]
    grad = [m["bytes_recv"]["gradient"] for m in train]
    assert act[2] < act[1] / 4  # forward deltas from epoch 1 on
    assert grad[2] == grad[1] and grad[4] < grad[3] / 2  # backward quantized from epoch 2 on


def test_topology_rank_layout():
    topo = Topology(stages=3, replicas=2, rank=4)  # replica 1, stage 1
    assert (topo.stage, topo.replica, topo.prev_rank, topo.next_rank) == (1, 1, 3, 5)
    assert topo.dp_ranks(1) == [1, 4] and topo.pipe_ranks(1) == [3, 4, 5]
    assert Topology(3, 2, 3).is_first and Topology(3, 2, 5).is_last
    with pytest.raises(ValueError, match="rank 6 outside world of 3 stages x 2 replicas"):
        Topology(3, 2, 6)


def test_linear_warmup_decay():
    f = linear_warmup_decay(warmup_steps=2, total_steps=6)
    assert [f(s) for s in range(6)] == [0.5, 1.0, 1.0, 0.75, 0.5, 0.25]
    assert linear_warmup_decay(0, 4)(0) == 1.0


def test_step_meter_counts_bytes_by_kind_and_peer(tmp_path):
    meter = StepMeter(rank=0, trace=True)
    meter.add_bytes("activation", 1, sent=100)
    meter.add_bytes("gradient", 1, recv=40)
    meter.add_bytes("dp", None, sent=7, recv=7)
    with meter.span("compute", "F0"):
        pass
    rec = meter.record(kind="train", step=0)
    assert rec["bytes_sent"] == {"activation": 100, "gradient": 0, "dp": 7}
    assert rec["bytes_recv"] == {"activation": 0, "gradient": 40, "dp": 7}
    assert rec["bytes_by_peer"] == {"1": {"sent": 100, "recv": 40}}
    assert [e["name"] for e in meter.events] == ["F0"]
    with pytest.raises(ValueError, match="byte kind must be one of .* got 'weights'"):
        meter.add_bytes("weights", 1, sent=1)
    writer = MetricsWriter(tmp_path, rank=0)
    writer.write(rec)  # flushed at once: readable before close
    assert read_metrics(tmp_path, 0) == [json.loads(json.dumps(rec))]
    writer.close()
