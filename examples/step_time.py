"""Step time and communication-wait share of a 2-stage loopback run, per mode.

    python examples/step_time.py --out runs/step-time [--steps 16] [--data pydoc]

Runs examples/tiny-2stage.yaml (random init, no evaluation, no shaping) once per
forward mode (fp32, aqsgd 4 bits, aqsgd 2 bits; backward fp32), and prints the
median over the post-warm-up steps of step_time_s and comm_wait_s / step_time_s
per rank, read back from the metrics files.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table

from aqsgd.train.worker import run_local
from specfile import read_file

EXAMPLE = Path(__file__).resolve().parent / "tiny-2stage.yaml"
MODES = {
    "fp32": {"mode": "none"},
    "aqsgd-4bit": {"mode": "aqsgd", "bits": 4, "warmup_epochs": 1},
    "aqsgd-2bit": {"mode": "aqsgd", "bits": 2, "warmup_epochs": 1},
}


def summarize(out: Path, first_step: int) -> list[dict]:
    rows = []
    for rank in (0, 1):
        lines = (out / "metrics" / f"rank{rank}.jsonl").read_text().splitlines()
        recs = [json.loads(x) for x in lines]
        train = [r for r in recs if r["kind"] == "train" and r["step"] >= first_step]
        step = statistics.median(r["step_time_s"] for r in train)
        rows.append({
            "rank": rank,
            "step_time_s": step,
            "comm_wait_share": statistics.median(
                r["comm_wait_s"] / r["step_time_s"] for r in train
            ),
            "compute_s": statistics.median(r["compute_s"] for r in train),
            "compress_s": statistics.median(r["compress_s"] for r in train),
            "act_bytes_per_step": train[-1]["bytes_sent"]["activation"] if rank == 0 else None,
        })  # fmt: skip
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=Path("runs/step-time"))
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--data", default="pydoc")
    args = p.parse_args()
    base = read_file(EXAMPLE, what="run config")  # the one YAML loader (specfile)
    base["train"].update(steps=args.steps, init_from=None, eval_batches=0, lr_warmup_steps=0)
    base["data"]["name"] = args.data
    base["backward"] = {"mode": "none"}
    base["output"]["trace"] = False
    steps_per_epoch = base["data"]["max_samples"] // (
        base["pipeline"]["micro_batch_size"] * base["pipeline"]["num_micro_batches"])
    print(f"load average {os.getloadavg()[0]:.1f}; median over steps "
          f"{steps_per_epoch + 1}..{args.steps - 1}")  # fmt: skip
    table = Table(title="medians per rank; activation bytes sent per step by rank 0")
    table.add_column("mode", no_wrap=True)
    for header in ("rank", "step ms", "comm wait %", "compute ms", "compress ms", "act B/step"):
        table.add_column(header, justify="right")
    for name, fwd in MODES.items():
        cfg = dict(base, forward=fwd)
        cfg["output"] = dict(base["output"], dir=str(args.out / name))
        path = args.out / f"{name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(cfg))
        if run_local(path, 2) != 0:
            raise SystemExit(f"{name}: a worker failed")
        for row in summarize(args.out / name, steps_per_epoch + 1):
            table.add_row(
                name, str(row["rank"]), f"{row['step_time_s'] * 1e3:.1f}",
                f"{100 * row['comm_wait_share']:.1f}", f"{row['compute_s'] * 1e3:.1f}",
                f"{row['compress_s'] * 1e3:.1f}", str(row["act_bytes_per_step"] or ""),
            )  # fmt: skip
    Console().print(table)


if __name__ == "__main__":
    main()
