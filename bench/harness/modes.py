"""The compression modes a sweep compares, and their `NAME[/GRAD][:FW/BW]` syntax.

    parse_mode("aqsgd:2/4")            # ModeSpec("aqsgd", 2, 4)
    parse_mode("aqsgd-adaptive:4/8")   # widths chosen at run time, at most 4 and 8 bits
    parse_mode("aqsgd+gc/ef21:2/4")    # aqsgd plus EF21 data-parallel gradients
    str(parse_mode("aqsgd+gc:2/4"))    # 'aqsgd+gc/qadam:2/4' (QuantizedAdam by default)
    parse_mode("aqsgd-fw2-bw4")        # the directory spelling (ModeSpec.label) reads too
    parse_mode("ssn:160")              # a mode with an in-graph half: its k coordinates
    first_repeat([parse_mode("aqsgd"), parse_mode("aqsgd:2/4")])   # (0, 1): the same mode

Spellings: the command line's `NAME[/GRAD][:FW/BW]` (`str(ModeSpec)`) is the one tables,
legends and sweep files use; directories keep the file-name-safe `ModeSpec.label`
('aqsgd+gc-qadam-fw2-bw4'); replicas and variants are no part of a mode
(docs/results-schema.md, "Mode spellings"). The modes are aqsgd.compress.registry's
`COMPARISONS`: names, default bit widths, which take bits or a gradient codec; a
plug-in's modes (aqsgd.compress.registry.load_plugins) are names like any other.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

from pydantic import Field

from aqsgd.compress.adaptive import ladder
from aqsgd.compress.plugins import Plugin
from aqsgd.compress.registry import (
    ACTIVATION_MODES,
    COMPARISONS,
    GRAD_CODECS,
    Names,
    View,
    plugins_of,
)
from specfile import check_fields

__all__ = ["MODE_NAMES", "GRAD_COMPRESSORS", "COORD_MODES", "DEFAULT_BITS", "DEFAULT_GRID",
           "BITS_RANGE", "Bits", "ModeSpec", "default_grid", "first_repeat", "parse_mode"]

# Each list follows the registry, plug-ins included (registry.Names, registry.View).
MODE_NAMES = Names(COMPARISONS)
# The data-parallel gradient compressors a mode with a gradient codec can select.
GRAD_COMPRESSORS = Names(GRAD_CODECS, lambda codec: codec.compresses)
# (forward bits, backward bits) used when a quantized mode is named bare.
DEFAULT_BITS = View(COMPARISONS, lambda c: c.default_bits, lambda c: c.takes_bits)
# The modes that select a gradient compressor (NAME/GRAD).
_DP_MODES = Names(COMPARISONS, lambda c: c.data_parallel)
# The modes whose forward mode has an in-graph half: they take its k (NAME:K, NAME:FW/BW:K).
COORD_MODES = Names(COMPARISONS, lambda c: ACTIVATION_MODES[c.forward].in_graph is not None)
# The grid `python -m bench run` runs by default: every mode, AQ-SGD at three bit widths,
# DirectQ at AQ-SGD's most aggressive width beside it (the paper's quality contrast), and
# TAH-Quant there too (its 2 code bits plus 0.75 bit of tile header an element: the
# nearest it comes to AQ-SGD 2/4's bytes), and bf16, the baseline a system of today sends
# (speed-ups are shown over it too). fp16 has bf16's bytes, so its throughput adds nothing
# here; it is one name away (`--modes`). ssn:15, Subspace Networks at AQ-SGD 2/4's bytes
# a token on the tiny family's width 128: 2 x 15 + 2 = 32 bytes forward against AQ-SGD's
# 32.25 (2-bit codes plus per-channel scales), 30 backward against 64.25
# (docs/trainable-codecs.md, "Equal bytes a token").
DEFAULT_GRID = ("fp32", "bf16", "directq:2/4", "directq:4/8", "tahquant:2/4", "aqsgd:2/4",
                "aqsgd:3/6", "aqsgd:4/8", "aqsgd+gc/qadam:2/4", "ssn:15")
BITS_RANGE = (1, 8)


def default_grid() -> tuple[str, ...]:
    """DEFAULT_GRID, then every comparison of a loaded plug-in at its default bits."""
    return DEFAULT_GRID + tuple(name for name in COMPARISONS if plugins_of(name))


Bits = Annotated[int, Field(ge=BITS_RANGE[0], le=BITS_RANGE[1],
                            description="code width in bits")]


@dataclass(frozen=True)
class ModeSpec:
    """One compression mode of the comparison: AQ-SGD and the baselines it is measured against.

    fp32: nothing compressed. directq: activations and their gradients
    quantized directly. aqsgd: activation deltas against the per-sample cache
    forward, DirectQ backward. aqsgd-lowbits: aqsgd with the cache itself stored
    quantized. aqsgd+gc: aqsgd plus compressed data-parallel gradients (`grad_mode`
    of GRAD_COMPRESSORS, QuantizedAdam by default) -- needs replicas >= 2. bf16, fp16:
    activations and their gradients cast to that half dtype on the wire, nothing coded.
    (aqsgd.compress.registry.COMPARISONS has every mode and what it compresses.)
    """

    name: str
    fw_bits: Bits | None = None
    bw_bits: Bits | None = None
    grad_mode: str = "qadam"  # only used by the modes with a gradient codec (aqsgd+gc)
    grad_bits: Bits = 8
    # a mode with an in-graph half: its k coordinates a token (CompressionConfig.coords);
    # None: the mode's default fraction of the width
    coords: int | None = None

    def __post_init__(self):
        if self.name not in MODE_NAMES:
            raise ValueError(f"ModeSpec.name must be one of {', '.join(MODE_NAMES)}, "
                             f"got {self.name!r}")
        check_fields(self)
        for f in ("fw_bits", "bw_bits"):
            if not self.takes_bits and getattr(self, f) is not None:
                raise ValueError(f"ModeSpec.{f} must be unset for mode {self.name}, "
                                 f"got {getattr(self, f)}")
            if self.takes_bits and getattr(self, f) is None:
                raise TypeError(f"ModeSpec.{f} must be set for mode {self.name} (an integer "
                                f"in {BITS_RANGE[0]}..{BITS_RANGE[1]}), got None")
        if COMPARISONS[self.name].adaptive:  # its bits are the widest of each ladder
            ladder("forward", self.fw_bits)
            ladder("backward", self.bw_bits)
        if self.grad_mode not in GRAD_COMPRESSORS:
            raise ValueError(f"ModeSpec.grad_mode must be one of {', '.join(GRAD_COMPRESSORS)}, "
                             f"got {self.grad_mode!r}")
        if self.coords is not None and (self.name not in COORD_MODES or isinstance(
                self.coords, bool) or not isinstance(self.coords, int) or self.coords < 1):
            raise ValueError(f"ModeSpec.coords: mode {self.name} "
                             + ("takes k >= 1 coordinates a token" if self.name in COORD_MODES
                                else "has no in-graph half, so it takes no coordinates")
                             + f", got {self.coords!r}")
        if not self.compresses_dp and self.grad_mode != "qadam":
            raise ValueError(f"ModeSpec.grad_mode selects the gradient compressor of "
                             f"{', '.join(_DP_MODES)} only; mode {self.name} got "
                             f"{self.grad_mode!r}")

    @property
    def takes_bits(self) -> bool:
        return COMPARISONS[self.name].takes_bits

    @property
    def compresses_dp(self) -> bool:
        return COMPARISONS[self.name].data_parallel

    @property
    def plugins(self) -> tuple[Plugin, ...]:
        """The plug-ins its cells run (registry.plugins_of): () for the built-in modes."""
        return plugins_of(self.name, self.grad_mode if self.compresses_dp else None)

    @property
    def label(self) -> str:
        """File-name-safe label, e.g. 'aqsgd-fw2-bw4', 'aqsgd+gc-qadam-fw2-bw4' (aqsgd+gc
        always names its gradient compressor, so no table or figure hides it)."""
        coords = "" if self.coords is None else f"-k{self.coords}"
        if not self.takes_bits:
            return self.name + coords
        grad = f"-{self.grad_mode}" if self.compresses_dp else ""
        return f"{self.name}{grad}-fw{self.fw_bits}-bw{self.bw_bits}{coords}"

    def __str__(self) -> str:
        """The form parse_mode reads back: 'aqsgd:2/4', 'aqsgd+gc/qadam:2/4', 'ssn:160'."""
        coords = "" if self.coords is None else f":{self.coords}"
        if not self.takes_bits:
            return self.name + coords
        grad = f"/{self.grad_mode}" if self.compresses_dp else ""
        return f"{self.name}{grad}:{self.fw_bits}/{self.bw_bits}{coords}"


# a directory spelling's tail after the mode's name: '[GRAD-]fwN-bwM[-kK]' or 'kK'
# (ModeSpec.label)
_LABEL_BITS = re.compile(r"(?:(?:(?P<grad>[^-]+)-)?fw(?P<fw>\d+)-bw(?P<bw>\d+))?"
                         r"(?:-?k(?P<k>\d+))?")
# what a cell's name or a legend adds to a mode: replicas ('-dp2', ' dp2'), a variant
_LAYOUT = re.compile(r"(?P<mode>.*?)[ -]dp(?P<n>\d+)|(?P<v>.*?) ?\[(?P<var>.+)\]")


def _from_label(text: str) -> str:
    """The command-line spelling of a directory spelling ('aqsgd-fw2-bw4' ->
    'aqsgd:2/4', 'aqsgd+gc-ef21-fw2-bw4' -> 'aqsgd+gc/ef21:2/4'); `text` itself when it
    is none (the longest registered name first: 'aqsgd-lowbits-fw2-bw4')."""
    for name in sorted(MODE_NAMES, key=len, reverse=True):
        match = _LABEL_BITS.fullmatch(text[len(name) + 1:]) if text.startswith(
            name + "-") else None
        if match and (match["fw"] or match["k"]):
            grad = f"/{match['grad']}" if match["grad"] else ""
            bits = f":{match['fw']}/{match['bw']}" if match["fw"] else ""
            return f"{name}{grad}{bits}" + (f":{match['k']}" if match["k"] else "")
    return text


def _refuse_layout(text: str) -> None:
    """A ValueError for replicas or a variant written into a mode ('fp32-dp2',
    'fp32 dp2', 'aqsgd:2/4 [dropout0]'), naming what sets them."""
    match = _LAYOUT.fullmatch(text)
    if match and match["n"]:
        raise ValueError(f"'{text[len(match['mode']):].strip()}' is {match['n']} "
                         f"data-parallel replicas, no part of a mode: give the mode "
                         f"{match['mode']!r} and --replicas {match['n']} (a sweep file: "
                         f"workload.replicas)")
    if match and match["var"]:
        raise ValueError(f"'[{match['var']}]' is a variant, no part of a mode: "
                         f"give the mode {match['v']!r} and the variant in a sweep file's "
                         f"`variants:`")


def parse_mode(text: str) -> ModeSpec:
    """'fp32', 'bf16', 'aqsgd', 'aqsgd:2/4', 'directq:4/8', 'aqsgd-lowbits:2/4',
    'aqsgd+gc:2/4' (QuantizedAdam), 'aqsgd+gc/ef21:2/4', 'ssn:160' (k coordinates) ->
    ModeSpec; the directory spellings 'aqsgd-fw2-bw4', 'aqsgd+gc-ef21-fw2-bw4', 'ssn-k160'
    likewise (module docstring)."""
    text = text.strip()
    _refuse_layout(text)
    text = _from_label(text)
    head, sep, bits = text.partition(":")
    name, slash, grad = head.partition("/")
    if name not in MODE_NAMES:
        raise ValueError(f"mode must be one of {', '.join(MODE_NAMES)} "
                         f"(optionally NAME:FW/BW), got {text!r}")
    mode = COMPARISONS[name]
    if slash and not mode.data_parallel:
        raise ValueError(f"only {', '.join(_DP_MODES)} selects a gradient compressor "
                         f"(NAME/GRAD), got {text!r}")
    if slash and grad not in GRAD_COMPRESSORS:
        raise ValueError(f"gradient compressor must be one of {', '.join(GRAD_COMPRESSORS)} "
                         f"({name}/GRAD:FW/BW), got {text!r}")
    extra = {"grad_mode": grad} if slash else {}
    if name in COORD_MODES:  # NAME:K, or NAME:FW/BW:K for one that takes bits too
        bits, k_text = bits.partition(":")[::2] if mode.takes_bits else ("", bits)
        if k_text and not k_text.strip().isdigit():
            form = f"{name}:FW/BW:K" if mode.takes_bits else f"{name}:K"
            raise ValueError(f"mode {name} takes its in-graph half's coordinates as {form} "
                             f"with an integer K, got {text!r}")
        if k_text:
            extra["coords"] = int(k_text)
        sep = sep if bits else ""
    if not mode.takes_bits:
        if sep:
            raise ValueError(f"mode {name} takes no bit widths, got {text!r}")
        return ModeSpec(name, **extra)
    if not sep:
        fw, bw = DEFAULT_BITS[name]
        return ModeSpec(name, fw, bw, **extra)
    fw_text, slash, bw_text = bits.partition("/")
    if not slash or not fw_text.strip().isdigit() or not bw_text.strip().isdigit():
        raise ValueError(f"mode bit widths must read NAME:FW/BW with integers, got {text!r}")
    return ModeSpec(name, int(fw_text), int(bw_text), **extra)


def first_repeat(modes: Sequence[ModeSpec]) -> tuple[int, int] | None:
    """(j, k), j < k, where modes[k] is modes[j] again (the first such k), or None. A
    sweep runs each mode once, so a mode listed twice is refused where it is listed
    (docs/results-schema.md, "Mode spellings": aqsgd and aqsgd:2/4 are one mode)."""
    seen: dict[ModeSpec, int] = {}
    for k, mode in enumerate(modes):
        if mode in seen:
            return seen[mode], k
        seen[mode] = k
    return None
