"""Check the Triton quantizer kernels and the training path on a CUDA GPU; save it all.

    python -m bench.micro.gpu_check --out results/gpu            # `make gpu-check`
    python -m bench.micro.gpu_check --ptx-audit --out DIR        # no GPU needed
    TRITON_INTERPRET=1 python -m bench.micro.gpu_check --cpu-dry-run --out DIR   # no GPU

Stages, each recorded in DIR/gpu_check.json and gpu_check.log even when another fails:
the environment, the PTX audit, bit-exactness of Triton against torch, bandwidth beside a
device-to-device copy, the compressor round trip and a 2-stage run of real workers in fp32
and bf16 compute (--skip-pipeline), GPT2-XL stage profiles (profile-fp32.yaml and
profile-bf16.yaml; --skip-stage-profile), bench.micro.kernels (kernels.json; --skip-bench).
What each checks: docs/performance-model.md, "The GPU check". Status 2: no CUDA device
(the PTX audit and the CPU dry run need none, and the tests run both); 1: a check failed.
The checks are in bench.micro.triton_checks, bench.micro.ptx_audit, bench.micro.gpu_training.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch

from bench.micro.console import new_table, table_lines
from bench.micro.gpu_training import pipeline_runs, stage_profile, stage_profiles
from bench.micro.ptx_audit import ptx_audit
from bench.micro.triton_checks import (
    CASES,
    LARGE_SHAPE,
    PAPER_SHAPE,
    SMOKE_CASES,
    Case,
    bandwidth,
    check_case,
    pipeline_check,
)

__all__ = ["NO_CUDA_EXIT", "environment", "main", "stage_profile"]

NO_CUDA_EXIT = 2


class _Log:
    """Prints and keeps every line, for gpu_check.log."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, text: str = "") -> None:
        print(text, flush=True)
        self.lines.append(text)


# ---------------------------------------------------------------------------- environment


def environment(device: torch.device | None) -> dict:
    import triton

    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "torch_cuda": torch.version.cuda,
        "host": platform.node(),
        "git_commit": _git_commit(),
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if device is not None and device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(gpu=props.name, capability=f"{props.major}.{props.minor}",
                   gpu_memory_gib=round(props.total_memory / 2**30, 1),
                   sm_count=props.multi_processor_count, driver=_nvidia_smi_driver())  # fmt: skip
    return env


def _git_commit() -> str | None:
    """HEAD of the checkout this suite is; None for a tree outside one (a `git archive`
    export inside another repository must not report that repository's commit)."""
    root = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", "rev-parse", "--show-toplevel", "HEAD"],
                             capture_output=True, text=True, timeout=10, cwd=root)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    words = out.stdout.split()
    if out.returncode != 0 or len(words) != 2 or Path(words[0]).resolve() != root:
        return None
    return words[1]


def _nvidia_smi_driver() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else None


# ---------------------------------------------------------------------------- main


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.micro.gpu_check",
                                description=__doc__.split("\n")[0])  # fmt: skip
    p.add_argument("--out", default="results/gpu", help="output directory (default results/gpu)")
    p.add_argument("--ptx-audit", action="store_true",
                   help="only compile the kernels for --arch and audit their PTX (no GPU needed)")
    p.add_argument("--arch", type=int, default=None,
                   help="sm version for the PTX audit (default: this GPU's, else 90)")
    p.add_argument("--smoke", action="store_true", help="small cases only, no 64M-element runs")
    p.add_argument("--skip-bench", action="store_true", help="do not run bench.micro.kernels")
    p.add_argument("--skip-pipeline", action="store_true",
                   help="no compressor round trip and no 2-stage pipeline run")
    p.add_argument("--skip-stage-profile", action="store_true",
                   help="no GPT2-XL stage timing (the performance-model profiles)")
    p.add_argument("--cpu-dry-run", action="store_true",
                   help="every stage but the PTX audit on CPU at smoke sizes, through the "
                        "Triton interpreter (set TRITON_INTERPRET=1): tests this script")
    return p.parse_args(argv)


def _write(out: Path, log: _Log, record: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_check.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
    (out / "gpu_check.log").write_text("\n".join(log.lines) + "\n")


def _run_stage(name: str, log: _Log, record: dict, fn):
    """Run one stage, record its result or its traceback; never abort the others."""
    log(f"== {name}")
    try:
        record[name] = fn()
        return record[name]
    except Exception as e:  # noqa: BLE001 - each stage reports its own failure
        record[name] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        log(f"  {name} FAILED: {type(e).__name__}: {e}")
        return None


def _exactness(device: torch.device, cases: list[Case], log: _Log) -> list[dict]:
    rows = []
    for case in cases:
        try:
            row = check_case(case, device)
        except Exception as e:  # noqa: BLE001 - one broken case must not hide the others
            row = {"case": case.label, "ok": False, "mismatches": {},
                   "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        rows.append(row)
        log(f"  {'ok  ' if row['ok'] else 'FAIL'} {case.label} "
            f"{row.get('error') or row['mismatches'] or ''} ({row.get('seconds', '-')} s)")
    return rows


def _log_bandwidth(rows: list[dict] | None, log: _Log) -> None:
    if not rows:
        return
    table = new_table("op", "config", "median ms", "GB/s", "% of copy",
                      numeric=("median ms", "GB/s", "% of copy"))
    for r in rows:
        table.add_row(r["op"], r["config"], f"{r['median_ms']:.4f}", f"{r['gb_per_s']:.1f}",
                      f"{r['pct_of_copy']:.1f}")
    for line in table_lines(table):
        log(f"  {line}")


def _all_ok(rows) -> bool:
    return bool(rows) and all(r["ok"] for r in rows)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    out, log = Path(args.out), _Log()
    if args.ptx_audit:
        record = {"environment": environment(None)}
        audit = _run_stage("ptx_audit", log, record, lambda: ptx_audit(args.arch or 90, log))
        _write(out, log, record)
        return 0 if _all_ok(audit) else 1
    if args.cpu_dry_run:
        args.smoke, device = True, torch.device("cpu")
    elif torch.cuda.is_available():
        device = torch.device("cuda", 0)
    else:
        print(f"bench.micro.gpu_check: no CUDA device here (torch.cuda.is_available() is False, "
              f"torch {torch.__version__} built for CUDA {torch.version.cuda}): it needs an "
              "NVIDIA GPU, its driver and a CUDA build of torch with triton; without them, "
              "--ptx-audit compiles and audits the kernels", file=sys.stderr)
        return NO_CUDA_EXIT
    record = {"environment": environment(device), "args": vars(args)}
    log(json.dumps(record["environment"], indent=2))
    # the dry run keeps to the small cases: the tests run CPU_CASES in-process anyway
    cases = SMOKE_CASES[:2] if args.cpu_dry_run else SMOKE_CASES if args.smoke else CASES
    bw_shape = (2, 64, 256) if args.cpu_dry_run else PAPER_SHAPE if args.smoke else LARGE_SHAPE
    stages = {
        "exactness": (lambda: _exactness(device, cases, log), _all_ok),
        "bandwidth": (lambda: bandwidth(device, bw_shape, reps=3 if args.smoke else 20),
                      lambda rows: rows is not None),
    }
    if not args.cpu_dry_run:
        major, minor = torch.cuda.get_device_capability(device)
        stages["ptx_audit"] = (lambda: ptx_audit(args.arch or major * 10 + minor, log), _all_ok)
    if not args.skip_pipeline:
        stages["pipeline"] = (lambda: pipeline_check(device), lambda res: bool(res and res["ok"]))
        stages["pipeline_run"] = (lambda: pipeline_runs(device, log),
                                  lambda res: bool(res and res["ok"]))
    if not args.skip_stage_profile:
        stages["stage_profile"] = (lambda: stage_profiles(out, device, args.cpu_dry_run, log),
                                   lambda res: bool(res))
    if not args.skip_bench:
        stages["bench_kernels"] = (lambda: _bench_kernels(out, args.smoke, log, device),
                                   lambda res: res is not None)
    ok = True
    for name, (fn, passed) in stages.items():
        result = _run_stage(name, log, record, fn)
        if name == "bandwidth":
            _log_bandwidth(result, log)
        if name == "pipeline":
            log(f"  {result}")
        ok &= passed(result)
        _write(out, log, record)  # keep what we have if a later stage hangs
    record["ok"] = ok
    log(f"== gpu_check {'PASSED' if ok else 'FAILED'}; files in {out}")
    _write(out, log, record)
    return 0 if ok else 1


def _bench_kernels(out: Path, smoke: bool, log: _Log, device: torch.device) -> dict:
    """bench.micro.kernels at its CUDA sizes (paper shape and 64M elements; CPU rows too),
    its table copied into the log, its rows into kernels.json."""
    import contextlib
    import io

    from bench.micro import kernels as bench_kernels

    out.mkdir(parents=True, exist_ok=True)
    argv = ["--json", str(out / "kernels.json")]
    if device.type != "cuda":
        argv.append("--smoke")
    elif smoke:  # (its own --smoke is CPU only)
        argv += ["--sizes", "1x1024x1600", "--bits", "4", "--repeats", "5"]
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        rows = bench_kernels.main(argv)
    for line in text.getvalue().splitlines():
        log(f"  {line}")
    return {"argv": argv, "rows": len(rows), "json": str(out / "kernels.json")}


if __name__ == "__main__":
    sys.exit(main())
