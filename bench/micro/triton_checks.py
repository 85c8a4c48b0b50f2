"""The checks of the Triton quantizer path that need a device: exactness, bandwidth, pipeline.

- `check_case`: Triton against torch on one device (and torch there against torch on
  CPU): quantize_packed, dequantize_packed in two dtypes and three fused AQ-SGD
  encode/decode steps, every byte equal (l2 scales: at most one fp16 ulp apart).
  CPU_CASES also run on CPU through the Triton interpreter
  (tests/bench/micro/test_gpu_check.py).
- `bandwidth`: GB/s of ideal traffic of each Triton op, beside a device-to-device copy.
- `pipeline_check`: aqsgd.compress.activation sender and receiver on the device against
  the same pair on CPU.
`python -m bench.micro.gpu_check` runs them and writes the report.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch

__all__ = ["CASES", "CPU_CASES", "LARGE_SHAPE", "PAPER_SHAPE", "SMOKE_CASES", "Case",
           "bandwidth", "check_case", "pipeline_check"]


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
# (tests/bench/micro/test_gpu_check.py), so the script's own checks are exercised without a
# GPU.
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


def check_case(case: Case, device: torch.device) -> dict:
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

    p_k, s_k = quant.quantize_packed(x0, cfg, generator=gen(), backend="triton")
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
                                      backend="triton")
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
        enc_k = quant.aqsgd_encode(x, m_send, cfg, generator=seed_gen(), backend="triton")
        enc_t = quant.aqsgd_encode(x, m_ref, cfg, generator=seed_gen(), backend="torch")
        compare(f"encode{step}_scales", enc_k[1], enc_t[1], fp16_scales=True)
        if l2 and _mismatches(enc_k[1], enc_t[1]):
            m_ref.copy_(m_send)  # l2: scales may differ, so resynchronise the reference
        else:
            compare(f"encode{step}_packed", enc_k[0], enc_t[0])
            compare(f"encode{step}_cache", m_send, m_ref)
        quant.aqsgd_decode(enc_k[0], enc_k[1], m_recv, cfg, backend="triton")
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
    from aqsgd.quant import triton_launch as kernels

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
    from aqsgd import quant
    from aqsgd.compress import activation as compress
    from aqsgd.compress.message import CompressionConfig

    cfg = CompressionConfig(mode="aqsgd", quant=quant.QuantConfig(bits=4), warmup_epochs=0,
                            first_visit="zero")
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
