"""One direction of one stage boundary as configured (`CompressionConfig`), and the size
rule of its messages (`message_spec`), which the compressors (aqsgd.compress.activation),
the pipeline's receives and the traffic predictions (bench.perfmodel) all read:

    cfg = CompressionConfig(mode="aqsgd", bits=2)
    message_spec(cfg, (B, L, D), n_raw=0)      # [(shape, dtype)] in wire order
    steady_raw_rows(cfg, B)                    # rows sent raw once every sample was seen

Modes (``CompressionConfig.mode``, ``MODES``) are registered in aqsgd.compress.registry,
one module each in aqsgd/compress/modes/; which rows a message sends raw (warm-up, first
visits, evaluation) is aqsgd.compress.activation's module docstring.

Wire format, in order (empty parts are left out; ``aqsgd.compress.wire.message_nbytes``
counts everything):
  header  int64 (3 + B,) = [format, epoch, n_raw, sample ids...], checked by the receiver;
          with adaptive widths (5 + B,) = [format, epoch, n_raw, bits, next bits, ids...]
  raw     (n_raw, *S) transport dtype (fp32 in an evaluation message)
  coded   the mode's ``coded_spec((n_q, *S))``: for directq and the aqsgd modes
          codes (packed_nbytes(n_q * prod(S), bits),) uint8, then scales
          scale_shape((n_q, *S)) fp16
With a cache the compressor gathers the coded rows' entries m[i] (in the cache's dtype;
fp32 on CPU), the mode updates them and the compressor writes them back; the receiver's
stage input is the stored row when the cache stores values (``aqsgd``), the mode's
decoded rows otherwise (``aqsgd-lowbits``).
The two adaptive-width fields (``WIDTH_FIELDS``) are there only in a direction with
``widths`` (aqsgd.compress.activation, Note [adaptive widths]).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from aqsgd import quant
from aqsgd.compress.cache import CacheSpec
from aqsgd.compress.modes.base import ActivationMode
from aqsgd.compress.registry import ACTIVATION_MODES
from aqsgd.compress.wire import WireSpec

__all__ = [
    "MODES",
    "GRADIENT_MODES",
    "TRANSPORT_DTYPES",
    "EVAL_DTYPE",
    "HEADER_FIELDS",
    "WIDTH_FIELDS",
    "CompressionConfig",
    "header_fields",
    "message_spec",
    "steady_raw_rows",
]

MODES = tuple(ACTIVATION_MODES)
# the modes that may code activation gradients (the backward direction)
GRADIENT_MODES = tuple(name for name, mode in ACTIVATION_MODES.items() if mode.codes_gradients)
TRANSPORT_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# the dtype of an evaluation message's rows (module docstring, warm-up and first visits)
EVAL_DTYPE = torch.float32

# header[0]: FMT_RAW, FMT_WARMUP (every row raw) or the mode's wire_format.
HEADER_FIELDS = 3  # format, epoch, n_raw; then the B sample ids
WIDTH_FIELDS = 2  # with `widths`: then this message's bits and the next one's


def _check_bits(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 8:
        raise ValueError(f"CompressionConfig.{name} must be an int in 1..8, got {value!r}")


@dataclass(frozen=True)
class CompressionConfig:
    """One direction of one stage boundary. See the module docstring for the modes."""

    mode: str = "none"
    dtype: str = "fp32"
    bits: int = 4
    granularity: str = "channel"
    group_size: int = 128
    rounding: str = "nearest"
    grid: str = "reference"
    scale_method: str = "maxabs"
    warmup_epochs: int = 1
    first_visit: str = "raw"
    cache_dtype: str = "fp16"
    cache_bits: int = 4
    cache_storage: str = "memory"
    cache_dir: str | None = None
    # adaptive widths (aqsgd.compress.adaptive): the bit widths the sender may choose per
    # message, `bits` the first; () sends every coded message at `bits`
    widths: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"CompressionConfig.mode must be one of {MODES}, got {self.mode!r}")
        if self.dtype not in TRANSPORT_DTYPES:
            raise ValueError(
                f"CompressionConfig.dtype must be one of {tuple(TRANSPORT_DTYPES)}, "
                f"got {self.dtype!r}"
            )
        _check_bits("bits", self.bits)
        _check_bits("cache_bits", self.cache_bits)
        w = self.warmup_epochs
        if isinstance(w, bool) or not isinstance(w, int) or w < 0:
            raise ValueError(f"CompressionConfig.warmup_epochs must be an int >= 0, got {w!r}")
        if self.first_visit not in ("raw", "zero"):
            raise ValueError(
                f"CompressionConfig.first_visit must be 'raw' or 'zero', got {self.first_visit!r}"
            )
        if self.cache_dtype not in ("fp16", "fp32"):
            raise ValueError(
                f"CompressionConfig.cache_dtype must be 'fp16' or 'fp32' (aqsgd-lowbits stores "
                f"cache_bits codes instead), got {self.cache_dtype!r}"
            )
        if self.cache_storage not in ("memory", "mmap"):
            raise ValueError(
                f"CompressionConfig.cache_storage must be 'memory' or 'mmap', "
                f"got {self.cache_storage!r}"
            )
        if self.uses_cache and self.cache_storage == "mmap" and not self.cache_dir:
            raise ValueError("CompressionConfig.cache_dir is required when cache_storage='mmap'")
        self.quant_config()  # validates granularity, group_size, rounding, grid, scale_method
        self._check_widths()

    def _check_widths(self) -> None:
        w = tuple(self.widths)
        object.__setattr__(self, "widths", w)
        if not w:
            return
        for b in w:
            _check_bits("widths[]", b)
        if list(w) != sorted(set(w)):
            raise ValueError(f"CompressionConfig.widths must be distinct and ascending, got {w}")
        if not self.coding.codes_rows:
            raise ValueError(f"CompressionConfig.widths: mode {self.mode!r} codes no rows, so "
                             f"it has no width to choose; leave widths empty")
        if self.bits not in w:
            raise ValueError(f"CompressionConfig.bits ({self.bits}) is the first adaptive "
                             f"width, so it must be one of widths {w}")

    @property
    def coding(self) -> type[ActivationMode]:
        """The registered mode (aqsgd.compress.registry) that codes this config's rows."""
        return ACTIVATION_MODES[self.mode]

    @property
    def uses_cache(self) -> bool:
        return self.coding.uses_cache

    def quant_config(self) -> quant.QuantConfig:
        """The quantizer applied to activations (directq) or deltas (aqsgd modes)."""
        return quant.QuantConfig(
            bits=self.bits, granularity=self.granularity, group_size=self.group_size,
            scale_method=self.scale_method, rounding=self.rounding, grid=self.grid,
        )

    def cache_spec(self, sample_shape, num_samples: int) -> CacheSpec:
        return CacheSpec(
            num_samples=num_samples, sample_shape=tuple(sample_shape),
            dtype="quant" if self.coding.quantized_cache else self.cache_dtype,
            bits=self.cache_bits,
            grid=self.grid, storage=self.cache_storage, directory=self.cache_dir,
        )


def header_fields(cfg: CompressionConfig) -> int:
    """int64 fields of a message's header before the sample ids."""
    return HEADER_FIELDS + (WIDTH_FIELDS if cfg.widths else 0)


def message_spec(cfg: CompressionConfig, batch_shape, n_raw: int,
                 training: bool = True, bits: int | None = None) -> WireSpec:
    """[(shape, dtype)] in wire order of a (B, *S) micro-batch's message with `n_raw` rows
    raw and B - n_raw coded by the mode at `bits` (None: `cfg.bits`): the one size rule
    (`Compressor.wire_spec`, traffic predictions; steady state: `steady_raw_rows`). An
    evaluation message (`training` False) sends every row raw in EVAL_DTYPE."""
    batch, *row_shape = (int(n) for n in batch_shape)
    if isinstance(n_raw, bool) or not isinstance(n_raw, int) or not 0 <= n_raw <= batch:
        raise ValueError(f"message_spec: n_raw must be an int in [0, {batch}], got {n_raw!r}")
    if not cfg.coding.codes_rows and n_raw != batch:
        raise ValueError(f"message_spec: mode {cfg.mode!r} sends every row raw: n_raw must be "
                         f"{batch}, got {n_raw}")
    if not training and n_raw != batch:
        raise ValueError(f"message_spec: an evaluation message sends every row raw: n_raw "
                         f"must be {batch}, got {n_raw}")
    spec = [((header_fields(cfg) + batch,), torch.int64)]
    if n_raw:
        raw_dtype = TRANSPORT_DTYPES[cfg.dtype] if training else EVAL_DTYPE
        spec.append(((n_raw, *row_shape), raw_dtype))
    if batch - n_raw:
        coded = cfg if bits is None or bits == cfg.bits else dataclasses.replace(cfg, bits=bits)
        spec += cfg.coding.coded_spec(coded, (batch - n_raw, *row_shape))
    return spec


def steady_raw_rows(cfg: CompressionConfig, batch: int) -> int:
    """Rows of a `batch`-row training message sent raw once warm-up is over and every
    sample has been visited: 0, or every row for a mode that codes none (`none`)."""
    return 0 if cfg.coding.codes_rows else batch
