"""AQ-SGD on a real 2-stage pipeline: close to fp32, compressed, and deterministic."""

import json
from pathlib import Path

import pytest
import yaml
from harness_helpers import run_ranks

STEPS = 24
M, B, L, D = 2, 4, 16, 64


def run(tmp_path: Path, name: str, forward: dict) -> list[dict]:
    out = tmp_path / name
    cfg = {
        "model": {"preset": "tiny", "n_embd": D, "vocab_size": 128, "seq_len": L},
        "pipeline": {"stages": 2, "micro_batch_size": B, "num_micro_batches": M},
        "forward": forward,
        "backward": {"mode": "none"},
        # 32 windows / 8 per step = 4 steps per epoch: 6 epochs, the first one warm-up
        "train": {"total_steps": STEPS, "init_from": None, "lr": 3e-3, "seed": 5,
                  "eval_batches": 2},
        "data": {"name": "synthetic", "max_samples": 32, "eval_samples": 16},
        "dist": {"timeout_s": 60},
        "output": {"dir": str(out)},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    codes = run_ranks(path, 2, out / "logs", grace_s=5)
    assert codes == [0, 0], [p.read_text()[-2000:] for p in (out / "logs").glob("*.log")]
    return [json.loads(x) for r in (0, 1)
            for x in (out / "metrics" / f"rank{r}.jsonl").read_text().splitlines()]  # fmt: skip


def curve(recs):
    return [r["loss"] for r in recs if r["kind"] == "train" and r["stage"] == 1]


def final_eval(recs):
    return [r["eval_loss"] for r in recs if r["kind"] == "eval" and r["stage"] == 1][-1]


def act_bytes(recs, step):
    return next(r["bytes_sent"]["activation"] for r in recs
                if r["kind"] == "train" and r["stage"] == 0 and r["step"] == step)  # fmt: skip


@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(300)
def test_aqsgd_2bit_matches_fp32_and_is_deterministic(tmp_path):
    fp32 = run(tmp_path, "fp32", {"mode": "none"})
    aq = {"mode": "aqsgd", "bits": 2, "warmup_epochs": 1}
    aq1, aq2 = run(tmp_path, "aq1", aq), run(tmp_path, "aq2", aq)

    # it learned something, and AQ-SGD at 2 bits ends within 2% of fp32
    assert curve(fp32)[-1] < 0.8 * curve(fp32)[0]
    assert abs(final_eval(aq1) - final_eval(fp32)) <= 0.02 * final_eval(fp32)
    assert abs(curve(aq1)[-1] - curve(fp32)[-1]) <= 0.02 * curve(fp32)[-1]

    # activations really were compressed after warm-up (epoch 0 = steps 0..3)
    raw = M * ((3 + B) * 8 + B * L * D * 4)
    assert act_bytes(fp32, 5) == raw and act_bytes(aq1, 0) == raw
    assert act_bytes(aq1, 5) < raw / 8

    # same seed: identical loss curve and byte counts, rank by rank, step by step
    assert curve(aq1) == curve(aq2)
    keys = ("step", "rank", "loss", "bytes_sent", "bytes_recv", "bytes_by_peer", "eval_loss")
    assert [{k: r.get(k) for k in keys} for r in aq1] == [{k: r.get(k) for k in keys} for r in aq2]
