"""What an activation mode module declares: `ActivationMode` (subclassed once per mode,
registered as the module's `MODE`) and `Comparison` (the modes of the benchmark
comparison, the module's `COMPARISONS`).

    class DirectQ(ActivationMode):
        name, rank, wire_format = "directq", 1, 2
        def encode(self, rows, generator, m=None): ...   # coded rows -> wire tensors
    MODE = DirectQ

An instance codes the rows of one compressor (aqsgd.compress.activation builds it from
its `CompressionConfig`, here `cfg`, not imported: that module validates mode names
against the registry, which imports this one); the compressor keeps the framing every
mode shares (header, raw rows, the cache). A plug-in subclasses them the same way
(docs/plugins.md). A mode may also declare an in-graph half (`in_graph`, an
aqsgd.compress.ingraph.InGraph subclass: modules trained with the model on each side of
a boundary, whose coordinates its byte-level half carries). Imports aqsgd.quant,
aqsgd.compress.wire, aqsgd.compress.ingraph and torch only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from aqsgd import quant
from aqsgd.compress.ingraph import InGraph
from aqsgd.compress.wire import WireSpec

__all__ = ["FMT_RAW", "FMT_WARMUP", "ActivationMode", "Comparison", "PackedCodes",
           "packed_spec"]

# header[0] of a message whose rows are all raw; a mode's `wire_format` is another value.
FMT_RAW, FMT_WARMUP = 0, 1

def packed_spec(cfg, q_shape: tuple[int, ...]) -> WireSpec:
    """Codes and scales of `q_shape` rows quantized by `cfg.quant` (directq and the aqsgd
    modes): uint8 (packed_nbytes(numel, bits),), fp16 scale_shape(q_shape)."""
    return [((quant.packed_nbytes(math.prod(q_shape), cfg.quant.bits),), torch.uint8),
            (tuple(quant.scale_shape(q_shape, cfg.quant)), torch.float16)]


class ActivationMode:
    """One value of `CompressionConfig.mode`: how the rows a message codes (those not sent
    raw) go on the wire. Subclass it, set the class attributes, implement `coded_spec`,
    `encode` and `decode` (a mode with `codes_rows = False` implements none of them)."""

    name: ClassVar[str]  # CompressionConfig.mode
    rank: ClassVar[float]  # position in aqsgd.compress.registry.ACTIVATION_MODES
    codes_rows: ClassVar[bool] = True  # False: every row is sent raw in the transport dtype
    wire_format: ClassVar[int | None] = None  # header[0] of its coded messages
    uses_cache: ClassVar[bool] = False  # codes rows against the per-sample cache m
    quantized_cache: ClassVar[bool] = False  # the cache stores cache_bits codes, not values
    codes_gradients: ClassVar[bool] = False  # may code activation gradients (backward)
    # its `coded_spec` has DATA_SIZED dims (aqsgd.compress.wire): the sizes are known only
    # after encoding, so its direction's messages travel length-first (p2p) and a
    # prediction reads `expected_spec`
    sized_by_data: ClassVar[bool] = False
    # bench.micro.compressors: the (transport dtype, bits) cases it times, and the one
    # its smoke size (the test suite's) runs
    bench_cases: ClassVar[tuple[tuple[str, int], ...]]
    smoke_case: ClassVar[tuple[str, int]]
    profile_bits: ClassVar[int] = 4  # bits of the performance model's per-element cost
    # the in-graph half (an InGraph subclass): modules before and after the boundary whose
    # k coordinates a token this mode's rows carry (CompressionConfig.coords); None: the
    # mode codes the hidden activation itself
    in_graph: ClassVar[type[InGraph] | None] = None

    def __init__(self, cfg) -> None:
        self.cfg = cfg

    @classmethod
    def coded_spec(cls, cfg, q_shape: tuple[int, ...]) -> WireSpec:
        """[(shape, dtype)] in wire order of `q_shape` = (n_q, *S) coded rows: the mode's
        byte rule (aqsgd.compress.message.message_spec adds header and raw rows)."""
        raise NotImplementedError(f"activation mode {cls.name!r} codes no rows")

    @classmethod
    def expected_spec(cls, cfg, q_shape: tuple[int, ...]) -> WireSpec:
        """`coded_spec` with every dim known: the expected sizes a prediction uses (the
        performance model). The same as `coded_spec` unless the mode is `sized_by_data`,
        which must say what it expects."""
        if cls.sized_by_data:
            raise NotImplementedError(f"activation mode {cls.name!r} is sized by data: "
                                      f"it must declare expected_spec")
        return cls.coded_spec(cfg, q_shape)

    def encode(self, rows: torch.Tensor, generator: torch.Generator | None,
               m: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Wire tensors of fp32 `rows` (n_q, *S), as `coded_spec` says. For a mode that
        uses the cache, `m` (n_q, *S) is a working copy of the rows' cache entries, updated
        in place to what the receiver will hold (the compressor writes it back)."""
        raise NotImplementedError(f"activation mode {self.name!r} codes no rows")

    def decode(self, coded: list[torch.Tensor], q_shape: tuple[int, ...],
               m: torch.Tensor | None = None) -> torch.Tensor:
        """The rows (n_q, *S) from the coded tensors; with the cache, `m` is updated in
        place as on the sender and returned."""
        raise NotImplementedError(f"activation mode {self.name!r} codes no rows")



class PackedCodes(ActivationMode):
    """A mode that sends packed codes and fp16 scales of the message's QuantConfig
    (`packed_spec`): directq and the aqsgd modes; each gives its own encode/decode."""

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self.qcfg = cfg.quant

    @classmethod
    def coded_spec(cls, cfg, q_shape: tuple[int, ...]) -> WireSpec:
        return packed_spec(cfg, q_shape)

@dataclass(frozen=True)
class Comparison:
    """One mode of the benchmark comparison: what a sweep's `modes:` and a cell name say
    (`bench.harness.modes.ModeSpec.name`), the `mode` column of result tables.

    The activation mode `forward` codes the activations, `backward` their gradients (a
    mode with `codes_gradients`), both with raw rows in `dtype`; with `data_parallel`
    the replicas' gradients go through the gradient codec the sweep selects
    (`NAME/GRAD`), otherwise they are averaged exactly. `default_bits` (forward, backward)
    are the bit widths of a bare name; None: the mode takes no bit widths. `rank` orders
    tables and figures (fp32 0, directq 1, aqsgd 2, aqsgd-lowbits 3, aqsgd+gc 4, bf16 5,
    fp16 6; a number in between places a new mode between two). With `adaptive` each
    sender chooses its messages' widths at run time (aqsgd.compress.adaptive) from the
    ladder of its direction up to the bits the mode names. A `speedup_reference`
    (fp32, bf16) codes nothing either way: the reports show every speed-up over its cell
    of the same link and layout (`speedup_vs_NAME`), and a sweep that runs it runs it
    with the replicas of aqsgd+gc too."""

    name: str
    rank: float
    forward: str
    backward: str
    default_bits: tuple[int, int] | None = None
    data_parallel: bool = False
    dtype: str = "fp32"
    speedup_reference: bool = False
    adaptive: bool = False

    @property
    def takes_bits(self) -> bool:
        return self.default_bits is not None
