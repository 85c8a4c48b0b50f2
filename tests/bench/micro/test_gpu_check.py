"""The GPU check's own checks (bench.micro.gpu_check, bench.micro.triton_checks) on CPU,
through the Triton interpreter: the cases against the torch backend, a dry run of every
stage (the 2-stage worker run and the stage profiles too), the exit without CUDA, and the
PTX audit for sm_90 (a real compilation).

Like tests/aqsgd/quant/test_triton_kernels.py, this module sets TRITON_INTERPRET=1 before
anything imports triton; the script itself runs in its own process.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

pytestmark = pytest.mark.triton

if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
    import triton  # noqa: F401  (in CI a missing Triton is a failure, not a skip)
else:
    pytest.importorskip("triton")

from aqsgd.quant import triton_launch as kernels  # noqa: E402
from bench.micro import gpu_check, triton_checks  # noqa: E402

if not kernels._interpreted():
    raise RuntimeError("aqsgd.quant.triton_kernels was built compiled (triton imported before "
                       "this module set TRITON_INTERPRET=1): run "
                       "tests/bench/micro/test_gpu_check.py in its own pytest process, or set "
                       "TRITON_INTERPRET=1")  # fmt: skip

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", triton_checks.CPU_CASES, ids=lambda c: c.label)
def test_gpu_check_cases_match_torch_backend(case):
    # quantize, dequantize (two dtypes) and three encode/decode steps, backend="triton"
    # against backend="torch", the same generator seeds on both: every byte equal
    # (l2 scales: at most one fp16 ulp).
    res = triton_checks.check_case(case, torch.device("cpu"))
    assert res["ok"], res


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_gpu_check_cpu_dry_run(tmp_path):
    # Every stage of the GPU script except the PTX audit, on CPU through the interpreter.
    env = {**os.environ, "TRITON_INTERPRET": "1"}  # a fresh process: set before its import
    proc = subprocess.run([sys.executable, "-m", "bench.micro.gpu_check", "--cpu-dry-run",
                           "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=230, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    record = json.loads((tmp_path / "gpu_check.json").read_text())
    assert record["ok"] is True
    assert [r["ok"] for r in record["exactness"]] == [True, True]
    ops = {r["op"].split()[0] for r in record["bandwidth"]}
    assert ops == {"copy", "quantize_packed", "dequantize_packed", "aqsgd_encode", "aqsgd_decode"}
    assert record["pipeline"] == {"steps": 3, "mismatched_elements": 0, "ok": True}
    # real worker processes (torchrun, gloo), the same job in fp32 and in bf16 compute
    runs = record["pipeline_run"]["runs"]
    assert record["pipeline_run"]["ok"] and sorted(runs) == ["bf16", "fp32"]
    for run in runs.values():
        assert run["ok"] and run["steps"] == 6 and run["losses"][-1] < run["losses"][0], run
    assert {Path(p).name for p in record["stage_profile"]} == {"profile-fp32.yaml",
                                                               "profile-bf16.yaml"}
    assert json.loads((tmp_path / "kernels.json").read_text())["rows"]
    assert "gpu_check PASSED" in (tmp_path / "gpu_check.log").read_text()


@pytest.mark.timeout(120)
def test_gpu_check_without_cuda_exits_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "bench.micro.gpu_check", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=110, cwd=REPO)
    assert proc.returncode == gpu_check.NO_CUDA_EXIT, proc.stderr
    assert "no CUDA device" in proc.stderr


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ptx_audit_for_sm90(tmp_path):
    # Real compilation to PTX and cubin for an H100/H200 on this CPU-only host: every
    # kernel variant builds, and none has an FMA or an approximate division or sqrt.
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-m", "bench.micro.gpu_check", "--ptx-audit",
                           "--arch", "90", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=290, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = json.loads((tmp_path / "gpu_check.json").read_text())["ptx_audit"]
    names = {r["kernel"] for r in records}
    assert names == {"encode_rows_kernel", "encode_flat_kernel", "decode_flat_kernel",
                     "decode_rows_kernel",
                     "row_scales_kernel", "col_partial_kernel", "col_finalize_kernel"}
    assert all(r["ok"] for r in records), [r for r in records if not r["ok"]]


@pytest.mark.parametrize("gpus, probe_exit, backend", [
    (2, None, "nccl"),  # one rank per GPU
    (1, 0, "nccl"),  # NCCL ran two ranks on the one GPU
    (1, 1, "gloo"),  # NCCL refused them (Duplicate GPU detected): gloo, through host memory
])  # fmt: skip
def test_pipeline_run_backend_follows_the_gpus_and_the_nccl_probe(monkeypatch, gpus, probe_exit,
                                                                  backend):  # fmt: skip
    from bench.micro import gpu_training

    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    probe = None if probe_exit is None else {"exit": probe_exit}
    assert gpu_training._backend(torch.device("cuda", 0), probe)[0] == backend
    assert gpu_training._backend(torch.device("cpu"), None) == ("gloo", "CPU: gloo")
