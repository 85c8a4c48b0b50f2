"""Model configuration: the shape of a GPT-2, named presets, and how its blocks
split over pipeline stages.

    from aqsgd.model.config import PRESETS, layer_split
    cfg = PRESETS["tiny"].replace(seq_len=32)
    layer_split(cfg.n_layer, 2)            # [range(0, 1), range(1, 2)]

Nothing here allocates a tensor: parameter counts come from the shapes alone.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from pydantic import Field

if TYPE_CHECKING:
    from transformers import GPT2Config

__all__ = [
    "Heads",
    "Layers",
    "MlpWidth",
    "ModelConfig",
    "SHAPE_FIELDS",
    "SeqLen",
    "VocabSize",
    "Width",
    "PRESETS",
    "PipelineDefaults",
    "TINY_FAMILY",
    "TINY_PIPELINE",
    "layer_split",
    "tiny_preset_for",
]

_ACTIVATIONS = ("gelu_new", "gelu", "relu")


# The shape's settings, declared once (the harness's Workload offers each as an override
# of the preset's: bench.harness.workload).
Layers = Annotated[int, Field(ge=1, description="transformer blocks (n_layer)")]
Width = Annotated[int, Field(ge=1, description="model width: channels of an activation")]
Heads = Annotated[int, Field(ge=1, description="attention heads (they divide the width)")]
VocabSize = Annotated[int, Field(ge=1, description="vocabulary: rows of the embedding and "
                                                   "of the head")]
SeqLen = Annotated[int, Field(ge=2, description="tokens per window (the context length)")]
MlpWidth = Annotated[int, Field(ge=1, description="MLP width (none: 4 x the width)")]
SHAPE_FIELDS = ("n_layer", "n_embd", "n_head", "vocab_size", "seq_len", "n_inner")


@dataclass(frozen=True)
class ModelConfig:
    """Shape of a GPT-2 model. `seq_len` is the context length (rows of wpe)."""

    n_layer: Layers
    n_embd: Width
    n_head: Heads
    vocab_size: VocabSize
    seq_len: SeqLen
    dropout: float = 0.1
    activation: str = "gelu_new"  # GPT-2's tanh approximation; "gelu" is cheaper on CPU
    n_inner: MlpWidth | None = None  # None = 4 * n_embd
    layer_norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        for name in ("n_layer", "n_embd", "n_head", "vocab_size", "seq_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"ModelConfig.{name} must be a positive int, got {value!r}")
        if self.n_embd % self.n_head != 0:
            raise ValueError(
                f"ModelConfig.n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"ModelConfig.dropout must be in [0, 1), got {self.dropout!r}")
        if self.activation not in _ACTIVATIONS:
            raise ValueError(
                f"ModelConfig.activation must be one of {_ACTIVATIONS}, got {self.activation!r}"
            )
        if self.n_inner is not None and (not isinstance(self.n_inner, int) or self.n_inner < 1):
            raise ValueError(
                f"ModelConfig.n_inner must be None or a positive int, got {self.n_inner!r}"
            )
        if not self.layer_norm_eps > 0:
            raise ValueError(f"ModelConfig.layer_norm_eps must be > 0, got {self.layer_norm_eps!r}")

    @property
    def inner_dim(self) -> int:
        return self.n_inner if self.n_inner is not None else 4 * self.n_embd

    def replace(self, **changes) -> ModelConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def config_hash(self) -> str:
        """Short stable hash of every field (keys cached checkpoints)."""
        blob = json.dumps(self.to_dict(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def hf_config(self) -> GPT2Config:
        """The transformers config of the same shape (SDPA attention), for Hugging Face
        checkpoints and the block equivalence tests; the stages' blocks
        (aqsgd.model.block) do not use it."""
        from transformers import GPT2Config  # imported here: only those callers need it

        return GPT2Config(
            vocab_size=self.vocab_size,
            n_positions=self.seq_len,
            n_embd=self.n_embd,
            n_layer=self.n_layer,
            n_head=self.n_head,
            n_inner=self.n_inner,
            activation_function=self.activation,
            resid_pdrop=self.dropout,
            embd_pdrop=self.dropout,
            attn_pdrop=self.dropout,
            layer_norm_epsilon=self.layer_norm_eps,
            bos_token_id=None,
            eos_token_id=None,
            attn_implementation="sdpa",
        )

    def num_parameters(self, untied_head: bool = True) -> int:
        """Parameter count from the shapes alone (no allocation). With
        `untied_head=False` this is GPT-2's published count (head tied to wte)."""
        d, v, f = self.n_embd, self.vocab_size, self.inner_dim
        block = (
            2 * 2 * d  # ln_1, ln_2
            + d * 3 * d
            + 3 * d  # c_attn
            + d * d
            + d  # attn.c_proj
            + d * f
            + f  # mlp.c_fc
            + f * d
            + d  # mlp.c_proj
        )
        total = v * d + self.seq_len * d + self.n_layer * block + 2 * d  # + ln_f
        return total + (v * d if untied_head else 0)


PRESETS: dict[str, ModelConfig] = {
    # Sized so that, on 2 CPU cores with 2 stages (1 block each, one thread per stage),
    # fp32 traffic per micro-batch at 100 Mbit/s is about 3x a stage's compute: see
    # `python -m bench.micro.stages --preset tiny` and TINY_PIPELINE. Measured on one thread:
    # a block costs ~0.15 us per activation element whatever the width below 256, while
    # traffic costs 0.64 us per element, so width 128 is near the best ratio (64 is worse:
    # fixed per-op costs). Fewer blocks, 2 heads, exact GELU (one kernel instead of the
    # tanh formula) and a 384-token vocabulary (the LM head dominates the last stage;
    # 512 tokens cost ~10% of the ratio) each buy a little more.
    "tiny": ModelConfig(
        n_layer=2, n_embd=128, n_head=2, vocab_size=384, seq_len=64, activation="gelu"
    ),
    # The `tiny` family for deeper pipelines: one block per stage (n_layer = stages) with
    # tiny's width, so a boundary carries tiny's bytes (0.52 MB of fp32 per micro-batch each
    # way, 84 ms at 100 Mbit/s fwd+bwd). All ranks share the 2 cores here, so a stage must be
    # cheaper than tiny's to stay communication-bound: the MLP is n_embd wide (not 4x) and
    # dropout is off, which together take a stage from ~25 to ~11 ms per micro-batch alone
    # on one core (the last stage, with the head, ~31 -> ~16 ms). Measured with every rank
    # running (`python -m bench.micro.stages --metrics RUN/metrics`): see TINY_FAMILY.
    "tiny-4": ModelConfig(
        n_layer=4, n_embd=128, n_head=2, vocab_size=384, seq_len=64, activation="gelu",
        n_inner=128, dropout=0.0,
    ),
    "tiny-8": ModelConfig(
        n_layer=8, n_embd=128, n_head=2, vocab_size=384, seq_len=64, activation="gelu",
        n_inner=128, dropout=0.0,
    ),
    # The size ladder of the convergence sweeps (scenarios/sweeps/convergence-size.yaml):
    # tiny's recipe (4x MLP, dropout 0.1, 64 channels a head, its tokenizer and task) at
    # twice its width (2 blocks of 256, 1.8M parameters), then twice its width and blocks
    # (4 of 256, 3.4M), both pre-trained here like tiny (aqsgd.model.pretrain).
    "w256-2": ModelConfig(
        n_layer=2, n_embd=256, n_head=4, vocab_size=384, seq_len=64, activation="gelu"
    ),
    "w256-4": ModelConfig(
        n_layer=4, n_embd=256, n_head=4, vocab_size=384, seq_len=64, activation="gelu"
    ),
    "gpt2": ModelConfig(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, seq_len=1024),
    "gpt2-medium": ModelConfig(n_layer=24, n_embd=1024, n_head=16, vocab_size=50257, seq_len=1024),
    "gpt2-large": ModelConfig(n_layer=36, n_embd=1280, n_head=20, vocab_size=50257, seq_len=1024),
    # The AQ-SGD paper's model (its end-to-end runs: 8 stages of 6 blocks).
    "gpt2-xl": ModelConfig(n_layer=48, n_embd=1600, n_head=25, vocab_size=50257, seq_len=1024),
    # ProtocolNanoGPT's shape (2026): 8 blocks of width 1024, 8 heads of 128, vocabulary
    # 50304 (50257 rounded up to a multiple of 64), sequence 1024, one block per stage. Its
    # blocks differ in detail (they are modded-nanogpt's); the bytes at a boundary and the
    # FLOPs of a stage are the shape's, which is what a step time depends on.
    "nanogpt-8x1024": ModelConfig(n_layer=8, n_embd=1024, n_head=8, vocab_size=50304,
                                  seq_len=1024, dropout=0.0),
}


@dataclass(frozen=True)
class PipelineDefaults:
    """Pipeline shape a preset was sized for: the defaults of bench.micro.stages."""

    num_stages: int
    micro_batch_size: int
    num_micro_batches: int
    threads_per_stage: int
    link_rate_mbit: float

    def __post_init__(self) -> None:
        for name in ("num_stages", "micro_batch_size", "num_micro_batches", "threads_per_stage"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"PipelineDefaults.{name} must be a positive int, got {value!r}")
        if not self.link_rate_mbit > 0:
            raise ValueError(
                f"PipelineDefaults.link_rate_mbit must be > 0, got {self.link_rate_mbit!r}"
            )


# Micro-batch 16 x 64 tokens x 128 channels: 0.52 MB of fp32 activations forward and as
# much gradient backward per micro-batch, about 84 ms at 100 Mbit/s per boundary.
TINY_PIPELINE = PipelineDefaults(
    num_stages=2,
    micro_batch_size=16,
    num_micro_batches=4,
    threads_per_stage=1,
    link_rate_mbit=100.0,
)


# The pipeline depth each `tiny` preset was sized for (one block per stage; the
# micro-batch shape is TINY_PIPELINE's). tiny-4 and tiny-8, 100 Mbit/s fp32 traffic per
# boundary over the slowest stage's compute_s in a real run with every rank on this 2-core
# machine: see docs/wide-area.md for the figures and the load they were measured under.
TINY_FAMILY: dict[str, int] = {"tiny": 2, "tiny-4": 4, "tiny-8": 8}


def tiny_preset_for(stages: int) -> str:
    """The `tiny` preset sized for a pipeline of `stages` stages (TINY_FAMILY); a
    ValueError naming the depths there are for any other."""
    for name, depth in TINY_FAMILY.items():
        if depth == stages:
            return name
    sized = ", ".join(f"{depth} ({name})" for name, depth in TINY_FAMILY.items())
    raise ValueError(f"no tiny preset is sized for {stages!r} stages; there are presets for "
                     f"{sized}: name one with its stages, or pick another depth")


def layer_split(n_layer: int, num_stages: int) -> list[range]:
    """Balanced contiguous split of n_layer blocks over num_stages; earlier stages
    take the extra block when it does not divide (the last stage also holds the head)."""
    if not isinstance(n_layer, int) or n_layer < 1:
        raise ValueError(f"n_layer must be a positive int, got {n_layer!r}")
    if not isinstance(num_stages, int) or num_stages < 1:
        raise ValueError(f"num_stages must be a positive int, got {num_stages!r}")
    if num_stages > n_layer:
        raise ValueError(
            f"num_stages ({num_stages}) must not exceed n_layer ({n_layer}): "
            "every stage needs at least one block"
        )
    base, extra = divmod(n_layer, num_stages)
    ranges, start = [], 0
    for s in range(num_stages):
        size = base + (1 if s < extra else 0)
        ranges.append(range(start, start + size))
        start += size
    return ranges
