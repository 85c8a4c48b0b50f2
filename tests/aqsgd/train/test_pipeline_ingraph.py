"""In-graph halves of a mode on real 2-rank gloo pipelines (aqsgd.compress.ingraph,
docs/trainable-codecs.md): ssn's bytes a token from the metrics the workers write,
message by message; a plug-in's sending-side parameter trained by the sending stage;
bottleneck's calibration pass.
"""

import json
from pathlib import Path

import pytest
import torch
import yaml
from harness_helpers import run_ranks
from plugin_helpers import identify_file

from aqsgd.compress.message import HEADER_FIELDS

pytestmark = [pytest.mark.workers, pytest.mark.timeout(180)]

MODEL = {"preset": "tiny", "n_layer": 2, "n_embd": 32, "n_head": 2, "vocab_size": 96,
         "seq_len": 8, "dropout": 0.0}
B, M = 2, 2  # micro-batch size, micro-batches a step
PLUGIN = Path(__file__).resolve().parents[3] / "examples" / "plugins" / "lowrank.py"


def launch(tmp_path: Path, forward: dict, backward: dict, steps: int = 2, **extra) -> Path:
    cfg = {
        "model": dict(MODEL),
        "pipeline": {"stages": 2, "micro_batch_size": B, "num_micro_batches": M},
        "forward": forward, "backward": backward,
        "train": {"total_steps": steps, "init_from": None, "lr": 1e-2, "threads": 1,
                  "eval_batches": 1, "eval_every": steps, "seed": 5, "dump_grads": True},
        "data": {"name": "synthetic", "max_samples": 16, "eval_samples": 4},
        "dist": {"timeout_s": 30},
        "output": {"dir": str(tmp_path / "out")},
        **extra,
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    codes = run_ranks(path, 2, tmp_path / "logs", grace_s=5)
    if any(codes):
        logs = "\n".join(p.read_text()[-3000:] for p in sorted((tmp_path / "logs").glob("*.log")))
        pytest.fail(f"workers exited with {codes}:\n{logs}")
    return tmp_path / "out"


def records(out: Path, rank: int, kind: str) -> list[dict]:
    lines = (out / "metrics" / f"rank{rank}.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def test_ssn_sends_rank_x2_plus_the_id_a_token(tmp_path):
    """Forward: a header, k bf16 coordinates and a 2-byte id a token; backward: k bf16
    gradient values a token; byte for byte, in every message of every training step."""
    k = 6
    out = launch(tmp_path, {"mode": "ssn", "dtype": "bf16", "coords": k},
                 {"mode": "none", "dtype": "bf16"})
    header = 8 * (HEADER_FIELDS + B)
    tokens = B * MODEL["seq_len"]
    fwd_msg = header + tokens * (2 * k + 2)
    bwd_msg = header + tokens * 2 * k
    for step in records(out, 0, "train"):
        assert step["bytes_sent"]["activation"] == M * fwd_msg
        assert step["bytes_recv"]["gradient"] == M * bwd_msg
    for step in records(out, 1, "train"):
        assert step["bytes_recv"]["activation"] == M * fwd_msg
        assert step["bytes_sent"]["gradient"] == M * bwd_msg
    (ev,) = records(out, 1, "eval")  # evaluation: fp32 coordinates, the ids as in training
    assert ev["bytes_recv"]["activation"] == header + tokens * (4 * k + 2)
    losses = [r["loss"] for r in records(out, 1, "train")]
    assert all(torch.isfinite(torch.tensor(losses)))


def test_plugin_sender_parameter_changes_after_one_step(tmp_path):
    """The example plug-in `lowrank` (examples/plugins/lowrank.py) declares a learned
    down-projection on the sending side and an up-projection on the receiving side: a
    gradient reaches both through the wire, and one step moves them (the parameters
    before and after the first update, from the workers' `dump_grads` hook)."""
    plugin = identify_file(PLUGIN)
    out = launch(tmp_path, {"mode": "lowrank", "bits": 8, "coords": 4},
                 {"mode": "directq", "bits": 8},
                 plugins=[plugin.to_dict()])
    for rank, name in ((0, "boundary.sender.down"), (1, "boundary.receiver.up")):
        grads = torch.load(out / "grads" / f"rank{rank}.pt")
        before = torch.load(out / "grads" / f"rank{rank}.params0.pt")[name]
        after = torch.load(out / "grads" / f"rank{rank}.params1.pt")[name]
        assert grads[name].abs().sum() > 0, name
        assert not torch.equal(before, after), name


def test_bottleneck_starts_both_sides_from_the_same_principal_components(tmp_path):
    """The calibration pass sends step 0's activations raw once (its record's bytes: fp32
    (B, L, D) a micro-batch), both sides compute the same PCA: the receiver's
    up-projection starts as the transpose of the sender's down-projection."""
    out = launch(tmp_path, {"mode": "bottleneck", "dtype": "bf16", "coords": 5},
                 {"mode": "none", "dtype": "bf16"})
    (calib,) = records(out, 1, "calibration")
    assert calib["bytes_recv"]["activation"] == M * B * MODEL["seq_len"] * MODEL["n_embd"] * 4
    down = torch.load(out / "grads" / "rank0.params0.pt")["boundary.sender.proj.weight"]
    up = torch.load(out / "grads" / "rank1.params0.pt")["boundary.receiver.proj.weight"]
    assert down.shape == (5, MODEL["n_embd"])
    torch.testing.assert_close(up, down.T, atol=1e-6, rtol=0)
    k, tokens = 5, B * MODEL["seq_len"]
    header = 8 * (HEADER_FIELDS + B)
    for step in records(out, 1, "train"):
        assert step["bytes_recv"]["activation"] == M * (header + tokens * 2 * k)
