"""Per-sample activation cache for AQ-SGD: one row of shape (L, D) per training sample.

For every training sample i the cache holds the reconstruction m[i] that the receiver of
a stage boundary last saw; sender and receiver each keep a copy, bit-identical because
every write goes through the same deterministic conversion on both sides. Layouts (rows
indexed by sample id): ``fp32`` / ``fp16`` values (N, *S), or ``quant``: codes (N,
packed_nbytes(prod(S), bits)) uint8 and one fp16 max-abs scale per token, so a sample's
row is self-contained. Either lives in memory or in np.memmap files in a fresh directory
under the caller's, removed on close(). Unwritten rows read as zeros (`initialised`).

    cache = ActivationCache(CacheSpec(num_samples, (L, D), "fp16"), device)
    rows = cache.gather(ids); cache.scatter(ids, rows)

Why no prefetch thread (measured): docs/architecture/compress.md, "Compressors".
"""

from __future__ import annotations

import math
import shutil
import tempfile
import weakref
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from aqsgd import quant

__all__ = ["CACHE_DTYPES", "CACHE_STORAGES", "CacheSpec", "ActivationCache", "check_sample_ids"]

CACHE_DTYPES = ("fp32", "fp16", "quant")
CACHE_STORAGES = ("memory", "mmap")

_TORCH_DTYPE = {"fp32": torch.float32, "fp16": torch.float16}
_NUMPY_DTYPE = {"fp32": np.float32, "fp16": np.float16}


@dataclass(frozen=True)
class CacheSpec:
    """What a cache holds and where. ``bits`` and ``grid`` matter only for dtype ``quant``."""

    num_samples: int
    sample_shape: tuple[int, ...]
    dtype: str = "fp16"
    bits: int = 4
    grid: str = "reference"
    storage: str = "memory"
    directory: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.num_samples, bool) or not isinstance(self.num_samples, int):
            raise TypeError(f"CacheSpec.num_samples must be an int, got {self.num_samples!r}")
        if self.num_samples < 1:
            raise ValueError(f"CacheSpec.num_samples must be >= 1, got {self.num_samples}")
        shape = tuple(self.sample_shape)
        if not shape or any(not isinstance(n, int) or n < 1 for n in shape):
            raise ValueError(
                f"CacheSpec.sample_shape must be a non-empty tuple of positive ints, "
                f"got {self.sample_shape!r}"
            )
        object.__setattr__(self, "sample_shape", shape)
        if self.dtype not in CACHE_DTYPES:
            raise ValueError(f"CacheSpec.dtype must be one of {CACHE_DTYPES}, got {self.dtype!r}")
        if isinstance(self.bits, bool) or not isinstance(self.bits, int) or not 1 <= self.bits <= 8:
            raise ValueError(f"CacheSpec.bits must be an int in 1..8, got {self.bits!r}")
        if self.storage not in CACHE_STORAGES:
            raise ValueError(
                f"CacheSpec.storage must be one of {CACHE_STORAGES}, got {self.storage!r}"
            )
        if self.storage == "mmap":
            if not self.directory:
                raise ValueError("CacheSpec.directory is required when storage='mmap', got None")
            if not Path(self.directory).is_dir():
                raise ValueError(
                    f"CacheSpec.directory must be an existing directory, got {self.directory!r}"
                )
        if self.dtype == "quant":
            self.quant_config()  # validates grid

    @property
    def sample_numel(self) -> int:
        return math.prod(self.sample_shape)

    def quant_config(self) -> quant.QuantConfig:
        """Per-token max-abs, round to nearest: deterministic, so both copies agree."""
        return quant.QuantConfig(
            bits=self.bits, granularity="token", scale_method="maxabs",
            rounding="nearest", grid=self.grid,
        )

    def bytes_per_sample(self) -> int:
        if self.dtype == "quant":
            n_scales = math.prod(self.sample_shape[:-1])
            return quant.packed_nbytes(self.sample_numel, self.bits) + 2 * n_scales
        return self.sample_numel * _TORCH_DTYPE[self.dtype].itemsize

    def bytes_per_element(self) -> float:
        """Storage per cached element, scales included (flags not counted)."""
        return self.bytes_per_sample() / self.sample_numel


def check_sample_ids(sample_ids, num_samples: int | None = None) -> torch.Tensor:
    """Return sample ids as a 1-D int64 CPU tensor; check range and uniqueness.

    With ``num_samples`` given, every id must lie in [0, num_samples): the error names the
    first offending id and the capacity.
    """
    ids = torch.as_tensor(sample_ids)
    if ids.ndim != 1 or ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
        raise TypeError(
            f"sample_ids must be a 1-D integer tensor or list, got shape {tuple(ids.shape)} "
            f"dtype {ids.dtype}"
        )
    ids = ids.to(device="cpu", dtype=torch.int64)
    if num_samples is not None and ids.numel():
        low, high = ids.aminmax()  # one pass; the mask below only on the error path
        if int(low) < 0 or int(high) >= num_samples:
            bad = (ids < 0) | (ids >= num_samples)
            first = int(ids[bad][0])
            raise IndexError(
                f"sample id {first} is outside the activation cache (capacity {num_samples} "
                f"samples, valid ids 0..{num_samples - 1}); size the cache from the data set"
            )
    if ids.unique().numel() != ids.numel():
        raise ValueError(f"sample_ids must be distinct within a micro-batch, got {ids.tolist()}")
    return ids


class ActivationCache:
    """Rows m[i] of shape ``spec.sample_shape``, read and written a micro-batch at a time.

    >>> cache = ActivationCache(CacheSpec(num_samples=8, sample_shape=(4, 16)))
    >>> cache.scatter(torch.tensor([3, 5]), torch.randn(2, 4, 16))
    >>> cache.gather(torch.tensor([5, 3])).shape
    torch.Size([2, 4, 16])
    """

    def __init__(self, spec: CacheSpec, device: torch.device | str = "cpu") -> None:
        self.spec = spec
        self.device = torch.device(device)
        n, shape = spec.num_samples, spec.sample_shape
        # mmap rows live on the host; memory rows on the compute device.
        self._store_device = torch.device("cpu") if spec.storage == "mmap" else self.device
        self._dir: Path | None = None
        self._words: torch.Tensor | None = None
        self._finalizer = None
        if spec.storage == "mmap":
            self._dir = Path(tempfile.mkdtemp(prefix="aqsgd-cache-", dir=spec.directory))
            self._finalizer = weakref.finalize(self, shutil.rmtree, self._dir, True)
        if spec.dtype == "quant":
            self._qcfg = spec.quant_config()
            nbytes = quant.packed_nbytes(spec.sample_numel, spec.bits)
            self._codes = self._alloc("codes", (n, nbytes), np.uint8, torch.uint8)  # (N, nbytes)
            self._scales = self._alloc("scales", (n, *shape[:-1]), np.float16, torch.float16)
            self._values = None
        else:
            self._values = self._alloc(
                "values", (n, *shape), _NUMPY_DTYPE[spec.dtype], _TORCH_DTYPE[spec.dtype]
            )  # (N, *S)
            # The same bytes as (N, words) int64 when a row is whole 8-byte words: torch's
            # CPU index_copy_ costs per element, so copying words writes rows ~2x faster.
            if (spec.sample_numel * self._values.element_size()) % 8 == 0:
                self._words = self._values.view(n, -1).view(torch.int64)  # (N, words)
        self.initialised = torch.zeros(n, dtype=torch.bool)  # (N,), CPU

    def _alloc(self, name: str, shape: tuple[int, ...], np_dtype, torch_dtype) -> torch.Tensor:
        if self._dir is None:
            return torch.zeros(shape, dtype=torch_dtype, device=self._store_device)
        array = np.memmap(self._dir / f"{name}.bin", dtype=np_dtype, mode="w+", shape=shape)
        return torch.from_numpy(array)  # zero-filled by the OS, shares the mapping

    @property
    def num_samples(self) -> int:
        return self.spec.num_samples

    @property
    def stored_dtype(self) -> torch.dtype | None:
        """torch dtype of fp16/fp32 rows; None for quantized rows."""
        return None if self._values is None else self._values.dtype

    @property
    def directory(self) -> Path | None:
        """The directory this cache created for its files (None for memory storage)."""
        return self._dir

    def nbytes(self) -> int:
        """Bytes held for rows (all N samples), scales included."""
        return self.spec.num_samples * self.spec.bytes_per_sample()

    def gather(self, sample_ids) -> torch.Tensor:
        """Rows of ``sample_ids`` (B, *S) on the cache's device, in fp32; unwritten rows
        are 0."""
        ids = check_sample_ids(sample_ids, self.num_samples)
        return self.gather_checked(ids, torch.float32)

    def gather_checked(self, ids: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """``gather`` for ids that already passed ``check_sample_ids`` (1-D int64 CPU, in
        range, distinct), as a fresh tensor in ``dtype`` (None: the stored dtype; quantized
        rows always come back as fp32). Skips the re-check on the per-micro-batch path."""
        if ids.numel() == 0:
            return torch.zeros((0, *self.spec.sample_shape), device=self.device)
        index = ids.to(self._store_device)
        if self._values is not None:
            rows = self._values.index_select(0, index)  # (B, *S) stored dtype
            return rows.to(self.device, dtype or rows.dtype)
        codes = self._codes.index_select(0, index).to(self.device)  # (B, nbytes)
        scales = self._scales.index_select(0, index).to(self.device)  # (B, *S[:-1])
        return self._dequantize(codes, scales)

    def scatter(self, sample_ids, rows: torch.Tensor) -> None:
        """Write ``rows`` (B, *S, any float dtype) for ``sample_ids``; mark them initialised.

        Rows are cast (fp16/fp32) or re-quantized (round to nearest) to the stored form.
        """
        self.scatter_checked(check_sample_ids(sample_ids, self.num_samples), rows)

    def scatter_checked(self, ids: torch.Tensor, rows: torch.Tensor) -> None:
        """``scatter`` for ids that already passed ``check_sample_ids``."""
        expected = (ids.numel(), *self.spec.sample_shape)
        if tuple(rows.shape) != expected:
            raise ValueError(f"cache rows must have shape {expected}, got {tuple(rows.shape)}")
        if ids.numel() == 0:
            return
        index = ids.to(self._store_device)
        if self._values is not None:
            src = rows.to(self._store_device, self._values.dtype)
            if self._words is not None:
                words = src.contiguous().view(ids.numel(), -1).view(torch.int64)
                self._words.index_copy_(0, index, words)
            else:
                self._values.index_copy_(0, index, src)
        else:
            codes, scales = self._quantize(rows.float())
            self._codes.index_copy_(0, index, codes.to(self._store_device))
            self._scales.index_copy_(0, index, scales.to(self._store_device))
        self.initialised.index_fill_(0, ids, True)

    def _byte_aligned(self) -> bool:
        return (self.spec.sample_numel * self.spec.bits) % 8 == 0

    def _quantize(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, *S) fp32 -> codes (B, nbytes) uint8, scales (B, *S[:-1]) fp16, per sample."""
        b = rows.shape[0]
        if self._byte_aligned():
            # Each sample's bit stream starts on a byte boundary, so one call packs all rows.
            packed, scales = quant.quantize_packed(rows, self._qcfg)
            return packed.view(b, -1), scales
        pairs = [quant.quantize_packed(rows[j], self._qcfg) for j in range(b)]
        return torch.stack([p for p, _ in pairs]), torch.stack([s for _, s in pairs])

    def _dequantize(self, codes: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
        b, shape = codes.shape[0], self.spec.sample_shape
        if self._byte_aligned():
            return quant.dequantize_packed(codes.reshape(-1), scales, (b, *shape), self._qcfg)
        rows = [
            quant.dequantize_packed(codes[j], scales[j], shape, self._qcfg) for j in range(b)
        ]
        return torch.stack(rows) if rows else torch.zeros((0, *shape), device=self.device)

    def close(self) -> None:
        """Drop the rows and remove the files this cache created (idempotent)."""
        self._values = self._codes = self._scales = self._words = None
        if self._finalizer is not None:
            self._finalizer()

    def __enter__(self) -> ActivationCache:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
