"""One direction of one stage boundary as configured (`CompressionConfig`, holding its
`QuantConfig`), and the size rule of its messages (`message_spec`), which the compressors
(aqsgd.compress.activation), the pipeline's receives and the traffic predictions
(bench.perfmodel) all read:

    cfg = CompressionConfig(mode="aqsgd", quant=QuantConfig(bits=2))
    message_spec(cfg, (B, L, D), n_raw=0)      # [(shape, dtype)] in wire order
    steady_raw_rows(cfg, B)                    # rows sent raw once every sample was seen
    CompressionConfig.from_dict(d)             # a config file's form: forward.bits, ...

Wire format, in order (empty parts left out): header int64 (3 + B,) = [format, epoch,
n_raw, sample ids...] ((5 + B,) with adaptive `widths`: then bits, next bits); raw rows
(n_raw, *S) in the transport dtype (fp32 in evaluation); the mode's `coded_spec((n_q,
*S))`. docs/architecture/compress.md, "Compressors", says which rows go raw and what a cache holds.
A mode `sized_by_data` has DATA_SIZED dims there (`cfg.sized_by_data`: its direction
travels length-first); `message_spec(..., expected=True)` fills them as the mode expects.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Annotated, Literal

import torch
from pydantic import Field, model_validator

from aqsgd import quant
from aqsgd.compress.cache import CacheSpec
from aqsgd.compress.ingraph import check_coords
from aqsgd.compress.modes.base import ActivationMode
from aqsgd.compress.registry import ACTIVATION_MODES, Names, not_loaded_note
from aqsgd.compress.wire import WireSpec, prefix_spec
from specfile.declared import check_fields

__all__ = [
    "MODES",
    "GRADIENT_MODES",
    "TRANSPORT_DTYPES",
    "EVAL_DTYPE",
    "HEADER_FIELDS",
    "WIDTH_FIELDS",
    "QUANT_KEYS",
    "CompressionConfig",
    "header_fields",
    "message_spec",
    "steady_raw_rows",
]

MODES = Names(ACTIVATION_MODES)
# the modes that may code activation gradients (the backward direction)
GRADIENT_MODES = Names(ACTIVATION_MODES, lambda mode: mode.codes_gradients)
TRANSPORT_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# the dtype of an evaluation message's rows (docs/architecture/compress.md, "Compressors")
EVAL_DTYPE = torch.float32

# header[0]: FMT_RAW, FMT_WARMUP (every row raw) or the mode's wire_format.
HEADER_FIELDS = 3  # format, epoch, n_raw; then the B sample ids
WIDTH_FIELDS = 2  # with `widths`: then this message's bits and the next one's
# a config file's keys of CompressionConfig.quant, written flat in the direction
QUANT_KEYS = tuple(f.name for f in dataclasses.fields(quant.QuantConfig))


def _split(data: dict) -> tuple[dict, dict]:
    """A file's direction -> (its own keys, the quantizer's keys)."""
    return ({k: v for k, v in data.items() if k not in QUANT_KEYS},
            {k: data[k] for k in QUANT_KEYS if k in data})


@dataclass(frozen=True)
class CompressionConfig:
    """One direction of one stage boundary (modes: aqsgd.compress.registry).

    `quant` is the quantizer of its coded rows; a config file writes its fields flat
    beside this class's own (`forward.bits`, `forward.granularity`, ...: `to_dict`)."""

    mode: str = "none"  # one of MODES (checked against the registry, which can grow)
    dtype: Annotated[Literal[tuple(TRANSPORT_DTYPES)], Field(description=(
        "the dtype of rows sent raw"))] = "fp32"
    quant: quant.QuantConfig = field(default_factory=quant.QuantConfig)
    warmup_epochs: Annotated[int, Field(ge=0, description=(
        "epochs whose every row is sent raw"))] = 1
    first_visit: Annotated[Literal["raw", "zero"], Field(description=(
        "a sample's first coded visit: sent raw, or coded against a zero cache"))] = "raw"
    cache_dtype: Annotated[Literal["fp16", "fp32"], Field(description=(
        "the cache's dtype (aqsgd-lowbits stores cache_bits codes instead)"))] = "fp16"
    cache_bits: quant.Bits = 4
    cache_storage: Annotated[Literal["memory", "mmap"], Field(description=(
        "where the cache lives; 'mmap' needs cache_dir"))] = "memory"
    cache_dir: str | None = None
    # adaptive widths (aqsgd.compress.adaptive): the bit widths the sender may choose per
    # message, `quant.bits` the first; () sends every coded message at `quant.bits`
    widths: tuple[quant.Bits, ...] = ()
    # a mode with an in-graph half (aqsgd.compress.ingraph): the k coordinates a token its
    # rows carry (ssn's rank, bottleneck's width); None: the mode's default fraction of the
    # hidden width. A byte-level mode takes none.
    coords: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "widths", tuple(self.widths))
        if self.mode not in MODES:
            raise ValueError(f"CompressionConfig.mode must be one of {MODES}, got {self.mode!r}"
                             f"{not_loaded_note()}")
        check_fields(self)
        check_coords(self)
        if self.uses_cache and self.cache_storage == "mmap" and not self.cache_dir:
            raise ValueError("CompressionConfig.cache_dir is required when cache_storage='mmap'")
        self._check_widths()

    @model_validator(mode="before")
    @classmethod
    def _from_file(cls, data):
        """A config file's direction: the quantizer's keys sit flat beside the others."""
        if not isinstance(data, dict):
            return data
        rest, flat = _split(data)
        # what this returns is validated as Python objects, where strict mode takes a
        # tuple (widths) only as a tuple
        rest = {k: tuple(v) if isinstance(v, list) else v for k, v in rest.items()}
        if not flat:
            return rest
        try:  # built here, so that a mistake names the key as the file writes it
            return {**rest, "quant": quant.QuantConfig(**flat)}
        except (TypeError, ValueError) as e:
            raise ValueError(str(e).removeprefix("QuantConfig.")) from None

    @classmethod
    def from_dict(cls, data: dict) -> CompressionConfig:
        """A direction as a config file writes it (`to_dict`'s inverse)."""
        rest, flat = _split(data)
        return cls(**rest, quant=quant.QuantConfig(**flat))

    def to_dict(self) -> dict:
        """The config file's form: the quantizer's fields flat, where `bits` stood."""
        tree = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "quant":
                tree.update(dataclasses.asdict(value))
            else:
                tree[f.name] = value
        return tree

    @property
    def bits(self) -> int:
        """The code width of the direction's messages (adaptive: the first)."""
        return self.quant.bits

    def with_bits(self, bits: int) -> CompressionConfig:
        """The same direction coding at `bits`."""
        if bits == self.bits:
            return self
        return dataclasses.replace(self, quant=dataclasses.replace(self.quant, bits=bits))

    def _check_widths(self) -> None:
        w = self.widths
        if not w:
            return
        if list(w) != sorted(set(w)):
            raise ValueError(f"CompressionConfig.widths must be distinct and ascending, got {w}")
        if not self.coding.codes_rows:
            raise ValueError(f"CompressionConfig.widths: mode {self.mode!r} codes no rows, so "
                             f"it has no width to choose; leave widths empty")
        if self.sized_by_data:
            raise ValueError(f"CompressionConfig.widths: mode {self.mode!r} is sized by data, "
                             f"so no width can be chosen from its size; leave widths empty")
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

    @property
    def sized_by_data(self) -> bool:
        """Its coded messages' sizes are known only after encoding: length-first."""
        return self.coding.sized_by_data

    def cache_spec(self, sample_shape, num_samples: int) -> CacheSpec:
        return CacheSpec(
            num_samples=num_samples, sample_shape=tuple(sample_shape),
            dtype="quant" if self.coding.quantized_cache else self.cache_dtype,
            bits=self.cache_bits,
            grid=self.quant.grid, storage=self.cache_storage, directory=self.cache_dir,
        )


def header_fields(cfg: CompressionConfig) -> int:
    """int64 fields of a message's header before the sample ids."""
    return HEADER_FIELDS + (WIDTH_FIELDS if cfg.widths else 0)


def message_spec(cfg: CompressionConfig, batch_shape, n_raw: int, training: bool = True,
                 bits: int | None = None, expected: bool = False) -> WireSpec:
    """[(shape, dtype)] in wire order of a (B, *S) micro-batch's message with `n_raw` rows
    raw and B - n_raw coded by the mode at `bits` (None: `cfg.bits`): the one size rule
    (`Compressor.wire_spec`, traffic predictions; steady state: `steady_raw_rows`). An
    evaluation message (`training` False) sends every row raw in EVAL_DTYPE. A mode sized
    by data leaves DATA_SIZED dims; with `expected` they are the mode's expectation, and
    its length prefix (aqsgd.compress.wire.prefix_spec) comes first, as on the wire."""
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
        coded = cfg if bits is None else cfg.with_bits(bits)
        q_shape = (batch - n_raw, *row_shape)
        coding = cfg.coding
        spec += (coding.expected_spec if expected else coding.coded_spec)(coded, q_shape)
    if expected and cfg.sized_by_data:
        spec.insert(0, prefix_spec(spec))
    return spec


def steady_raw_rows(cfg: CompressionConfig, batch: int) -> int:
    """Rows of a `batch`-row training message sent raw once warm-up is over and every
    sample has been visited: 0, or every row for a mode that codes none (`none`)."""
    return 0 if cfg.coding.codes_rows else batch
