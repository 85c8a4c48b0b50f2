"""Encode+decode cost and wire bytes of every pipeline compressor, and cache memory.

    python -m bench.micro.compressors    # tiny preset shape and the paper's (1, 1024, 1600)
    python -m bench.micro.compressors --smoke          # seconds; what the test suite runs
    python -m bench.micro.compressors --out results/compressors.json

For each mode and bit width it times one steady-state micro-batch (after the warm-up
visit has filled the caches): encode on the sender plus decode on the receiver, median
and 10th-90th percentile over ``--repeats`` runs (bench.micro.timing). ``ratio_1gbit`` is
that time divided by the time the uncompressed fp32 message would take on a 1 Gbit/s link
(below 1: the compressor pays for itself at that rate). The cache table gives stored bytes
per element (scales included) and the time to gather one micro-batch's rows from memory
and from an mmap file, which is what a prefetch thread could hide.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch

from aqsgd.compress.activation import make_compressor
from aqsgd.compress.cache import ActivationCache, CacheSpec
from aqsgd.compress.message import CompressionConfig
from aqsgd.compress.registry import ACTIVATION_MODES
from aqsgd.compress.wire import message_nbytes, shape_prefix
from aqsgd.quant import QuantConfig
from bench.micro.console import new_table, print_table
from bench.micro.timing import Timer

__all__ = ["main", "bench_compressor", "bench_cache", "default_shapes"]

LINK_BIT_PER_S = 1e9  # the comparison link: 1 Gbit/s, a slow network of the kind AQ-SGD targets

# (mode, transport dtype, bits): every registered activation mode's cases
FULL_CASES = [(name, dtype, bits) for name, mode in ACTIVATION_MODES.items()
              for dtype, bits in mode.bench_cases]
SMOKE_CASES = [(name, *mode.smoke_case) for name, mode in ACTIVATION_MODES.items()]


def default_shapes(smoke: bool) -> dict[str, tuple[int, int, int]]:
    """Micro-batch activation shapes (B, L, D): the tiny preset's and the paper's."""
    if smoke:
        return {"smoke": (2, 8, 16)}
    from aqsgd.model.config import PRESETS, TINY_PIPELINE

    tiny = PRESETS["tiny"]
    tiny_shape = (TINY_PIPELINE.micro_batch_size, tiny.seq_len, tiny.n_embd)
    return {"tiny": tiny_shape, "paper": (1, 1024, 1600)}


def bench_compressor(mode: str, dtype: str, bits: int, shape, repeats: int) -> dict:
    """Steady-state encode+decode of one micro-batch (B, L, D) with ids 0..B-1."""
    b = shape[0]
    cfg = CompressionConfig(mode=mode, dtype=dtype, quant=QuantConfig(bits=min(bits, 8)),
                            warmup_epochs=1, cache_bits=4)  # fmt: skip
    send = make_compressor(cfg, "send", shape[1:], b, seed=0)
    recv = make_compressor(cfg, "recv", shape[1:], b, seed=1)
    ids = torch.arange(b)
    x = torch.randn(shape)
    recv.decode(send.encode(x, ids), ids)  # warm-up visit: fills both caches
    send.set_epoch(1)
    recv.set_epoch(1)
    timer = Timer("wall")
    for _ in timer.rounds(repeats, warmup=0):  # the warm-up visit above was the warm-up
        x = x + 0.01 * torch.randn(shape)  # the activation drifts a little between visits
        with timer.phase("encode+decode"):
            msg = send.encode(x, ids)
            recv.decode(msg, ids)
    nbytes = message_nbytes(msg)
    if cfg.sized_by_data:  # sent length-first (as the pipeline does): its prefix travels too
        nbytes += message_nbytes([shape_prefix(msg)])
    send.close()
    recv.close()
    times = timer.samples("encode+decode")
    med, p10, p90 = times.median_s, times.quantile_s(0.1), times.quantile_s(0.9)
    fp32_link_s = b * shape[1] * shape[2] * 4 * 8 / LINK_BIT_PER_S
    return {
        "mode": mode, "dtype": dtype, "bits": bits if ACTIVATION_MODES[mode].codes_rows else None,
        "shape": list(shape), "wire_bytes": nbytes,
        "wire_bytes_fp32": b * shape[1] * shape[2] * 4,
        "encode_decode_ms": 1e3 * med, "p10_ms": 1e3 * p10, "p90_ms": 1e3 * p90,
        "ratio_1gbit": med / fp32_link_s,
    }


def bench_cache(dtype: str, bits: int, shape, repeats: int, directory: str) -> dict:
    """Bytes per element, and gather time of one micro-batch from memory and from mmap."""
    b, sample = shape[0], shape[1:]
    num_samples = 4 * b
    out = {"cache_dtype": dtype if dtype != "quant" else f"quant{bits}", "shape": list(shape)}
    for storage in ("memory", "mmap"):
        spec = CacheSpec(num_samples=num_samples, sample_shape=sample, dtype=dtype, bits=bits,
                         storage=storage, directory=directory if storage == "mmap" else None)
        with ActivationCache(spec) as cache:
            out["bytes_per_element"] = spec.bytes_per_element()
            cache.scatter(torch.arange(num_samples), torch.randn(num_samples, *sample))
            timer = Timer("wall")
            for _ in timer.rounds(repeats, warmup=0):
                ids = torch.randperm(num_samples)[:b]
                with timer.phase("gather"):
                    cache.gather(ids)
            out[f"gather_{storage}_ms"] = 1e3 * timer.samples("gather").median_s
    return out


def _print_tables(rows: list[dict], cache_rows: list[dict], threads: int) -> None:
    print(f"compressors: steady-state encode+decode per micro-batch, torch threads={threads}")
    table = new_table("shape", "mode", "bits", "wire bytes", "x fp32", "enc+dec ms",
                      "p10-p90 ms", "/1Gbit fp32", numeric=("shape", "mode", "bits",
                      "wire bytes", "x fp32", "enc+dec ms", "/1Gbit fp32"))  # fmt: skip
    for r in rows:
        # a mode that codes no rows is named by its transport dtype: none-fp16
        name = r["mode"] if r["bits"] is not None else f"{r['mode']}-{r['dtype']}"
        table.add_row(
            "x".join(map(str, r["shape"])), name, "-" if r["bits"] is None else str(r["bits"]),
            str(r["wire_bytes"]), f"{r['wire_bytes'] / r['wire_bytes_fp32']:.4f}",
            f"{r['encode_decode_ms']:.2f}", f"{r['p10_ms']:.2f}-{r['p90_ms']:.2f}",
            f"{r['ratio_1gbit']:.3f}",
        )
    print_table(table)
    print()
    print("activation cache: stored bytes per element and gather of one micro-batch")
    table = new_table("shape", "cache", "bytes/elem", "gather mem ms", "gather mmap ms",
                      numeric=("shape", "cache", "bytes/elem", "gather mem ms",
                               "gather mmap ms"))  # fmt: skip
    for r in cache_rows:
        table.add_row("x".join(map(str, r["shape"])), r["cache_dtype"],
                      f"{r['bytes_per_element']:.4f}", f"{r['gather_memory_ms']:.3f}",
                      f"{r['gather_mmap_ms']:.3f}")  # fmt: skip
    print_table(table)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m bench.micro.compressors", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="tiny shapes, 2 repeats")
    p.add_argument("--repeats", type=int, default=11, help="timed runs per case (default 11)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="where the mmap cache case puts its files (default: a fresh temporary "
                        "directory, removed on exit)")
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error(f"--repeats must be >= 1, got {args.repeats}")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    repeats = 2 if args.smoke else args.repeats
    cases = SMOKE_CASES if args.smoke else FULL_CASES
    rows, cache_rows = [], []
    parent = str(args.cache_dir) if args.cache_dir is not None else None
    with tempfile.TemporaryDirectory(prefix="aqsgd-bench-cache-", dir=parent) as cache_dir:
        for shape in default_shapes(args.smoke).values():
            rows += [bench_compressor(m, d, b, shape, repeats) for m, d, b in cases]
            for dtype, bits in (("fp32", 0), ("fp16", 0), ("quant", 2), ("quant", 4),
                                ("quant", 8)):  # fmt: skip
                cache_rows.append(bench_cache(dtype, max(bits, 1), shape, repeats, cache_dir))
    result = {"threads": args.threads, "repeats": repeats, "link_bit_per_s": LINK_BIT_PER_S,
              "compressors": rows, "cache": cache_rows}  # fmt: skip
    _print_tables(rows, cache_rows, args.threads)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
