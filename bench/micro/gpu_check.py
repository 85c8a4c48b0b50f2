"""Check the Triton quantizer kernels on a CUDA GPU, benchmark them, save it all.

    python -m bench.micro.gpu_check --out results/gpu            # `make gpu-check`
    python -m bench.micro.gpu_check --ptx-audit --out DIR        # no GPU needed
    TRITON_INTERPRET=1 python -m bench.micro.gpu_check --cpu-dry-run --out DIR   # no GPU

On a CUDA machine it writes, under --out: gpu_check.log (everything printed) and
gpu_check.json (environment, per-case results, bandwidth, benchmark status):
1. environment: GPU, capability, driver/CUDA, torch, triton, git commit;
2. PTX audit: every kernel variant compiled for this GPU's architecture, its PTX
   checked for fused multiply-adds, approximate division/sqrt and flush-to-zero
   (each would break bit-exactness with torch), registers per thread reported;
3. bit-exactness: Triton against torch on CUDA (and torch on CUDA against torch on
   CPU) at irregular shapes, (1, 1024, 1600) and 64M elements, bits 1..8, both
   grids, both roundings, fp32/fp16/bf16, and the fused AQ-SGD steps;
4. bandwidth: the Triton kernels at 64M elements in GB/s of ideal traffic, beside
   a device-to-device copy of the same tensor (the practical ceiling);
5. `bench.micro.kernels` at its CUDA sizes (its table in the log, its rows in kernels.json);
6. compressor round trip (skip with --skip-pipeline): aqsgd.compress.activation sender and
   receiver on CUDA (Triton path) against the same pair on CPU (torch path).
With no CUDA device it prints why and exits with status 2; the PTX audit runs
anywhere (it compiles for sm_90 on the host), and `--cpu-dry-run` runs every
other stage on CPU through the Triton interpreter, which is how the tests
exercise this script. Status 1: a check failed.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import re
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch

__all__ = ["Case", "CASES", "CPU_CASES", "SMOKE_CASES", "environment", "ptx_audit", "check_case",
           "bandwidth", "pipeline_check", "main"]  # fmt: skip

NO_CUDA_EXIT = 2


@dataclass(frozen=True)
class Case:
    """One bit-exactness case: a tensor shape, its dtype, the cache dtype, QuantConfig fields."""

    shape: tuple[int, ...]
    x_dtype: str = "fp32"
    m_dtype: str = "fp16"
    quant: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.x_dtype not in _DTYPES:
            raise ValueError(f"Case.x_dtype must be one of {sorted(_DTYPES)}, got {self.x_dtype!r}")
        if self.m_dtype not in ("fp32", "fp16"):  # the caches aqsgd.quant accepts
            raise ValueError(f"Case.m_dtype must be fp32 or fp16, got {self.m_dtype!r}")
        if not self.shape or any(d < 1 for d in self.shape):
            raise ValueError(f"Case.shape must be non-empty with positive sizes, got {self.shape}")

    @property
    def label(self) -> str:
        fields = ",".join(f"{k}={v}" for k, v in sorted(self.quant.items()))
        return f"{'x'.join(map(str, self.shape))} {self.x_dtype}/{self.m_dtype} {fields}"


_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
PAPER_SHAPE = (1, 1024, 1600)  # GPT2-XL micro-batch at a stage boundary
LARGE_SHAPE = (16, 4096, 1024)  # 64M elements

SMOKE_CASES = [
    Case((3, 37, 50), "fp32", "fp32", dict(bits=4)),
    Case((3, 37, 50), "bf16", "fp16", dict(bits=3, granularity="token", rounding="stochastic")),
    Case((2, 129, 1600), "fp16", "fp32", dict(bits=2, granularity="group", group_size=64,
                                              grid="symmetric", rounding="stochastic")),
]
# Irregular shapes, every bit width: these also run on CPU under the Triton interpreter
# (tests/test_kernels_triton.py), so the script's own checks are exercised without a GPU.
CPU_CASES = SMOKE_CASES + [
    Case((3, 37, 50), "fp16", "fp16", dict(bits=1, grid="symmetric")),
    Case((3, 37, 50), "fp32", "fp16", dict(bits=5, granularity="group", group_size=111)),
    Case((3, 37, 50), "bf16", "fp32", dict(bits=7, granularity="token", scale_method="l2",
                                           grid="symmetric", rounding="stochastic")),
    Case((3, 37, 50), "fp32", "fp32", dict(bits=8, granularity="token")),
    Case((2, 129, 1600), "bf16", "fp16", dict(bits=6, grid="symmetric", rounding="stochastic")),
]
CASES = CPU_CASES + [
    Case(PAPER_SHAPE, "fp32", "fp16", dict(bits=4)),
    Case(PAPER_SHAPE, "fp16", "fp16", dict(bits=2, rounding="stochastic")),
    Case(PAPER_SHAPE, "fp32", "fp32", dict(bits=3, granularity="token", grid="symmetric")),
    Case(PAPER_SHAPE, "bf16", "fp16", dict(bits=7, granularity="group", group_size=128)),
    Case(PAPER_SHAPE, "fp32", "fp16", dict(bits=4, scale_method="l2")),
    Case(LARGE_SHAPE, "fp32", "fp16", dict(bits=4)),
    Case(LARGE_SHAPE, "fp16", "fp16", dict(bits=2, granularity="token", rounding="stochastic")),
    Case(LARGE_SHAPE, "bf16", "fp32", dict(bits=8, granularity="group", group_size=128,
                                           grid="symmetric")),
]


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
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10, cwd=Path(__file__).resolve().parent)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def _nvidia_smi_driver() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else None


# ---------------------------------------------------------------------------- PTX audit

# PTX patterns that must not appear: each rounds differently from torch's fp32 ops.
_FORBIDDEN_PTX = {
    "fused multiply-add": r"\bfma\.",
    "approximate division": r"\bdiv\.(approx|full)\.",
    "approximate sqrt": r"\bsqrt\.approx\.",
    "flush-to-zero": r"\.ftz\b",  # e.g. tl.floor's cvt.rmi.ftz: negative subnormals -> -0
}


def _audit_variants() -> list[tuple[str, dict, dict]]:
    """(kernel name, pointer dtypes, constexprs) covering every constexpr branch, at the
    tile sizes the CUDA host code picks for (B, L, 1600) rows and groups of 128."""
    flat = 128  # kernels._TILES["cuda"].flat_octets
    common = dict(SYMMETRIC=False, X_BF16=False, M_BF16=False, IDX64=False)
    enc_ptrs = {"x_ptr": "*fp32", "m_ptr": "*fp16", "scale_ptr": "*fp16", "inv_ptr": "*fp32",
                "step_ptr": "*fp32", "out_ptr": "*u8"}  # fmt: skip
    bf16_ptrs = {**enc_ptrs, "x_ptr": "*i16", "m_ptr": "*i16"}
    out = []
    for bits, sym, stoch, l2, col, has_m, rows, octets in [
            (4, False, False, False, False, True, 1, 256),
            (3, True, True, True, False, True, 16, 16),
            (8, False, True, False, True, True, 1, 256),
            (1, True, False, False, True, False, 1, 256)]:
        out.append(("_encode_rows_kernel", enc_ptrs, {**common, "BITS": bits, "SYMMETRIC": sym,
                    "STOCHASTIC": stoch, "L2": l2, "COL_SCALES": col, "HAS_M": has_m,
                    "ROWS": rows, "OCTETS": octets}))  # fmt: skip
    out.append(("_encode_rows_kernel", bf16_ptrs, {**common, "BITS": 2, "STOCHASTIC": True,
                "L2": False, "COL_SCALES": False, "HAS_M": True, "X_BF16": True, "M_BF16": True,
                "ROWS": 8, "OCTETS": 64, "IDX64": True}))  # fmt: skip
    for by_row, bits, sym, stoch in [(False, 3, False, True), (True, 5, True, False)]:
        out.append(("_encode_flat_kernel", enc_ptrs, {**common, "BY_ROW": by_row, "BITS": bits,
                    "SYMMETRIC": sym, "STOCHASTIC": stoch, "HAS_M": True, "OCTETS": flat}))
    dec = {"packed_ptr": "*u8", "scale_ptr": "*fp16", "out_ptr": "*fp32"}
    for by_row, bits, sym, acc in [(False, 4, False, True), (True, 3, True, False)]:
        out.append(("_decode_flat_kernel", dec, {"BY_ROW": by_row, "BITS": bits,
                    "SYMMETRIC": sym, "ACCUMULATE": acc, "OUT_BF16": False, "OCTETS": flat,
                    "IDX64": False}))  # fmt: skip
    out.append(("_decode_flat_kernel", {**dec, "out_ptr": "*i16"}, {"BY_ROW": True, "BITS": 8,
                "SYMMETRIC": False, "ACCUMULATE": True, "OUT_BF16": True, "OCTETS": flat,
                "IDX64": True}))  # fmt: skip
    for col, bits, sym, acc, bf16 in [(True, 4, False, True, False), (False, 6, True, False, True)]:
        out.append(("_decode_rows_kernel", {**dec, "out_ptr": "*i16" if bf16 else "*fp16"},
                    {"BITS": bits, "SYMMETRIC": sym, "COL_SCALES": col, "ACCUMULATE": acc,
                     "OUT_BF16": bf16, "ROWS": 1, "OCTETS": 256, "IDX64": bf16}))
    stat_ptrs = {"x_ptr": "*fp32", "m_ptr": "*fp16", "scale_ptr": "*fp16", "inv_ptr": "*fp32",
                 "step_ptr": "*fp32", "part_ptr": "*fp32"}  # fmt: skip
    for l2 in (False, True):
        out.append(("_row_scales_kernel", stat_ptrs, {**common, "BITS": 4, "SYMMETRIC": l2,
                    "L2": l2, "HAS_M": True, "ROWS": 16, "COLS": 128}))  # fmt: skip
        out.append(("_col_partial_kernel", stat_ptrs, {"L2": l2, "HAS_M": True, "X_BF16": False,
                    "M_BF16": False, "BLOCK_R": 16, "BLOCK_C": 128, "IDX64": False}))
        out.append(("_col_finalize_kernel", stat_ptrs, {"BITS": 4, "SYMMETRIC": l2, "L2": l2,
                    "BLOCK_C": 128}))  # fmt: skip
    return out


def _tile_elems(consts: dict) -> int:
    """Elements per program of a variant, as the host computes it for num_warps."""
    if "ROWS" in consts:
        return consts["ROWS"] * consts.get("COLS", consts.get("OCTETS", 1) * 8)
    if "BLOCK_R" in consts:
        return consts["BLOCK_R"] * consts["BLOCK_C"]
    return consts.get("OCTETS", 0) * 8 or consts["BLOCK_C"]


def _resource_usage(cubin: bytes) -> dict:
    """Registers and local (spill) bytes per thread from cuobjdump, when it is at hand."""
    import tempfile

    import triton

    tool = getattr(getattr(triton.knobs.nvidia, "cuobjdump", None), "path", None)
    if not tool:
        return {}
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        try:
            text = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True,
                                  timeout=60).stdout  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            return {}
    found = re.search(r"REG:(\d+).*?LOCAL:(\d+)", text)
    return {"registers": int(found[1]), "local_bytes": int(found[2])} if found else {}


def ptx_audit(arch: int = 90, log: _Log | None = None) -> list[dict]:
    """Compile every kernel variant for sm_<arch> on this host (no GPU needed) with the
    num_warps the host would pick, check its PTX, and report registers per thread.
    Needs real Triton JIT functions: run it without TRITON_INTERPRET."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    if triton.knobs.runtime.interpret:
        raise RuntimeError("ptx_audit compiles real kernels: unset TRITON_INTERPRET first")
    from aqsgd.quant import triton_kernels as kernels

    log = log or _Log()
    target = GPUTarget("cuda", arch, 32)
    per_thread = kernels._TILES["cuda"].elems_per_thread
    records = []
    for name, ptrs, consts in _audit_variants():
        fn = getattr(kernels, name)
        sig = {a: "constexpr" if a in consts else ptrs.get(a, "i32") for a in fn.arg_names}
        warps = min(32, max(1, _tile_elems(consts) // (32 * per_thread)))
        t0 = time.perf_counter()
        compiled = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts),
                                  target=target,
                                  options={"num_warps": warps, "enable_fp_fusion": False})
        ptx = compiled.asm["ptx"]
        found = {what: len(re.findall(pat, ptx)) for what, pat in _FORBIDDEN_PTX.items()}
        rec = {"kernel": name, "constexprs": consts, "arch": f"sm_{arch}", "num_warps": warps,
               "compile_s": round(time.perf_counter() - t0, 2),
               "ptx_lines": ptx.count("\n"), "forbidden": found,
               **_resource_usage(compiled.asm.get("cubin", b"")),
               "ok": not any(found.values()) and bool(compiled.asm.get("cubin"))}
        log(f"  ptx {'ok  ' if rec['ok'] else 'FAIL'} {name} warps={warps} "
            f"regs={rec.get('registers')} local={rec.get('local_bytes')} {consts} {found}")
        records.append(rec)
    return records


# ---------------------------------------------------------------------------- bit-exactness


def _sample(shape, dtype: torch.dtype, seed: int, device) -> torch.Tensor:
    # Activation-like: channel magnitudes over four decades plus sparse outliers.
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * torch.logspace(-2, 2, shape[-1])
    x.view(-1)[:: max(1, x.numel() // 7)] *= 30.0
    return x.to(device=device, dtype=dtype)


_BITS_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _mismatches(a: torch.Tensor, b: torch.Tensor) -> int:
    """Elements whose bit patterns differ (-1 when shape or dtype differ)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return -1
    if a.dtype.is_floating_point:
        a, b = a.view(_BITS_VIEW[a.element_size()]), b.view(_BITS_VIEW[b.element_size()])
    return int((a != b).sum())


def _ulps16(a: torch.Tensor, b: torch.Tensor) -> int:
    d = a.view(torch.int16).to(torch.int32) - b.view(torch.int16).to(torch.int32)
    return int(d.abs().max()) if d.numel() else 0


def check_case(case: Case, device: torch.device, triton_backend: str = "triton") -> dict:
    """Triton against torch on `device` (and torch on `device` against torch on CPU):
    quantize_packed, dequantize_packed, and three fused encode/decode steps."""
    from aqsgd import quant

    cfg = quant.QuantConfig(**case.quant)
    l2 = cfg.scale_method == "l2"
    x0 = _sample(case.shape, _DTYPES[case.x_dtype], 1, device)
    gen = lambda: torch.Generator().manual_seed(17)  # same seed draw on both paths
    t0 = time.perf_counter()
    res = {"case": case.label, "elements": x0.numel(), "device": str(device)}
    bad: dict[str, int] = {}

    def compare(what, got, want, fp16_scales=False):
        if fp16_scales and l2:  # documented: l2 scales may differ by one fp16 ulp
            ulps = _ulps16(got, want)
            res[f"{what}_ulps"] = ulps
            if ulps > 1:
                bad[what] = ulps
            return
        n = _mismatches(got, want)
        if n:
            bad[what] = n

    p_k, s_k = quant.quantize_packed(x0, cfg, generator=gen(), backend=triton_backend)
    p_t, s_t = quant.quantize_packed(x0, cfg, generator=gen(), backend="torch")
    compare("scales", s_k, s_t, fp16_scales=True)
    if not l2 or _mismatches(s_k, s_t) == 0:
        compare("packed", p_k, p_t)
    if device.type != "cpu":
        p_c, s_c = quant.quantize_packed(x0.cpu(), cfg, generator=gen(), backend="torch")
        compare("scales_vs_cpu", s_k.cpu(), s_c, fp16_scales=True)
        if not l2 or _mismatches(s_k.cpu(), s_c) == 0:
            compare("packed_vs_cpu", p_k.cpu(), p_c)
    for dt in sorted({case.x_dtype, "fp32"}):
        d_k = quant.dequantize_packed(p_k, s_k, x0.shape, cfg, dtype=_DTYPES[dt],
                                      backend=triton_backend)
        d_t = quant.dequantize_packed(p_k, s_k, x0.shape, cfg, dtype=_DTYPES[dt],
                                      backend="torch")
        compare(f"dequantized_{dt}", d_k, d_t)

    m_dtype = _DTYPES[case.m_dtype]
    m_send = torch.zeros(case.shape, dtype=m_dtype, device=device)
    m_recv, m_ref = m_send.clone(), m_send.clone()
    drift = _sample(case.shape, torch.float32, 2, device)
    for step in range(3):
        x = (x0.float() + 0.01 * step * drift).to(x0.dtype)
        seed_gen = lambda s=step: torch.Generator().manual_seed(100 + s)
        enc_k = quant.aqsgd_encode(x, m_send, cfg, generator=seed_gen(), backend=triton_backend)
        enc_t = quant.aqsgd_encode(x, m_ref, cfg, generator=seed_gen(), backend="torch")
        compare(f"encode{step}_scales", enc_k[1], enc_t[1], fp16_scales=True)
        if l2 and _mismatches(enc_k[1], enc_t[1]):
            m_ref.copy_(m_send)  # l2: scales may differ, so resynchronise the reference
        else:
            compare(f"encode{step}_packed", enc_k[0], enc_t[0])
            compare(f"encode{step}_cache", m_send, m_ref)
        quant.aqsgd_decode(enc_k[0], enc_k[1], m_recv, cfg, backend=triton_backend)
        compare(f"decode{step}_receiver_vs_sender", m_recv, m_send)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    res.update(mismatches=bad, ok=not bad, seconds=round(time.perf_counter() - t0, 3))
    return res


# ---------------------------------------------------------------------------- bandwidth


def _time_ms(fn, device: torch.device, reps: int) -> list[float]:
    """Milliseconds of each of `reps` calls after one warm-up (CUDA events on a GPU)."""
    fn()
    if device.type != "cuda":
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return times
    start = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    stop = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    torch.cuda.synchronize(device)
    for a, b in zip(start, stop, strict=True):
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize(device)
    return [a.elapsed_time(b) for a, b in zip(start, stop, strict=True)]


def bandwidth(device: torch.device, shape=LARGE_SHAPE, reps: int = 20) -> list[dict]:
    """GB/s of ideal traffic (each tensor read or written once) for each Triton op;
    the copy row is torch's device-to-device copy of x, the practical ceiling."""
    from aqsgd import quant
    from aqsgd.quant import triton_kernels as kernels

    n = math.prod(shape)
    x = _sample(shape, torch.float32, 3, device)
    m = _sample(shape, torch.float16, 4, device) * 0.5
    rows = []
    copy_ms = _time_ms(lambda: x.clone(), device, reps)
    rows.append(_bw_row("copy fp32 (ceiling)", "-", 8 * n, copy_ms))
    for fields in (dict(bits=4), dict(bits=4, granularity="token"),
                   dict(bits=2, granularity="group", group_size=128, rounding="stochastic")):
        cfg = quant.QuantConfig(**fields)
        label = ",".join(f"{k}={v}" for k, v in fields.items())
        packed, scales = kernels.quantize_packed(x, cfg, 5)
        code_b = packed.numel() + 2 * scales.numel()
        ops = [
            ("quantize_packed fp32", lambda c=cfg: kernels.quantize_packed(x, c, 5),
             4 * n + code_b),
            ("dequantize_packed ->fp32",
             lambda c=cfg, p=packed, s=scales: kernels.dequantize_packed(p, s, shape, c),
             code_b + 4 * n),
            ("aqsgd_encode x fp32, m fp16",
             lambda c=cfg: kernels.aqsgd_encode(x, m, c, 5), 4 * n + 2 * n + 2 * n + code_b),
            ("aqsgd_decode m fp16",
             lambda c=cfg, p=packed, s=scales: kernels.aqsgd_decode(p, s, m, c),
             code_b + 2 * n + 2 * n),
        ]
        for name, fn, nbytes in ops:
            rows.append(_bw_row(name, label, nbytes, _time_ms(fn, device, reps)))
    for r in rows:
        r["pct_of_copy"] = round(100.0 * r["gb_per_s"] / rows[0]["gb_per_s"], 1)
    return rows


def _bw_row(op: str, cfg: str, nbytes: int, ms: list[float]) -> dict:
    ms_sorted = sorted(ms)
    med = ms_sorted[len(ms) // 2]
    return {"op": op, "config": cfg, "bytes": nbytes, "median_ms": round(med, 4),
            "p20_ms": round(ms_sorted[len(ms) // 5], 4),
            "p80_ms": round(ms_sorted[(4 * len(ms)) // 5 - 1], 4),
            "gb_per_s": round(nbytes / med / 1e6, 1)}  # fmt: skip


# ---------------------------------------------------------------------------- pipeline


def pipeline_check(device: torch.device, steps: int = 3) -> dict:
    """aqsgd.compress.activation sender/receiver pair on `device` against the same pair on CPU:
    the stage inputs the receivers return must agree bit for bit (max-abs scales)."""
    from aqsgd.compress import activation as compress

    cfg = compress.CompressionConfig(mode="aqsgd", bits=4, warmup_epochs=0, first_visit="zero")
    shape = (64, 1600)  # (L, D) per sample
    pairs = {}
    for label, where in (("device", device), ("cpu", torch.device("cpu"))):
        pairs[label] = (where, [compress.make_compressor(cfg, role, shape, 8, where, 7)
                                for role in ("send", "recv")])  # fmt: skip
        for c in pairs[label][1]:
            c.set_epoch(1)
    ids = torch.tensor([1, 5])
    worst = 0
    for step in range(steps):
        x = _sample((2, *shape), torch.float32, 10 + step, "cpu")
        outs = {}
        for label, (where, (send, recv)) in pairs.items():
            msg = send.encode(x.to(where), ids)
            outs[label] = recv.decode([t.to(where) for t in msg], ids).float().cpu()
        worst = max(worst, _mismatches(outs["device"], outs["cpu"]))
    return {"steps": steps, "mismatched_elements": worst, "ok": worst == 0}


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
    p.add_argument("--skip-pipeline", action="store_true", help="no compressor round trip")
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
    for r in rows or []:
        log(f"  {r['op']:<30} {r['config']:<45} {r['median_ms']:>9.4f} ms "
            f"{r['gb_per_s']:>8.1f} GB/s {r['pct_of_copy']:>6.1f}% of copy")


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
        print("bench.micro.gpu_check: no CUDA device here (torch.cuda.is_available() is False); "
              "run it on a machine with a CUDA GPU, or use --ptx-audit", file=sys.stderr)
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
    if not args.skip_bench:
        stages["bench_kernels"] = (lambda: _bench_kernels(out, args.smoke, log, device),
                                   lambda res: res is not None)
    if not args.skip_pipeline:
        stages["pipeline"] = (lambda: pipeline_check(device), lambda res: bool(res and res["ok"]))
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
