"""A mode sized by data on a real 2-stage pipeline (gloo over loopback): its messages
travel length-first and metrics.csv counts exactly what went on the wire, the shape
prefix and header included, against the sizes the encoder itself produced."""

import json
from pathlib import Path

import pytest
import yaml
from harness_helpers import run_ranks

from aqsgd.compress.registry import load_plugins, unload_plugins
from bench.results.files import metrics_frame

STEPS = 6
M, B, L, D = 2, 4, 16, 64
# a mode that logs the bytes of every message it codes, then codes it as aqsgd-sparse
LOGGED = '''
from aqsgd.compress.modes.aqsgd_sparse import SparseDelta
from aqsgd.compress.wire import message_nbytes

class Logged(SparseDelta):
    name, rank, wire_format = "sparse-logged", 3.6, 70

    def encode(self, rows, generator, m=None):
        out = super().encode(rows, generator, m)
        with open(LOG, "a") as f:
            f.write(f"{rows.shape[0]} {message_nbytes(out)}\\n")
        return out

MODE = Logged
'''


def _run(tmp_path: Path) -> tuple[Path, list[int]]:
    log = tmp_path / "encoded.txt"
    plugin = tmp_path / "sparse_logged.py"
    plugin.write_text(f"LOG = {str(log)!r}\n" + LOGGED)
    plugins = load_plugins([str(plugin)])
    try:
        out = tmp_path / "cell"
        cfg = {
            "model": {"preset": "tiny", "n_embd": D, "vocab_size": 128, "seq_len": L},
            "pipeline": {"stages": 2, "micro_batch_size": B, "num_micro_batches": M},
            # every training message coded (no warm-up epoch, first visits against 0)
            "forward": {"mode": "sparse-logged", "bits": 2, "warmup_epochs": 0,
                        "first_visit": "zero"},
            "backward": {"mode": "directq", "bits": 4, "warmup_epochs": 0},
            "train": {"total_steps": STEPS, "init_from": None, "lr": 3e-3, "seed": 5,
                      "eval_batches": 2},
            "data": {"name": "synthetic", "max_samples": 16, "eval_samples": 16},
            "dist": {"timeout_s": 60},
            "output": {"dir": str(out)},
            "plugins": [p.to_dict() for p in plugins],
        }
        path = tmp_path / "run.yaml"
        path.write_text(yaml.safe_dump(cfg))
        codes = run_ranks(path, 2, out / "logs", grace_s=5)
    finally:
        unload_plugins(plugins)
    assert codes == [0, 0], [p.read_text()[-2000:] for p in (out / "logs").glob("*.log")]
    # a micro-batch's messages code B rows; the load-time check of each process that
    # loads the plug-in codes 3 (aqsgd.compress.trial): left out
    lines = [line.split() for line in log.read_text().splitlines()]
    return out, [int(n) for rows, n in lines if int(rows) == B]


@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(300)
def test_metrics_count_what_the_encoder_produced_with_prefix_and_header(tmp_path):
    out, encoded = _run(tmp_path)
    metrics, _ = metrics_frame(sorted((out / "metrics").glob("rank*.jsonl")), "cell")
    train = metrics[metrics["kind"] == "train"].sort_values("step")
    sent = train[train["rank"] == 0]["bytes_sent_activation"].astype(int).tolist()
    recv = train[train["rank"] == 1]["bytes_recv_activation"].astype(int).tolist()

    assert len(encoded) == STEPS * M  # one coded message a micro-batch, in step order
    assert len(set(encoded)) > 1  # the size really depends on the data
    header = (3 + B) * 8  # format, epoch, n_raw, B sample ids
    prefix = 8 * 5  # the dims of header, counts, positions, codes, scales
    expected = [sum(encoded[s * M:(s + 1) * M]) + M * (prefix + header) for s in range(STEPS)]
    assert sent == expected
    assert recv == expected

    # evaluation messages go raw in fp32, still length-first (header, rows: 4 dims)
    evals = metrics[metrics["kind"] == "eval"]
    eval_sent = int(evals[evals["rank"] == 0]["bytes_sent_activation"].sum())
    per_msg = 8 * 4 + header + B * L * D * 4
    assert eval_sent == int(evals[evals["rank"] == 1]["bytes_recv_activation"].sum())
    assert eval_sent % per_msg == 0 and eval_sent > 0

    # it trained: the last stage's loss went down
    losses = [json.loads(x)["loss"] for x in (out / "metrics" / "rank1.jsonl").read_text()
              .splitlines() if json.loads(x)["kind"] == "train"]
    assert losses[-1] < losses[0]
