"""GPT-2 models that split into pipeline stages.

    python -m aqsgd.model.gpt2 --measure tiny  # compute vs 100 Mbit/s fp32 traffic per stage
    python -m aqsgd.model.gpt2 --measure gpt2 --stages 4 --micro-batch-size 1

A model is a `GPT2Stage`: optional embeddings, a run of GPT-2 blocks (transformers'
`GPT2Block`), optional final norm and LM head. The full model is the one stage that
holds everything; `build_stage` cuts stage s of n out of it, and `init_stage` builds
the same stage directly without allocating the rest. Parameter names are global
(`blocks.7.attn.c_attn.weight` on whichever stage holds layer 7), so a stage's
state dict is a subset of the full model's and gradients compare name by name.

Note [untied LM head]: GPT-2 ties the LM head to the token embedding (wte). In a
pipeline the embedding lives on the first rank and the head on the last, so a tied
weight would need an extra all-reduce of its gradient between them every step,
traffic that the paper's setup does not count. We untie them: the head starts as a
copy of wte when loading pretrained GPT-2 weights and is trained independently.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GPT2Config
from transformers.models.gpt2.modeling_gpt2 import GPT2Block

__all__ = [
    "ModelConfig",
    "PRESETS",
    "PipelineDefaults",
    "TINY_PIPELINE",
    "GPT2Stage",
    "StageTiming",
    "layer_split",
    "build_full_model",
    "build_stage",
    "init_stage",
    "load_pretrained_state",
    "lm_loss",
    "measure_stages",
    "comm_to_compute_ratio",
    "main",
]

_ACTIVATIONS = ("gelu_new", "gelu", "relu")
_INIT_STD = 0.02


@dataclass(frozen=True)
class ModelConfig:
    """Shape of a GPT-2 model. `seq_len` is the context length (rows of wpe)."""

    n_layer: int
    n_embd: int
    n_head: int
    vocab_size: int
    seq_len: int
    dropout: float = 0.1
    activation: str = "gelu_new"  # GPT-2's tanh approximation; "gelu" is cheaper on CPU
    n_inner: int | None = None  # MLP width; None = 4 * n_embd
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
        """The transformers config for the blocks. SDPA attention: with no mask it
        applies the causal mask itself (the eager path would apply none)."""
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
    # `python -m aqsgd.model.gpt2 --measure tiny` and TINY_PIPELINE. Measured on one thread:
    # a block costs ~0.15 us per activation element whatever the width below 256, while
    # traffic costs 0.64 us per element, so width 128 is near the best ratio (64 is worse:
    # fixed per-op costs). Fewer blocks, 2 heads, exact GELU (one kernel instead of the
    # tanh formula) and a 384-token vocabulary (the LM head dominates the last stage;
    # 512 tokens cost ~10% of the ratio) each buy a little more.
    "tiny": ModelConfig(
        n_layer=2, n_embd=128, n_head=2, vocab_size=384, seq_len=64, activation="gelu"
    ),
    "gpt2": ModelConfig(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, seq_len=1024),
    "gpt2-medium": ModelConfig(n_layer=24, n_embd=1024, n_head=16, vocab_size=50257, seq_len=1024),
    "gpt2-large": ModelConfig(n_layer=36, n_embd=1280, n_head=20, vocab_size=50257, seq_len=1024),
    "gpt2-xl": ModelConfig(n_layer=48, n_embd=1600, n_head=25, vocab_size=50257, seq_len=1024),
}


@dataclass(frozen=True)
class PipelineDefaults:
    """Pipeline shape a preset was sized for (the runtime may read it as defaults)."""

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


class Embeddings(nn.Module):
    """Token plus learned position embedding, then dropout."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.seq_len, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)  # (L,)
        return self.drop(self.wte(input_ids) + self.wpe(positions))  # (B, L, D)


class LMHead(nn.Module):
    """Final layer norm and the (untied, see Note [untied LM head]) output projection."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln_f = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_eps)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.ln_f(hidden))  # (B, L, V)


class GPT2Stage(nn.Module):
    """Blocks `layers` of a GPT-2, with the embeddings if `first`, the head if `last`.

    first: input_ids (B, L) int64 -> ...; otherwise hidden (B, L, D) -> ...
    last: ... -> logits (B, L, V); otherwise ... -> hidden (B, L, D).
    """

    def __init__(self, cfg: ModelConfig, layers: range, first: bool, last: bool):
        super().__init__()
        self.cfg = cfg
        self.layers = layers
        self.first = first
        self.last = last
        hf = cfg.hf_config()
        self.embed = Embeddings(cfg) if first else None
        # Keyed by global layer index: names match the full model's.
        self.blocks = nn.ModuleDict({str(i): GPT2Block(hf, layer_idx=i) for i in layers})
        self.head = LMHead(cfg) if last else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.first:
            if x.dtype != torch.long or x.ndim != 2:
                raise ValueError(
                    f"stage input must be int64 (B, L) token ids, got {x.dtype} {tuple(x.shape)}"
                )
            if x.shape[1] > self.cfg.seq_len:
                raise ValueError(
                    f"sequence length {x.shape[1]} exceeds ModelConfig.seq_len {self.cfg.seq_len}"
                )
            h = self.embed(x)  # (B, L, D)
        else:
            if x.ndim != 3 or x.shape[-1] != self.cfg.n_embd:
                raise ValueError(
                    f"stage input must be hidden (B, L, {self.cfg.n_embd}), got {tuple(x.shape)}"
                )
            h = x
        for block in self.blocks.values():
            h = block(h)  # (B, L, D); GPT2Block returns a tensor in transformers 5
        return self.head(h) if self.last else h


def lm_loss(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross entropy: position t predicts token t + 1."""
    if logits.shape[:2] != input_ids.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} do not match input_ids {tuple(input_ids.shape)}"
        )
    vocab = logits.shape[-1]
    pred = logits[:, :-1].reshape(-1, vocab).float()  # (B * (L-1), V)
    target = input_ids[:, 1:].reshape(-1)  # (B * (L-1),)
    return F.cross_entropy(pred, target)


# ---------------------------------------------------------------- initialisation


def _param_seed(seed: int, name: str) -> int:
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


@torch.no_grad()
def _init_parameter(name: str, param: torch.Tensor, cfg: ModelConfig, seed: int) -> None:
    """GPT-2's initialisation, one generator per parameter name, so that any stage
    built alone holds exactly the weights of the same layers in the full model."""
    leaf = name.rsplit(".", 1)[-1]
    if ".ln_" in name:  # ln_1, ln_2, ln_f
        param.fill_(1.0 if leaf == "weight" else 0.0)
        return
    if leaf == "bias":
        param.zero_()
        return
    std = _INIT_STD
    if name.endswith("c_proj.weight"):
        std /= math.sqrt(2 * cfg.n_layer)  # GPT-2's scaling of residual projections
    gen = torch.Generator().manual_seed(_param_seed(seed, name))
    param.copy_(torch.randn(param.shape, generator=gen) * std)


def _empty_stage(cfg: ModelConfig, stage: int, num_stages: int) -> GPT2Stage:
    if not isinstance(stage, int) or not 0 <= stage < num_stages:
        raise ValueError(f"stage must be in [0, {num_stages}), got {stage!r}")
    layers = layer_split(cfg.n_layer, num_stages)[stage]
    with torch.device("meta"):
        return GPT2Stage(cfg, layers, first=stage == 0, last=stage == num_stages - 1)


def init_stage(
    cfg: ModelConfig,
    stage: int,
    num_stages: int,
    seed: int = 0,
    pretrained: str | os.PathLike | Mapping[str, torch.Tensor] | None = None,
) -> GPT2Stage:
    """Stage `stage` of `num_stages`, on CPU, without building the others: random
    GPT-2 init from `seed`, or the matching tensors of `pretrained` (a state dict
    in this module's or Hugging Face's naming, or a local model directory / cached id)."""
    module = _empty_stage(cfg, stage, num_stages)
    if pretrained is not None:
        state = load_pretrained_state(pretrained, cfg)
        _load_subset(module, state)
        return module
    module.to_empty(device="cpu")
    for name, param in module.named_parameters():
        _init_parameter(name, param, cfg, seed)
    return module


def build_full_model(
    cfg: ModelConfig,
    seed: int = 0,
    pretrained: str | os.PathLike | Mapping[str, torch.Tensor] | None = None,
) -> GPT2Stage:
    """The whole model: input_ids (B, L) -> logits (B, L, V)."""
    return init_stage(cfg, 0, 1, seed=seed, pretrained=pretrained)


def build_stage(
    source: nn.Module | Mapping[str, torch.Tensor],
    cfg: ModelConfig,
    stage: int,
    num_stages: int,
) -> GPT2Stage:
    """Cut stage `stage` of `num_stages` out of a full model (or its state dict).
    The stage holds copies of the source's tensors, so it trains independently."""
    if isinstance(source, nn.Module):
        state = source.state_dict()
    else:
        state = load_pretrained_state(source, cfg)  # also accepts HF names
    module = _empty_stage(cfg, stage, num_stages)
    _load_subset(module, state)
    return module


def _load_subset(module: GPT2Stage, state: Mapping[str, torch.Tensor]) -> None:
    wanted = module.state_dict()
    missing = [k for k in wanted if k not in state]
    if missing:
        raise KeyError(
            f"source state lacks {len(missing)} tensors of this stage, e.g. {missing[:3]}"
        )
    picked = {}
    for key, meta in wanted.items():
        tensor = state[key]
        if tuple(tensor.shape) != tuple(meta.shape):
            raise ValueError(
                f"{key}: source shape {tuple(tensor.shape)} != model shape {tuple(meta.shape)}"
            )
        picked[key] = tensor.detach().to("cpu", torch.float32).clone()
    module.load_state_dict(picked, strict=True, assign=True)


# ---------------------------------------------------------------- pretrained weights


def _from_hf_names(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Hugging Face GPT2LMHeadModel names -> this module's names."""
    out = {}
    for key, tensor in state.items():
        name = key.removeprefix("transformer.")
        if name.startswith(("wte.", "wpe.")):
            out["embed." + name] = tensor
        elif name.startswith("h."):
            out["blocks." + name[2:]] = tensor
        elif name.startswith("ln_f."):
            out["head." + name] = tensor
        elif name == "lm_head.weight":
            out["head.lm_head.weight"] = tensor
    if "head.lm_head.weight" not in out and "embed.wte.weight" in out:
        out["head.lm_head.weight"] = out["embed.wte.weight"]  # tied in the checkpoint
    # Untie (Note [untied LM head]): never share storage with wte.
    if "head.lm_head.weight" in out:
        out["head.lm_head.weight"] = out["head.lm_head.weight"].clone()
    return out


def _check_hf_config(hf: GPT2Config, cfg: ModelConfig, where: str) -> None:
    pairs = {
        "n_layer": hf.n_layer,
        "n_embd": hf.n_embd,
        "n_head": hf.n_head,
        "vocab_size": hf.vocab_size,
        "activation": hf.activation_function,
    }
    for name, theirs in pairs.items():
        if getattr(cfg, name) != theirs:
            raise ValueError(
                f"pretrained model {where} has {name}={theirs!r}, "
                f"ModelConfig has {getattr(cfg, name)!r}"
            )
    if hf.n_positions < cfg.seq_len:
        raise ValueError(
            f"pretrained model {where} has n_positions={hf.n_positions} "
            f"< ModelConfig.seq_len={cfg.seq_len}"
        )


def _read_state_file(path: str) -> dict[str, torch.Tensor]:
    if path.endswith(".safetensors"):
        from safetensors.torch import load_file

        return load_file(path)
    state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, Mapping):
        raise ValueError(f"{path}: expected a state dict, got {type(state).__name__}")
    return dict(state)


def _resolve_hub_repo_dir(where: str) -> str:
    """A hub cache repo folder (models--owner--name, holding refs/ and snapshots/) ->
    its snapshot for refs/main (or its only snapshot); any other path unchanged."""
    snapshots = os.path.join(where, "snapshots")
    if not os.path.isdir(snapshots):
        return where
    ref = os.path.join(where, "refs", "main")
    if os.path.isfile(ref):
        with open(ref) as handle:
            return os.path.join(snapshots, handle.read().strip())
    found = sorted(os.listdir(snapshots))
    if len(found) != 1:
        raise FileNotFoundError(f"{where}: no refs/main and {len(found)} snapshots; pass one")
    return os.path.join(snapshots, found[0])


def load_pretrained_state(
    source: str | os.PathLike | Mapping[str, torch.Tensor], cfg: ModelConfig
) -> dict[str, torch.Tensor]:
    """Full-model state dict in this module's names. `source`: a state dict (this
    module's or HF naming), a state-dict file (.pt, .bin via torch.load with
    weights_only; .safetensors), a directory saved by `save_pretrained`, a repo folder of
    a Hugging Face hub cache (models--gpt2), or a model id already in the default local
    cache. Never downloads (local_files_only)."""
    if not isinstance(source, Mapping) and os.path.isfile(source):
        source = _read_state_file(os.fspath(source))
    if isinstance(source, Mapping):
        state = dict(source)
        if any(k.startswith(("transformer.", "lm_head.")) for k in state):
            state = _from_hf_names(state)
    else:
        from transformers import GPT2LMHeadModel

        where = _resolve_hub_repo_dir(os.fspath(source))
        try:
            hf_model = GPT2LMHeadModel.from_pretrained(where, local_files_only=True)
        except OSError as err:
            raise FileNotFoundError(
                f"no local GPT-2 weights at {where!r} (state-dict file, directory or cached "
                f"model id; downloads are disabled): {err}"
            ) from err
        _check_hf_config(hf_model.config, cfg, where)
        state = _from_hf_names(hf_model.state_dict())
    wpe = state.get("embed.wpe.weight")
    if wpe is not None and wpe.shape[0] > cfg.seq_len:
        state["embed.wpe.weight"] = wpe[: cfg.seq_len]  # positions beyond seq_len never used
    return state


# ---------------------------------------------------------------- measurement


@dataclass(frozen=True)
class StageTiming:
    """Per-micro-batch costs of one stage; comm is the boundary after it (fwd + bwd)."""

    stage: int
    layers: range
    compute_ms: float  # forward + backward wall time, median
    compute_spread_ms: float  # interquartile range of the wall time
    compute_cpu_ms: float  # this process's CPU time, median (robust to a loaded host)
    boundary_bytes: int  # fp32 activation bytes sent forward (gradient back is the same)
    comm_ms: float  # (activation + gradient) at the link rate; 0 for the last stage


def _time_stage(
    module: GPT2Stage, cfg: ModelConfig, micro_batch_size: int, repeats: int
) -> tuple[list[float], list[float]]:
    b, seq, d = micro_batch_size, cfg.seq_len, cfg.n_embd
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, cfg.vocab_size, (b, seq), generator=gen)
    wall, cpu = [], []
    for _ in range(repeats + 1):  # first call warms allocators and kernels
        x = ids if module.first else torch.randn(b, seq, d, generator=gen).requires_grad_()
        start, start_cpu = time.perf_counter(), time.process_time()
        out = module(x)
        if module.last:
            lm_loss(out, ids).backward()
        else:
            out.backward(torch.ones_like(out))
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        module.zero_grad(set_to_none=True)
    return wall[1:], cpu[1:]


def measure_stages(
    cfg: ModelConfig,
    num_stages: int,
    micro_batch_size: int,
    threads: int = 1,
    link_rate_mbit: float = 100.0,
    repeats: int = 20,
) -> list[StageTiming]:
    """Forward+backward time of each stage (training mode, dropout on) on `threads`
    threads, and the fp32 traffic time of the boundary after it at `link_rate_mbit`."""
    if repeats < 2:
        raise ValueError(f"repeats must be >= 2 (for a spread), got {repeats!r}")
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        rows = []
        for s in range(num_stages):
            module = init_stage(cfg, s, num_stages, seed=0).train()
            wall, cpu = _time_stage(module, cfg, micro_batch_size, repeats)
            q = statistics.quantiles(wall, n=4)
            last = s == num_stages - 1
            nbytes = 0 if last else micro_batch_size * cfg.seq_len * cfg.n_embd * 4
            comm_ms = 2 * nbytes * 8 / (link_rate_mbit * 1e6) * 1e3
            rows.append(
                StageTiming(s, module.layers, statistics.median(wall) * 1e3, (q[2] - q[0]) * 1e3,
                            statistics.median(cpu) * 1e3, nbytes, comm_ms)
            )  # fmt: skip
        return rows
    finally:
        torch.set_num_threads(previous)


def comm_to_compute_ratio(rows: list[StageTiming], cpu: bool = False) -> float:
    """Slowest boundary's fp32 traffic time over the slowest stage's compute time:
    the paper's regime needs this well above 1 (compression then pays)."""
    compute = max(r.compute_cpu_ms if cpu else r.compute_ms for r in rows)
    return max(r.comm_ms for r in rows) / compute


def _format_table(cfg_name: str, rows: list[StageTiming], args: argparse.Namespace) -> str:
    lines = [
        f"preset={cfg_name} stages={args.stages} micro_batch={args.micro_batch_size} "
        f"seq_len={PRESETS[cfg_name].seq_len if args.seq_len is None else args.seq_len} "
        f"threads={args.threads} link={args.link_rate_mbit} Mbit/s",
        f"{'stage':>5} {'layers':>6} {'fwd+bwd ms':>10} {'iqr ms':>6} {'cpu ms':>6} "
        f"{'boundary B':>10} {'comm fwd+bwd ms':>15}",
    ]
    for r in rows:
        layers = f"{r.layers.start}-{r.layers.stop - 1}"
        lines.append(
            f"{r.stage:>5} {layers:>6} {r.compute_ms:>10.1f} {r.compute_spread_ms:>6.1f} "
            f"{r.compute_cpu_ms:>6.1f} {r.boundary_bytes:>10} {r.comm_ms:>15.1f}"
        )
    if len(rows) > 1:
        lines.append(
            f"comm / slowest compute: {comm_to_compute_ratio(rows):.2f} (wall), "
            f"{comm_to_compute_ratio(rows, cpu=True):.2f} (cpu)"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m aqsgd.model.gpt2", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--measure", metavar="PRESET", choices=sorted(PRESETS), required=True)
    defaults = TINY_PIPELINE
    parser.add_argument("--stages", type=int, default=defaults.num_stages)
    parser.add_argument("--micro-batch-size", type=int, default=defaults.micro_batch_size)
    parser.add_argument("--threads", type=int, default=defaults.threads_per_stage)
    parser.add_argument("--link-rate-mbit", type=float, default=defaults.link_rate_mbit)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--seq-len", type=int, default=None, help="override the preset's seq_len")
    args = parser.parse_args(argv)
    cfg = PRESETS[args.measure]
    if args.seq_len is not None:
        cfg = cfg.replace(seq_len=args.seq_len)
    rows = measure_stages(
        cfg, args.stages, args.micro_batch_size, args.threads, args.link_rate_mbit, args.repeats
    )
    print(_format_table(args.measure, rows, args))


if __name__ == "__main__":
    main()
