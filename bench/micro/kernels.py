"""Quantizer benchmark: GB/s per op and path, beside the plain-torch reference as baseline.

    python -m bench.micro.kernels                    # paper shape 1x1024x1600, bits 2 3 4 8
    python -m bench.micro.kernels --smoke            # tiny shape, a few seconds
    python -m bench.micro.kernels --bits 4 --sizes 1x1024x1600,8x1024x1600 --json out.json

GB/s = (bytes read + bytes written) / time of one call; median, p20 and p80 over
`--repeats` calls. Paths: `naive` (aqsgd.quant.reference: the contract in plain torch,
one op per step, every element's scale looked up by index, bits packed one by one; the
same bytes as the other paths), `torch` (aqsgd.quant's chunked torch path,
aqsgd.quant.cpu) and, on CUDA with Triton, `triton`. Calls of the paths are interleaved in a
rotating order, so load on the machine and cold caches hit them alike; `x naive` is the
naive median time over the path's.
Default config: per-channel max-abs scales, reference grid, round to nearest; one CPU
thread (`--threads`), wall clock (`--clock cpu` for process CPU time on a busy machine).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import torch
from rich.table import Table

from aqsgd import quant
from aqsgd.quant import reference
from bench.micro.console import new_table, print_table

__all__ = ["OPS", "Row", "main", "rows_table", "run"]

PAPER_SHAPE = (1, 1024, 1600)  # GPT2-XL micro-batch: (batch, sequence, hidden)
LARGE_SHAPE = (64, 1024, 1024)  # 64M elements, CUDA only
SMOKE_SHAPE = (2, 16, 64)
OPS = ("quantize+pack", "unpack+dequantize", "aqsgd encode", "aqsgd decode")


# ---------------------------------------------------------------------------
# Cases and timing
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One table row; gbps_* from bytes_moved / seconds, p20 <= median <= p80."""

    device: str
    shape: str
    bits: int
    op: str
    path: str
    bytes_moved: int
    ms_median: float
    gbps_median: float
    gbps_p20: float
    gbps_p80: float
    speedup_vs_naive: float | None


def _op_calls(op: str, path: str, x: torch.Tensor, cfg: quant.QuantConfig
              ) -> tuple[Callable[[], object], int]:
    """(call, bytes moved) of one op on one path; inputs are built here, outside timing."""
    n = x.numel()
    packed, scales = quant.quantize_packed(x, cfg, backend="torch")
    moved_codes = packed.numel() + 2 * scales.numel()
    m = torch.zeros_like(x)
    naive = path == "naive"  # round to nearest: the reference's seed is unused
    if op == "quantize+pack":
        call = (lambda: reference.quantize_packed(x, cfg)) if naive else \
            (lambda: quant.quantize_packed(x, cfg, backend=path))
        return call, n * x.element_size() + moved_codes
    if op == "unpack+dequantize":
        call = (lambda: reference.dequantize_packed(packed, scales, x.shape, cfg)) if naive \
            else (lambda: quant.dequantize_packed(packed, scales, x.shape, cfg, backend=path))
        return call, moved_codes + 4 * n
    if op == "aqsgd encode":
        call = (lambda: reference.aqsgd_encode(x, m, cfg)) if naive else \
            (lambda: quant.aqsgd_encode(x, m, cfg, backend=path))
        return call, n * x.element_size() + 2 * n * m.element_size() + moved_codes
    call = (lambda: reference.aqsgd_decode(packed, scales, m, cfg)) if naive else \
        (lambda: quant.aqsgd_decode(packed, scales, m, cfg, backend=path))
    return call, moved_codes + 2 * n * m.element_size()


def _timer(device: torch.device, clock: str) -> Callable[[Callable[[], object]], float]:
    """Seconds of one call: wall (perf_counter) or process CPU time on CPU; CUDA events,
    synchronized, on CUDA."""
    if device.type != "cuda":
        now = time.process_time if clock == "cpu" else time.perf_counter

        def cpu(call):
            t0 = now()
            call()
            return now() - t0
        return cpu

    def cuda(call):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(device)
        start.record()
        call()
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop) / 1e3
    return cuda


def _quantile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]


def _paths(device: torch.device) -> list[str]:
    paths = ["naive", "torch"]
    if device.type == "cuda":
        try:
            import triton  # noqa: F401  (the triton path needs it)
            paths.append("triton")
        except ImportError:
            pass
    return paths


def run(shapes: Sequence[tuple[int, ...]], bits_list: Sequence[int], repeats: int,
        device: torch.device, clock: str = "wall") -> list[Row]:
    """Times every (shape, bits, op, path) on `device`; calls of the paths interleave."""
    timer, paths, rows = _timer(device, clock), _paths(device), []
    for shape in shapes:
        x = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(device)
        for bits in bits_list:
            cfg = quant.QuantConfig(bits=bits)
            for op in OPS:
                calls = {p: _op_calls(op, p, x, cfg) for p in paths}
                times = {p: [] for p in paths}
                for call, _ in calls.values():
                    call()  # warm-up (and Triton compilation)
                for i in range(repeats):
                    # rotate the order, so each path runs equally often right after
                    # another one has pushed x out of the cache
                    for p in paths[i % len(paths):] + paths[:i % len(paths)]:
                        times[p].append(timer(calls[p][0]))
                naive_ms = statistics.median(times["naive"]) * 1e3
                for p in paths:
                    moved, ms = calls[p][1], statistics.median(times[p]) * 1e3
                    rows.append(Row(
                        device=str(device), shape="x".join(map(str, shape)), bits=bits, op=op,
                        path=p, bytes_moved=moved, ms_median=ms,
                        gbps_median=moved / ms / 1e6,
                        gbps_p20=moved / _quantile(times[p], 0.8) / 1e9,
                        gbps_p80=moved / _quantile(times[p], 0.2) / 1e9,
                        speedup_vs_naive=None if p == "naive" else naive_ms / ms))
    return rows


def rows_table(rows: Sequence[Row]) -> Table:
    """The rows as a rich table: one line per (device, shape, bits, op, path)."""
    table = new_table("device", "shape", "bits", "op", "path", "ms", "GB/s", "p20", "p80",
                      "x naive", numeric=("bits", "ms", "GB/s", "p20", "p80", "x naive"))
    for r in rows:
        ratio = "" if r.speedup_vs_naive is None else f"{r.speedup_vs_naive:.2f}"
        table.add_row(r.device, r.shape, str(r.bits), r.op, r.path, f"{r.ms_median:.3f}",
                      f"{r.gbps_median:.2f}", f"{r.gbps_p20:.2f}", f"{r.gbps_p80:.2f}", ratio)
    return table


def _parse_shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(d) for d in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--sizes: shape like 1x1024x1600, got {text!r}") from None
    if len(shape) < 2 or min(shape) < 1:
        raise argparse.ArgumentTypeError(f"--sizes: need >= 2 positive dims, got {text!r}")
    return shape


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.micro.kernels",
                                description=__doc__.split("\n")[0])
    p.add_argument("--smoke", action="store_true",
                   help=f"tiny shape {SMOKE_SHAPE}, bits 2 and 3, 3 repeats, CPU only")
    p.add_argument("--sizes", type=lambda s: [_parse_shape(t) for t in s.split(",")],
                   help="comma-separated shapes, e.g. 1x1024x1600 (default: paper shape; "
                        "on CUDA also 64x1024x1024)")
    p.add_argument("--bits", type=int, nargs="+", default=[2, 3, 4, 8], choices=range(1, 9),
                   metavar="B", help="code widths (default: 2 3 4 8)")
    p.add_argument("--repeats", type=int, default=30, help="timed calls per path (default 30)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (default 1: pipeline workers run one thread each, "
                        "and on a shared, loaded machine multi-threaded runs of many small "
                        "ops are dominated by thread wake-ups)")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="CPU timings: wall time (default) or CPU time of the process, all "
                        "threads (steadier on a shared, loaded machine; = wall time when "
                        "running alone on 1 thread). CUDA always uses events.")
    p.add_argument("--json", metavar="OUT", help="also write the rows and meta data as JSON")
    return p


def main(argv: Sequence[str] | None = None) -> list[Row]:
    args = _parser().parse_args(argv)
    if args.repeats < 1:
        raise SystemExit(f"--repeats must be >= 1, got {args.repeats}")
    if args.threads < 1:
        raise SystemExit(f"--threads must be >= 1, got {args.threads}")
    devices = [torch.device("cpu")]
    if torch.cuda.is_available() and not args.smoke:
        devices.append(torch.device("cuda"))
    threads_before = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        rows = []
        for device in devices:
            if args.smoke:
                shapes, bits, repeats = [SMOKE_SHAPE], [2, 3], 3
            else:
                shapes = args.sizes or ([PAPER_SHAPE, LARGE_SHAPE] if device.type == "cuda"
                                        else [PAPER_SHAPE])
                bits, repeats = args.bits, args.repeats
            rows += run(shapes, bits, repeats, device, args.clock)
    finally:
        torch.set_num_threads(threads_before)
    print(f"torch {torch.__version__}, {args.threads} CPU threads, "
          f"{args.clock} clock on CPU"
          + (f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""))
    print_table(rows_table(rows))
    if args.json:
        meta = {"torch": torch.__version__, "threads": args.threads,
                "clock": args.clock,
                "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": [asdict(r) for r in rows]}, f, indent=1)
    return rows


if __name__ == "__main__":
    main()
