"""The quantizer's fused CPU path: the four calls in a few passes over memory, bit for bit
the reference. `backend="auto"` runs it for CPU tensors; the kernels are C++ beside this
file (fused_kernels.cpp, fused_arith.h, fused_pack.h), built here on first use with the
system's C++ compiler into .cache/quant-fused/ and loaded through ctypes:

    if fused.available():                          # builds once per machine, then cached
        packed, scales = fused.quantize_packed(x, cfg, seed)
        y = fused.dequantize_packed(packed, scales, shape, cfg, dtype)
        packed, scales = fused.aqsgd_encode(x, m, cfg, seed)    # m += deQ in place
        fused.aqsgd_decode(packed, scales, m, cfg)               # m += deQ in place
    print(fused.status())                          # where the library is, or why not

Where it cannot be built, `available()` is False and the torch path runs (a RuntimeWarning
says why, once). Its passes, and why C++ through ctypes (measured against torch,
torch.compile and cpp_extension): docs/cpu-coding.md, "CPU coding at the speed of memory".
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import math
import platform
import shutil
import subprocess
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from aqsgd.filecache import build_once, default_cache_dir
from aqsgd.quant.bitpack import packed_nbytes
from aqsgd.quant.config import GOLDEN32, SCALE_DTYPE, QuantConfig

__all__ = ["COMPILERS", "FLAGS", "SOURCES", "Library", "aqsgd_decode", "aqsgd_encode", "available",
           "library_path",
           "dequantize_packed", "load_library", "quantize_packed", "status"]

SOURCE = Path(__file__).with_name("fused_kernels.cpp")  # compiled; it includes the headers
SOURCES = (SOURCE, SOURCE.with_name("fused_arith.h"), SOURCE.with_name("fused_pack.h"))
COMPILERS = ("c++", "g++", "clang++")  # the first one on PATH builds the library
# No -ffast-math and no fused multiply-add: every step is the contract's IEEE operation.
FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math",
         "-fno-exceptions", "-fno-rtti", "-std=c++17", "-shared", "-fPIC")
BUILD_TIMEOUT_S = 300
_DTYPE_CODES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
_NO_CACHE = -1


@dataclass(frozen=True)
class Library:
    """The loaded kernels (`lib`), or None with the reason in `note`."""

    lib: ctypes.CDLL | None
    note: str


# ---------------------------------------------------------------------------
# Build and load
# ---------------------------------------------------------------------------


def _cpu_flags() -> str:
    """What -march=native compiles for: the CPU's feature flags (Linux), else its name."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.processor()


def library_path(cache_dir: Path) -> Path:
    """Where the kernels built for this machine (sources, flags, CPU) live under cache_dir."""
    key = hashlib.sha256()
    for part in (*(path.read_bytes() for path in SOURCES), " ".join(FLAGS).encode(),
                 platform.machine().encode(), _cpu_flags().encode()):
        key.update(part)
        key.update(b"\0")
    return Path(cache_dir) / "quant-fused" / f"fused_kernels-{key.hexdigest()[:16]}.so"


def _compile(compiler: str, out: Path) -> None:
    done = subprocess.run([compiler, *FLAGS, "-o", str(out), str(SOURCE)], capture_output=True,
                          text=True, timeout=BUILD_TIMEOUT_S)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-5:]
        raise RuntimeError(f"{compiler} exited with {done.returncode}: " + " | ".join(tail))


def _declare(lib: ctypes.CDLL) -> None:
    ptr, i32, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64
    lib.aqf_encode.argtypes = [ptr, i32, ptr, i32, i64, i64, i32, i32, i32, i32, i32,
                               ctypes.c_uint32, ptr, ptr]
    lib.aqf_encode.restype = i32
    lib.aqf_decode.argtypes = [ptr, ptr, ptr, i32, i32, i64, i64, i32, i32, i32]
    lib.aqf_decode.restype = i32


def load_library(cache_dir: Path, compilers: Sequence[str] = COMPILERS) -> Library:
    """The kernels built for this machine under cache_dir/quant-fused/: loaded when there,
    else compiled there first (once, under a lock: concurrent processes wait for one build)
    with the first of `compilers` on PATH. Never raises: a failure is the Library's note."""
    missing = [str(path) for path in SOURCES if not path.exists()]
    if missing:  # e.g. an installed wheel that left the C++ files out
        return Library(None, f"{', '.join(missing)} missing")
    path = library_path(cache_dir)
    built = ""
    if not path.exists():
        compiler = next((c for c in compilers if shutil.which(c)), None)
        if compiler is None:
            return Library(None, f"no C++ compiler on PATH (looked for {', '.join(compilers)})"
                                 f" and no library built before at {path}")
        try:
            if build_once(path, lambda tmp: _compile(compiler, tmp)):
                built = f", built now with {shutil.which(compiler)}"
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as err:
            return Library(None, f"building {SOURCE.name} into {path.parent} failed: {err}")
    try:
        lib = ctypes.CDLL(str(path))
        _declare(lib)
    except (OSError, AttributeError) as err:
        return Library(None, f"loading {path} failed: {err}")
    return Library(lib, f"fused C++ kernels from {path}{built}")


@functools.lru_cache(maxsize=1)
def _library() -> Library:
    return load_library(default_cache_dir())


@functools.lru_cache(maxsize=1)
def _warn_unavailable(note: str) -> None:
    warnings.warn(f"aqsgd.quant: the fused CPU kernels are unavailable ({note}); CPU tensors "
                  "are coded by aqsgd.quant.cpu instead: the same bytes, several times slower",
                  RuntimeWarning, stacklevel=5)


def available() -> bool:
    """Are the fused kernels usable in this process? Builds or loads them on the first call;
    when they are not, warns once (RuntimeWarning) with the reason."""
    library = _library()
    if library.lib is None:
        _warn_unavailable(library.note)
    return library.lib is not None


def status() -> str:
    """Where the kernels were loaded from, or why they were not (builds on the first call)."""
    return _library().note


# ---------------------------------------------------------------------------
# The four calls (CPU tensors, arguments checked by aqsgd.quant)
# ---------------------------------------------------------------------------


def _geometry(shape: Sequence[int], cfg: QuantConfig) -> tuple[int, int, int]:
    """(rows, cols, per_col) of the 2-D view whose scale groups are columns (channel) or
    rows (token: rows of the last dim; group: rows of group_size elements)."""
    n = math.prod(shape)
    if cfg.granularity == "channel":
        return n // shape[-1], shape[-1], 1
    cols = shape[-1] if cfg.granularity == "token" else cfg.group_size
    return n // cols, cols, 0


def _scale_shape(shape: Sequence[int], cfg: QuantConfig, rows: int) -> tuple[int, ...]:
    """scale_shape(shape, cfg) of an already checked shape, without checking it again."""
    if cfg.granularity == "channel":
        return (shape[-1],)
    return tuple(shape[:-1]) if cfg.granularity == "token" else (rows,)


def _run(fn, *args) -> None:
    rc = fn(*args)
    if rc == 1:
        raise MemoryError(f"{fn.__name__}: a work buffer could not be allocated")
    assert rc == 0, f"{fn.__name__} returned {rc}"  # 2: a dtype code this module never sends


def _encode(x: torch.Tensor, m: torch.Tensor | None, cfg: QuantConfig,
            seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    lib = _library().lib
    assert lib is not None and x.device.type == "cpu" and x.is_contiguous()
    rows, cols, per_col = _geometry(x.shape, cfg)
    packed = torch.empty(packed_nbytes(x.numel(), cfg.bits), dtype=torch.uint8)
    scales = torch.empty(_scale_shape(x.shape, cfg, rows), dtype=SCALE_DTYPE)
    _run(lib.aqf_encode, x.data_ptr(), _DTYPE_CODES[x.dtype],
         None if m is None else m.data_ptr(), _NO_CACHE if m is None else _DTYPE_CODES[m.dtype],
         rows, cols, per_col, cfg.bits, int(cfg.symmetric), int(cfg.stochastic),
         int(cfg.scale_method == "l2"), (seed * GOLDEN32) % 2**32, scales.data_ptr(),
         packed.data_ptr())
    return packed, scales


def _decode(packed: torch.Tensor, scales: torch.Tensor, out: torch.Tensor, cfg: QuantConfig,
            accumulate: bool) -> torch.Tensor:
    lib = _library().lib
    assert lib is not None and out.device.type == "cpu" and out.is_contiguous()
    rows, cols, per_col = _geometry(out.shape, cfg)
    _run(lib.aqf_decode, packed.data_ptr(), scales.data_ptr(), out.data_ptr(),
         _DTYPE_CODES[out.dtype], int(accumulate), rows, cols, per_col, cfg.bits,
         int(cfg.symmetric))
    return out


def quantize_packed(x: torch.Tensor, cfg: QuantConfig,
                    seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x (contiguous, CPU) -> (packed uint8 stream, fp16 scales of scale_shape(x.shape, cfg))."""
    return _encode(x, None, cfg, seed)


def dequantize_packed(packed: torch.Tensor, scales: torch.Tensor, shape, cfg: QuantConfig,
                      dtype: torch.dtype) -> torch.Tensor:
    """(packed, scales) -> values of `shape` in `dtype` (fp32 arithmetic, one rounding)."""
    return _decode(packed, scales, torch.empty(tuple(shape), dtype=dtype), cfg, False)


def aqsgd_encode(x: torch.Tensor, m: torch.Tensor, cfg: QuantConfig,
                 seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize x.float() - m.float(); m (contiguous) += deQ in place."""
    return _encode(x, m, cfg, seed)


def aqsgd_decode(packed: torch.Tensor, scales: torch.Tensor, m: torch.Tensor,
                 cfg: QuantConfig) -> torch.Tensor:
    """m (contiguous) += deQ(packed, scales) in place; returns m."""
    return _decode(packed, scales, m, cfg, True)
