"""The GPU check's training parts: a real 2-stage pipeline run, and GPT2-XL stage profiles.

    from bench.micro.gpu_training import pipeline_runs, stage_profile
    pipeline_runs(torch.device("cuda"), log=print)  # fp32 and bf16 compute, real workers
    stage_profile(torch.device("cuda"), "gpt2-xl", 8, 1, "bf16")  # a performance-model profile
    torchrun --standalone --nproc-per-node 2 -m bench.micro.gpu_training nccl-probe

`pipeline_runs` starts `python -m aqsgd.train.worker --local 2` (torchrun, two worker
processes, torch.distributed) once per compute precision on a synthetic-data job, AQ-SGD
4-bit activations and DirectQ 8-bit gradients, and returns each run's losses, step times
and bytes. Backend: NCCL with one rank per GPU when there are two or more; on one GPU
NCCL refuses two ranks ("Duplicate GPU detected"; `nccl-probe` tries), so both ranks
share the GPU over gloo, whose point-to-point messages go through host memory
(aqsgd.train.worker, `_wire_device`). docs/performance-model.md, "The GPU check", has
the figures of an H200.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml

__all__ = ["nccl_probe", "pipeline_runs", "stage_profile", "stage_profiles"]

PRECISIONS = ("fp32", "bf16")
_REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------- pipeline runs


def _job(device: torch.device, backend: str, precision: str, out_dir: Path) -> dict:
    """The run config of one check run: GPT-2 small on a GPU, a tiny model on CPU."""
    gpu = device.type == "cuda"
    return {
        "model": {"preset": "gpt2"} if gpu else {"preset": "tiny", "n_embd": 32,
                                                 "vocab_size": 64, "seq_len": 8},
        "pipeline": {"stages": 2, "micro_batch_size": 4 if gpu else 2, "num_micro_batches": 4},
        "forward": {"mode": "aqsgd", "bits": 4, "warmup_epochs": 1},
        "backward": {"mode": "directq", "bits": 8, "warmup_epochs": 1},
        # 64 windows / 16 per step: 4 steps per epoch, the first epoch raw (warm-up)
        "train": {"total_steps": 24 if gpu else 6, "init_from": None,
                  "lr": 1e-3 if gpu else 3e-3, "seed": 0,
                  "eval_batches": 2, "precision": precision, "threads": 2},
        "data": {"name": "synthetic", "max_samples": 64 if gpu else 16, "eval_samples": 8},
        "dist": {"backend": backend, "device": device.type, "timeout_s": 120},
        "output": {"dir": str(out_dir)},
    }  # fmt: skip


def _backend(device: torch.device, probe: dict | None) -> tuple[str, str]:
    """(backend, why): gloo on CPU; NCCL with a GPU per rank; on one GPU, NCCL if the probe
    of two NCCL ranks there ran, else gloo (both ranks on the GPU, messages through host)."""
    if device.type != "cuda":
        return "gloo", "CPU: gloo"
    gpus = torch.cuda.device_count()
    if gpus >= 2:
        return "nccl", f"{gpus} GPUs: NCCL, one rank per GPU"
    if probe is not None and probe["exit"] == 0:
        return "nccl", "one GPU: NCCL ran two ranks on it (nccl_one_gpu), so NCCL"
    return "gloo", ("one GPU: NCCL did not run two ranks on it (nccl_one_gpu), so both ranks "
                    "share the GPU over gloo, their messages through host memory")


def _one_run(device: torch.device, backend: str, precision: str, timeout_s: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="aqsgd-gpu-check-") as tmp:
        out = Path(tmp) / "run"
        path = Path(tmp) / "run.yaml"
        path.write_text(yaml.safe_dump(_job(device, backend, precision, out)))
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "aqsgd.train.worker", "--config", str(path),
                               "--local", "2"], capture_output=True, text=True, cwd=_REPO,
                              timeout=timeout_s, check=False)  # fmt: skip
        wall_s = time.perf_counter() - t0
        metrics = out / "metrics" / "rank1.jsonl"
        if proc.returncode != 0 or not metrics.exists():
            return {"precision": precision, "ok": False, "exit": proc.returncode,
                    "wall_s": round(wall_s, 1), "output_tail": (proc.stdout + proc.stderr)[-3000:]}
        records = [json.loads(line) for line in metrics.read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    losses = [r["loss"] for r in train]
    evals = [r["eval_loss"] for r in records if r["kind"] == "eval"]
    steady = [r for r in train if not r["warmup"]] or train
    falling = statistics.mean(losses[-3:]) < statistics.mean(losses[:3])
    finite = all(math.isfinite(x) for x in losses + evals)
    step_s = statistics.median(r["step_time_s"] for r in steady[1:] or steady)  # not the first
    return {
        "precision": precision, "ok": finite and falling and bool(evals), "exit": 0,
        "wall_s": round(wall_s, 1), "steps": len(train), "losses": [round(x, 4) for x in losses],
        "eval_loss": round(evals[-1], 4) if evals else None,
        "median_step_s": round(step_s, 4),
        "median_compute_s": round(statistics.median(r["compute_s"] for r in steady), 4),
        "activation_bytes_per_step": steady[-1]["bytes_recv"]["activation"],
        "summary": proc.stdout.strip().splitlines()[-3:],
    }  # fmt: skip


def pipeline_runs(device: torch.device, log=print, timeout_s: float = 300) -> dict:
    """The 2-stage job with real workers once per compute precision (module docstring)."""
    probe = None
    if device.type == "cuda" and torch.cuda.device_count() == 1:
        probe = nccl_probe()
        log(f"  NCCL, two ranks on this one GPU: {probe['outcome']}")
    backend, why = _backend(device, probe)
    log(f"  backend: {why}")
    result: dict = {"backend": backend, "why": why, "nccl_one_gpu": probe, "runs": {}}
    for precision in PRECISIONS:
        run = _one_run(device, backend, precision, timeout_s)
        result["runs"][precision] = run
        if run["ok"]:
            log(f"  {precision}: loss {run['losses'][0]:.3f} -> {run['losses'][-1]:.3f}, eval "
                f"{run['eval_loss']:.3f}, median step {run['median_step_s'] * 1e3:.1f} ms "
                f"(compute {run['median_compute_s'] * 1e3:.1f} ms), "
                f"{run['activation_bytes_per_step']} activation bytes/step, {run['wall_s']} s")
        else:
            log(f"  {precision}: FAILED (exit {run['exit']}): {run.get('output_tail', '')[-800:]}")
    result["ok"] = all(r["ok"] for r in result["runs"].values())
    return result


def nccl_probe(timeout_s: float = 60) -> dict:
    """Start two NCCL ranks on this machine's only GPU (torchrun) and say what NCCL did."""
    env = {**os.environ, "NCCL_DEBUG": "WARN"}
    try:
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                               "--nproc-per-node=2", "-m", "bench.micro.gpu_training",
                               "nccl-probe"], capture_output=True, text=True, cwd=_REPO,
                              env=env, timeout=timeout_s, check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"exit": None, "outcome": f"no answer within {timeout_s:.0f} s"}
    text = proc.stdout + proc.stderr
    hits = [line.strip() for line in text.splitlines() if "Duplicate GPU" in line]
    outcome = ("refused: " + hits[0][-200:]) if hits else (
        "all-reduce ran" if proc.returncode == 0 else f"failed, exit {proc.returncode}")
    return {"exit": proc.returncode, "outcome": outcome, "output_tail": text[-1500:]}


def _nccl_probe_rank() -> int:
    """One rank of `nccl_probe`: NCCL on cuda:0 whatever the rank, one all-reduce."""
    import torch.distributed as dist

    torch.cuda.set_device(0)
    dist.init_process_group("nccl")
    x = torch.ones(4, device="cuda:0")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    print(f"rank {dist.get_rank()}: all-reduce gave {x.tolist()}", flush=True)
    dist.destroy_process_group()
    return 0


# ---------------------------------------------------------------------------- stage profiles


def _timed(fn, device: torch.device, repeats: int) -> float:
    """Median wall time of `fn` over `repeats` calls after one untimed call."""
    times = []
    for i in range(repeats + 1):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i:
            times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def _stage_cost(preset: str, stages: int, stage: int, micro_batch_size: int,
                device: torch.device, dtype: str, repeats: int) -> dict:
    from aqsgd.model.config import PRESETS
    from aqsgd.model.gpt2 import compute_precision, init_stage, lm_loss

    cfg = PRESETS[preset]
    module = init_stage(cfg, stage, stages, seed=0).to(device).train()
    opt = torch.optim.AdamW(module.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, cfg.vocab_size, (micro_batch_size, cfg.seq_len), generator=gen)
    ids = ids.to(device)  # (B, L)
    x = torch.randn(micro_batch_size, cfg.seq_len, cfg.n_embd, generator=gen).to(device)
    held: dict = {}

    def forward() -> None:  # as aqsgd.train.pipeline computes a stage: autocast for bf16
        with compute_precision(dtype, device):
            out = module(ids if module.first else x.clone().requires_grad_())
            held["loss"] = lm_loss(out, ids) if module.last else out.float().square().mean()

    def both() -> None:
        forward()
        held["loss"].backward()

    fwd = _timed(forward, device, repeats)
    backward = max(0.0, _timed(both, device, repeats) - fwd)
    optimizer = _timed(opt.step, device, repeats)
    return {"preset": preset, "stages": stages, "stage": stage,
            "micro_batch_size": micro_batch_size, "forward_s": fwd, "backward_s": backward,
            "optimizer_s": optimizer}


def stage_profile(device: torch.device, preset: str = "gpt2-xl", stages: int = 8,
                  micro_batch_size: int = 1, dtype: str = "bf16", repeats: int = 10) -> dict:
    """A performance-model profile (docs/performance-model.md) of `preset` cut into
    `stages` stages on `device`: the first, second and last stages timed (the middle
    stages have the second's shape), compression and communication not measured."""
    kinds = sorted({0, min(1, stages - 1), stages - 1})
    timed = {s: _stage_cost(preset, stages, s, micro_batch_size, device, dtype, repeats)
             for s in kinds}
    rows = [dict(timed[s if s in timed else 1], stage=s) for s in range(stages)]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
    return {
        "name": f"{preset}-{dtype}-{device.type}", "device": f"{name or device.type}, {dtype}",
        "source": "python -m bench.micro.gpu_check (stage timing)",
        "date": time.strftime("%Y-%m-%d"), "kind": "measured",
        "cores": None if device.type == "cuda" else 1, "precision": dtype,
        "compute": {"flop_rate_tflops": None, "optimizer_gbyte_s": None, "stages": rows},
        "assumptions": [
            f"median of {repeats} timed calls after one untimed call, torch {torch.__version__}",
            f"compute precision {dtype} ({'bf16 autocast' if dtype == 'bf16' else 'no autocast'}"
            ", as train.precision runs it), fp32 weights and AdamW",
            "backward = (forward + backward) - forward, timed separately",
            "compression and communication not measured here: the model takes zero coding "
            "time and no per-message overhead; copy them from another profile if needed"],
    }


def stage_profiles(out: Path, device: torch.device, dry_run: bool, log=print) -> list[str]:
    """Profiles of GPT2-XL on 8 stages in fp32 and bf16 (the dry run: tiny, 2 stages)."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for dtype in PRECISIONS:
        prof = (stage_profile(device, "tiny", 2, 2, dtype, repeats=2) if dry_run
                else stage_profile(device, dtype=dtype))
        path = out / f"profile-{dtype}.yaml"
        path.write_text(yaml.safe_dump(prof, sort_keys=False), encoding="utf-8")
        for row in prof["compute"]["stages"]:
            log(f"  {dtype} stage {row['stage']}: forward {row['forward_s'] * 1e3:.2f} ms, "
                f"backward {row['backward_s'] * 1e3:.2f} ms, optimizer "
                f"{row['optimizer_s'] * 1e3:.2f} ms")
        written.append(str(path))
    return written


if __name__ == "__main__":
    if sys.argv[1:] != ["nccl-probe"]:
        sys.exit(f"usage: torchrun --nproc-per-node 2 -m {__spec__.name} nccl-probe")
    sys.exit(_nccl_probe_rank())
