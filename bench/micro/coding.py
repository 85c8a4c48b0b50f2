"""CPU coding cost per element: today's torch path against the fused kernels, beside the
copy limit for the same bytes.

    python -m bench.micro.coding                       # 1x1024x1600 and 16x64x128, bits 2 4 8
    python -m bench.micro.coding --smoke               # a tiny shape, seconds (the test suite)
    python -m bench.micro.coding --rounding stochastic --json results/coding.json

Modes `fp32` (pass-through), `directq` and `aqsgd` b-bit in the compressor's default
quantizer; paths `torch` (aqsgd.quant.cpu) and `fused` (aqsgd.quant.fused); `copy` is
one memmove of the bytes the op reads and writes. ns per element is the median of
`--repeats` rounds, cases in a rotating order; `--keep-heap` keeps glibc from returning
memory (first-touch faults). What each mode times and why: docs/micro.md, "Coding".
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from aqsgd import quant
from aqsgd.quant import fused
from bench.micro.console import new_table, print_table

__all__ = ["MODES", "PATHS", "Row", "main", "op_cases", "run"]

SHAPES = {"paper": (1, 1024, 1600), "tiny": (16, 64, 128)}  # GPT2-XL boundary, tiny preset
SMOKE_SHAPE = (2, 16, 64)
BITS = (2, 4, 8)
MODES = ("fp32", "directq", "aqsgd")
PATHS = ("torch", "fused", "copy")
CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}
CACHE_DTYPES = {"fp32": torch.float32, "fp16": torch.float16}


@dataclass(frozen=True)
class Row:
    """One op of one mode on one path; ns_* per element, p10 <= median <= p90."""

    shape: str
    mode: str
    bits: int | None
    op: str  # encode | decode
    path: str  # torch | fused | copy
    bytes_read: int
    bytes_written: int
    ns_median: float
    ns_p10: float
    ns_p90: float


@dataclass
class OpCase:
    """The calls of one op per path (inputs built outside the timing) and the bytes the op
    must read and write. AQ-SGD's calls update their cache in place, call after call, as
    a pipeline does: the work does not depend on the values (no branch on them), and the
    cache stays as warm as the other operands and the copy's buffers."""

    mode: str
    bits: int | None
    op: str
    calls: dict[str, Callable[[], object]]
    bytes_read: int
    bytes_written: int


def _copy_call(nbytes: int) -> Callable[[], object]:
    """A plain memory copy of nbytes between two buffers of this process."""
    src = torch.ones(max(1, nbytes), dtype=torch.uint8)
    dst = torch.zeros_like(src)
    return lambda: ctypes.memmove(dst.data_ptr(), src.data_ptr(), nbytes)


def op_cases(shape: tuple[int, ...], mode: str, bits: int | None, rounding: str,
             cache_dtype: torch.dtype, paths: tuple[str, ...]) -> list[OpCase]:
    """The encode and decode cases of one mode (bits None for fp32) on `paths`."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g)
    n = x.numel()
    if mode == "fp32":
        wire, out = torch.empty_like(x), torch.empty_like(x)
        return [OpCase(mode, None, "encode", {"torch": lambda: wire.copy_(x)}, 4 * n, 4 * n),
                OpCase(mode, None, "decode", {"torch": lambda: out.copy_(wire)}, 4 * n, 4 * n)]
    cfg = quant.QuantConfig(bits=bits, rounding=rounding)
    gen = torch.Generator().manual_seed(1) if cfg.stochastic else None
    backend = {"torch": "torch", "fused": "auto"}
    packed, scales = quant.quantize_packed(x, cfg, gen)
    coded = packed.numel() + 2 * scales.numel()
    if mode == "directq":
        enc = {p: (lambda b=backend[p]: quant.quantize_packed(x, cfg, gen, backend=b))
               for p in paths}
        dec = {p: (lambda b=backend[p]: quant.dequantize_packed(packed, scales, shape, cfg,
                                                                backend=b)) for p in paths}
        return [OpCase(mode, bits, "encode", enc, 4 * n, coded),
                OpCase(mode, bits, "decode", dec, coded, 4 * n)]
    m0 = (x + 0.1 * torch.randn(shape, generator=g)).to(cache_dtype)  # last visit's x
    m_send, m_recv = m0.clone(), m0.clone()
    mb = n * m0.element_size()
    enc = {p: (lambda b=backend[p]: quant.aqsgd_encode(x, m_send, cfg, gen, backend=b))
           for p in paths}
    dec = {p: (lambda b=backend[p]: quant.aqsgd_decode(packed, scales, m_recv, cfg, backend=b))
           for p in paths}
    return [OpCase(mode, bits, "encode", enc, 4 * n + mb, mb + coded),
            OpCase(mode, bits, "decode", dec, coded + mb, mb)]


def _time_cases(cases: list[OpCase], repeats: int, clock: Callable[[], float]
                ) -> dict[tuple[int, str], list[float]]:
    """Seconds per call of every (case index, path), copy included, rounds interleaved."""
    items = []
    for i, case in enumerate(cases):
        copy = _copy_call((case.bytes_read + case.bytes_written) // 2)
        items += [(i, p, call) for p, call in case.calls.items()]
        items.append((i, "copy", copy))
    times = {(i, p): [] for i, p, _ in items}
    for _, _, call in items:  # warm-up: first-touch pages, lazy tables and builds
        call()
        call()
    for r in range(repeats):
        k = r % len(items)
        for i, p, call in items[k:] + items[:k]:
            t0 = clock()
            call()
            times[(i, p)].append(clock() - t0)
    return times


def _quantile(ts: list[float], q: float) -> float:
    s = sorted(ts)
    return s[min(len(s) - 1, int(q * len(s)))]


def run(shapes: dict[str, tuple[int, ...]], bits: tuple[int, ...], repeats: int,
        rounding: str, cache_dtype: torch.dtype, clock: str) -> list[Row]:
    """Rows of every shape, mode, bit width, op and path (fused only where it builds)."""
    paths = ("torch", "fused") if fused.available() else ("torch",)
    rows = []
    for shape in shapes.values():
        cases = op_cases(shape, "fp32", None, rounding, cache_dtype, paths)
        for mode in MODES[1:]:
            for b in bits:
                cases += op_cases(shape, mode, b, rounding, cache_dtype, paths)
        n = math.prod(shape)
        for (i, path), ts in _time_cases(cases, repeats, CLOCKS[clock]).items():
            c = cases[i]
            ns = [1e9 * t / n for t in ts]
            rows.append(Row("x".join(map(str, shape)), c.mode, c.bits, c.op, path,
                            c.bytes_read, c.bytes_written, statistics.median(ns),
                            _quantile(ns, 0.1), _quantile(ns, 0.9)))
    return rows


def _keep_heap() -> None:
    """Ask glibc to keep freed memory mapped: no trimming, no mmap below 32 MiB."""
    libc = ctypes.CDLL(None)
    m_trim_threshold, m_mmap_threshold = -1, -3
    if not (libc.mallopt(m_trim_threshold, 2**30) and libc.mallopt(m_mmap_threshold, 2**25)):
        raise RuntimeError("mallopt refused M_TRIM_THRESHOLD or M_MMAP_THRESHOLD")


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a / b


def _table_row(cell: dict, shape: str, mode: str, bits: int | None) -> list[str]:
    """Encode and decode per path, their sums, fused against copy and torch against fused."""
    def get(op: str, path: str) -> float | None:
        return cell.get((shape, mode, bits, op, path))

    def both(path: str) -> float | None:
        enc, dec = get("encode", path), get("decode", path)
        return None if enc is None or dec is None else enc + dec

    ops = [get(op, p) for op in ("encode", "decode") for p in ("torch", "fused")]
    sums = [both("torch"), both("fused"), both("copy")]
    return [shape, mode, "-" if bits is None else str(bits), *map(_fmt, ops + sums),
            _fmt(_ratio(sums[1], sums[2])), _fmt(_ratio(sums[0], sums[1]))]


def _print(rows: list[Row], meta: dict) -> None:
    print(f"coding: ns per element, median of {meta['repeats']} rounds, torch threads="
          f"{meta['threads']}, clock={meta['clock']}, rounding={meta['rounding']}, "
          f"cache {meta['cache_dtype']}, keep-heap {meta['keep_heap']}, {meta['cpu']}")
    print(f"fused: {meta['fused']}")
    cell = {(r.shape, r.mode, r.bits, r.op, r.path): r.ns_median for r in rows}
    cols = ("shape", "mode", "bits", "enc torch", "enc fused", "dec torch", "dec fused",
            "e+d torch", "e+d fused", "e+d copy", "fused/copy", "torch/fused")
    table = new_table(*cols, numeric=cols[2:])
    for shape, mode, bits in dict.fromkeys((r.shape, r.mode, r.bits) for r in rows):
        table.add_row(*_table_row(cell, shape, mode, bits))
    print_table(table)


def _cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main(argv: list[str] | None = None) -> list[Row]:
    p = argparse.ArgumentParser(prog="python -m bench.micro.coding", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help=f"shape {SMOKE_SHAPE}, 2 bits, 3 rounds")
    p.add_argument("--repeats", type=int, default=21, help="timed rounds (default 21)")
    p.add_argument("--bits", type=int, nargs="+", default=list(BITS), help="default: 2 4 8")
    p.add_argument("--rounding", choices=quant.ROUNDINGS, default="nearest",
                   help="default: nearest, the compressor's default")
    p.add_argument("--cache-dtype", choices=tuple(CACHE_DTYPES), default="fp32",
                   help="AQ-SGD cache dtype (default fp32, what the CPU compressor passes)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--clock", choices=tuple(CLOCKS), default="wall",
                   help="wall clock (default) or the thread's CPU time")
    p.add_argument("--keep-heap", action="store_true",
                   help="glibc keeps freed memory (no first-touch page faults of fresh outputs)")
    p.add_argument("--json", default=None, help="write rows and provenance here")
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error(f"--repeats must be >= 1, got {args.repeats}")
    shapes = {"smoke": SMOKE_SHAPE} if args.smoke else SHAPES
    bits = (2,) if args.smoke else tuple(args.bits)
    repeats = 3 if args.smoke else args.repeats
    if args.keep_heap:
        _keep_heap()
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        rows = run(shapes, bits, repeats, args.rounding, CACHE_DTYPES[args.cache_dtype],
                   args.clock)
    finally:
        torch.set_num_threads(threads)
    meta = {"torch": torch.__version__, "cpu": _cpu_model(),
            "threads": args.threads, "clock": args.clock, "repeats": repeats,
            "rounding": args.rounding, "cache_dtype": args.cache_dtype,
            "keep_heap": args.keep_heap, "fused": fused.status()}
    _print(rows, meta)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": [asdict(r) for r in rows]}, f, indent=2)
    return rows


if __name__ == "__main__":
    main()
