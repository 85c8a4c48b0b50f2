"""Quantizer benchmark: GB/s per op and path, beside a naive reference-style baseline.

    python -m bench.micro.kernels                    # paper shape 1x1024x1600, bits 2 3 4 8
    python -m bench.micro.kernels --smoke            # tiny shape, a few seconds
    python -m bench.micro.kernels --bits 4 --sizes 1x1024x1600,8x1024x1600 --json out.json

GB/s = (bytes read + bytes written) / time of one call; median, p20 and p80 over
`--repeats` calls. Paths: `naive` (the paper code's way in plain torch ops: separate
abs-max, divide, multiply, round, clip, offset, then pack), `torch` (aqsgd.quant's torch
path) and, on CUDA with Triton, `triton`. Calls of the paths are interleaved in a
rotating order, so load on the machine and cold caches hit them alike; `x naive` is the
naive median time over the path's.
Default config: per-channel max-abs scales, reference grid, round to nearest; one CPU
thread (`--threads`), wall clock (`--clock cpu` for process CPU time on a busy machine).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import torch

from aqsgd import quant

__all__ = ["Row", "main", "naive_pack", "naive_quantize_pack", "naive_unpack_dequantize", "run"]

PAPER_SHAPE = (1, 1024, 1600)  # GPT2-XL micro-batch: (batch, sequence, hidden)
LARGE_SHAPE = (64, 1024, 1024)  # 64M elements, CUDA only
SMOKE_SHAPE = (2, 16, 64)
OPS = ("quantize+pack", "unpack+dequantize", "aqsgd encode", "aqsgd decode")


# ---------------------------------------------------------------------------
# Naive baseline: the reference code's way, one torch op per step
# ---------------------------------------------------------------------------


def naive_pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Little-endian stream of uint8 codes (n,). Widths dividing 8 or-shift strided slices
    (as the reference does for 2/4/8 bits); others spread codes into bits and regroup."""
    if 8 % bits == 0:
        per = 8 // bits  # codes per byte; n must be a multiple
        c = codes.view(-1, per)
        out = c[:, 0].clone()
        for k in range(1, per):
            out |= c[:, k] << (k * bits)
        return out
    shifts = torch.arange(bits, dtype=torch.uint8, device=codes.device)
    bit = ((codes.unsqueeze(1) >> shifts) & 1).view(-1)  # (n * bits,)
    pad = -bit.numel() % 8
    bit = torch.cat([bit, bit.new_zeros(pad)]).view(-1, 8)
    weights = 2 ** torch.arange(8, device=codes.device)
    return (bit * weights).sum(1).to(torch.uint8)


def naive_unpack(packed: torch.Tensor, bits: int, n: int) -> torch.Tensor:
    if 8 % bits == 0:
        per = 8 // bits
        mask = (1 << bits) - 1
        parts = [(packed >> (k * bits)) & mask for k in range(per)]
        return torch.stack(parts, 1).view(-1)[:n]
    shifts = torch.arange(8, dtype=torch.uint8, device=packed.device)
    bit = ((packed.unsqueeze(1) >> shifts) & 1).view(-1)[: n * bits].view(n, bits)
    weights = 2 ** torch.arange(bits, device=packed.device)
    return (bit * weights).sum(1).to(torch.uint8)


def naive_quantize_pack(x: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel max-abs, reference grid, round to nearest even (torch.round)."""
    q = 2 ** (bits - 1)
    v = x.float()
    scale = v.abs().amax(dim=tuple(range(v.dim() - 1))).half()  # (D,) stored fp16
    t = v / scale.float()
    t = t * q
    t = t.round()
    t = t.clamp(-q, q - 1)
    codes = (t + q).to(torch.uint8)
    return naive_pack(codes.view(-1), bits), scale


def naive_unpack_dequantize(packed: torch.Tensor, scale: torch.Tensor, shape: Sequence[int],
                            bits: int) -> torch.Tensor:
    q = 2 ** (bits - 1)
    codes = naive_unpack(packed, bits, math.prod(shape)).view(shape)
    return (codes.float() - q) * scale.float() / q


def naive_encode(x: torch.Tensor, m: torch.Tensor, bits: int):
    delta = x.float() - m.float()
    packed, scale = naive_quantize_pack(delta, bits)
    m.copy_(m.float() + naive_unpack_dequantize(packed, scale, x.shape, bits))
    return packed, scale


def naive_decode(packed: torch.Tensor, scale: torch.Tensor, m: torch.Tensor, bits: int):
    return m.copy_(m.float() + naive_unpack_dequantize(packed, scale, m.shape, bits))


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
    n, bits = x.numel(), cfg.bits
    packed, scales = quant.quantize_packed(x, cfg, backend="torch")
    moved_codes = packed.numel() + 2 * scales.numel()
    m = torch.zeros_like(x)
    backend = "torch" if path == "naive" else path
    if op == "quantize+pack":
        call = (lambda: naive_quantize_pack(x, bits)) if path == "naive" else \
            (lambda: quant.quantize_packed(x, cfg, backend=backend))
        return call, n * x.element_size() + moved_codes
    if op == "unpack+dequantize":
        call = (lambda: naive_unpack_dequantize(packed, scales, x.shape, bits)) \
            if path == "naive" else \
            (lambda: quant.dequantize_packed(packed, scales, x.shape, cfg, backend=backend))
        return call, moved_codes + 4 * n
    if op == "aqsgd encode":
        call = (lambda: naive_encode(x, m, bits)) if path == "naive" else \
            (lambda: quant.aqsgd_encode(x, m, cfg, backend=backend))
        return call, n * x.element_size() + 2 * n * m.element_size() + moved_codes
    call = (lambda: naive_decode(packed, scales, m, bits)) if path == "naive" else \
        (lambda: quant.aqsgd_decode(packed, scales, m, cfg, backend=backend))
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


def format_table(rows: Sequence[Row]) -> str:
    head = (f"{'device':<7} {'shape':<13} {'bits':>4} {'op':<18} {'path':<7} {'ms':>8} "
            f"{'GB/s':>8} {'p20':>8} {'p80':>8} {'x naive':>8}")
    lines = [head, "-" * len(head)]
    for r in rows:
        ratio = "" if r.speedup_vs_naive is None else f"{r.speedup_vs_naive:.2f}"
        lines.append(f"{r.device:<7} {r.shape:<13} {r.bits:>4} {r.op:<18} {r.path:<7} "
                     f"{r.ms_median:>8.3f} {r.gbps_median:>8.2f} {r.gbps_p20:>8.2f} "
                     f"{r.gbps_p80:>8.2f} {ratio:>8}")
    return "\n".join(lines)


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
    print(format_table(rows))
    if args.json:
        meta = {"torch": torch.__version__, "threads": args.threads,
                "clock": args.clock,
                "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": [asdict(r) for r in rows]}, f, indent=1)
    return rows


if __name__ == "__main__":
    main()
