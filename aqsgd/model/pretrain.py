"""The starting checkpoint for fine-tuning, built once and cached.

    python -m aqsgd.model.pretrain --preset tiny --cache-dir .cache

AQ-SGD relies on activations that change slowly, as they do when fine-tuning a
pre-trained model; a randomly initialised model moves too fast. The paper starts
from GPT-2's weights. Here, the `tiny` preset is pre-trained on the standard
library's Python sources (text that is not the pydoc fine-tuning task), once per
(model config, tokenizer, pre-training config), and cached as a plain state dict:

    CACHE/checkpoints/gpt2-<config hash>-tok<tokenizer fingerprint>-pre<hash>.pt
    (+ .json beside it: configs, losses, wall time)

A checkpoint of the same name under the repository's `checkpoints/` folder (SHIPPED_DIR)
is used instead of building one: `make bench`'s tiny-4 ships there, with its recipe, and
`python -m aqsgd.model.shipped check` rebuilds it bit for bit (aqsgd.model.shipped).

Presets too large to pre-train on a CPU (above MAX_PRETRAIN_PARAMS) take GPT-2's
published weights from the local Hugging Face cache when present.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import io
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from aqsgd.data.sources import STDLIB_CHARS, stdlib_sources
from aqsgd.data.tokenizer import Tokenizer, tokenizer_for
from aqsgd.data.windows import build_dataset, split_windows, token_windows
from aqsgd.filecache import atomic_write, build_once, default_cache_dir
from aqsgd.model.config import PRESETS, ModelConfig
from aqsgd.model.gpt2 import build_full_model, lm_loss
from aqsgd.model.weights import load_pretrained_state

__all__ = [
    "MAX_PRETRAIN_PARAMS",
    "SHIPPED_DIR",
    "PretrainConfig",
    "checkpoint_path",
    "existing_checkpoint",
    "estimate_s",
    "pretrain",
    "starting_checkpoint",
    "starting_checkpoint_path",
    "main",
]

MAX_PRETRAIN_PARAMS = 20_000_000
# Starting checkpoints shipped with the repository, named as the cache names them.
SHIPPED_DIR = Path(__file__).resolve().parents[2] / "checkpoints"
# CPU seconds per parameter per token trained, one thread, measured here (the json beside
# each checkpoint keeps its cpu_s) for 400 steps of 32 x 64 tokens: tiny 48 s (1.2e-10),
# tiny-8 69 s (0.9e-10), w256-2 119 s (0.8e-10), w256-4 232 s (0.8e-10; 64 min of wall time
# at a load of 20-65).
PRETRAIN_S_PER_PARAM_TOKEN = 1.0e-10
# Hugging Face ids of GPT-2's published weights, by (n_layer, n_embd).
_HF_GPT2_IDS = {
    (12, 768): ("openai-community/gpt2", "gpt2"),
    (24, 1024): ("openai-community/gpt2-medium", "gpt2-medium"),
    (36, 1280): ("openai-community/gpt2-large", "gpt2-large"),
    (48, 1600): ("openai-community/gpt2-xl", "gpt2-xl"),
}


@dataclass(frozen=True)
class PretrainConfig:
    """Pre-training schedule. `threads` only sets speed, so it is not hashed."""

    steps: int = 400
    batch_size: int = 32  # windows per step
    lr: float = 3e-3  # peak AdamW learning rate; linear warm-up, cosine decay to 10%
    warmup_steps: int = 40
    weight_decay: float = 0.01
    clip: float = 1.0
    seed: int = 0
    eval_batches: int = 4  # batches of held-out windows for the logged losses
    corpus_chars: int = STDLIB_CHARS  # stdlib source characters to train on
    # torch threads while training. One: with more threads than free cores, OpenMP's
    # spinning makes a step ten times slower (measured on the loaded 2-core CI box).
    threads: int | None = 1

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "corpus_chars"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"PretrainConfig.{name} must be a positive int, got {value!r}")
        if not 0 <= self.warmup_steps <= self.steps:
            raise ValueError(
                f"PretrainConfig.warmup_steps must be in [0, steps={self.steps}], "
                f"got {self.warmup_steps!r}"
            )
        if not self.lr > 0:
            raise ValueError(f"PretrainConfig.lr must be > 0, got {self.lr!r}")
        if self.weight_decay < 0 or self.clip < 0 or self.eval_batches < 0:
            raise ValueError(
                "PretrainConfig.weight_decay, clip, eval_batches must be >= 0, got "
                f"{self.weight_decay!r}, {self.clip!r}, {self.eval_batches!r}"
            )
        if self.threads is not None and (not isinstance(self.threads, int) or self.threads < 1):
            raise ValueError(f"PretrainConfig.threads must be None or >= 1, got {self.threads!r}")

    def config_hash(self) -> str:
        fields = dataclasses.asdict(self)
        del fields["threads"]
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:12]


def checkpoint_path(
    cfg: ModelConfig, cache_dir: str | Path, tokenizer: Tokenizer, pretrain_cfg: PretrainConfig
) -> Path:
    name = f"gpt2-{cfg.config_hash()}-tok{tokenizer.fingerprint}-pre{pretrain_cfg.config_hash()}.pt"
    return Path(cache_dir) / "checkpoints" / name


def existing_checkpoint(path: Path) -> Path | None:
    """The checkpoint named `path` (checkpoint_path) when there is one: the cached file,
    else the one of its name shipped in SHIPPED_DIR; None when it must be built."""
    if path.exists():
        return path
    shipped = SHIPPED_DIR / path.name
    return shipped if shipped.exists() else None


def estimate_s(cfg: ModelConfig, pretrain_cfg: PretrainConfig = PretrainConfig()) -> float:
    """About how many seconds pre-training `cfg` takes on one idle core."""
    p = pretrain_cfg
    tokens = p.steps * p.batch_size * cfg.seq_len
    return PRETRAIN_S_PER_PARAM_TOKEN * cfg.num_parameters() * tokens


def _lr_factor(step: int, pcfg: PretrainConfig) -> float:
    if step < pcfg.warmup_steps:
        return (step + 1) / pcfg.warmup_steps
    progress = (step - pcfg.warmup_steps) / max(1, pcfg.steps - pcfg.warmup_steps)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))


@torch.no_grad()
def _eval_loss(model, tokens: torch.Tensor, batch_size: int, batches: int) -> float | None:
    if batches == 0 or tokens.shape[0] == 0:
        return None
    model.eval()
    losses = [
        lm_loss(model(chunk), chunk).item()
        for chunk in tokens[: batches * batch_size].split(batch_size)
    ]
    model.train()
    return sum(losses) / len(losses)


def _train(cfg: ModelConfig, p: PretrainConfig, train: torch.Tensor, task_eval: torch.Tensor,
           log: Callable[[str], None] | None) -> tuple[torch.nn.Module, float, list[float]]:
    """The pre-training loop: (trained model, task loss before, loss of every step)."""
    model = build_full_model(cfg, seed=p.seed).train()
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=p.lr, betas=(0.9, 0.95), weight_decay=p.weight_decay
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: _lr_factor(s, p))
    gen = torch.Generator().manual_seed(p.seed)
    before = _eval_loss(model, task_eval, p.batch_size, p.eval_batches)
    losses = []
    for step in range(p.steps):
        batch = train[torch.randint(0, train.shape[0], (p.batch_size,), generator=gen)]
        loss = lm_loss(model(batch), batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if p.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), p.clip)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        if log is not None and (step + 1) % max(1, p.steps // 10) == 0:
            log(f"step {step + 1}/{p.steps} loss {loss.item():.3f}")
    return model, before, losses


def pretrain(
    cfg: ModelConfig,
    tokenizer: Tokenizer,
    pretrain_cfg: PretrainConfig = PretrainConfig(),
    log: Callable[[str], None] | None = None,
) -> tuple[dict[str, torch.Tensor], dict]:
    """Train `cfg` from a random init on stdlib windows; returns (state dict, stats)."""
    p = pretrain_cfg
    start, start_cpu = time.perf_counter(), time.process_time()
    windows = token_windows(stdlib_sources(p.corpus_chars), tokenizer, cfg.seq_len)
    train, held_out = split_windows(windows, "train"), split_windows(windows, "eval")  # (N, L)
    task_eval = windows[:0]  # the fine-tuning task's held-out windows, if evaluated
    if p.eval_batches:
        task = build_dataset("pydoc", seq_len=cfg.seq_len, tokenizer=tokenizer, split="eval")
        task_eval = task.tokens[: p.eval_batches * p.batch_size]
    # Dropout draws from the global generator: seed it (inside a fork, so the caller's
    # random state is untouched) so that two builds of one key give the same weights.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(p.seed)
        model, before, losses = _train(cfg, p, train, task_eval, log)
    stats = {
        "train_loss_first": losses[0],
        "train_loss_last10": sum(losses[-10:]) / len(losses[-10:]),
        "stdlib_eval_loss": _eval_loss(model, held_out, p.batch_size, p.eval_batches),
        "pydoc_eval_loss_before": before,
        "pydoc_eval_loss_after": _eval_loss(model, task_eval, p.batch_size, p.eval_batches),
        "train_windows": train.shape[0],
        "tokens_seen": p.steps * p.batch_size * cfg.seq_len,
        "wall_s": time.perf_counter() - start,
        "cpu_s": time.process_time() - start_cpu,
        "threads": torch.get_num_threads(),
    }
    return model.state_dict(), stats


def _published_gpt2(cfg: ModelConfig) -> dict[str, torch.Tensor]:
    tried = []
    for repo in _HF_GPT2_IDS.get((cfg.n_layer, cfg.n_embd), ()):
        try:
            return load_pretrained_state(repo, cfg)
        except FileNotFoundError as err:
            tried.append(f"{repo}: {err}")
    raise ValueError(
        f"a {cfg.num_parameters():,}-parameter model is too large to pre-train here "
        f"(limit {MAX_PRETRAIN_PARAMS:,}) and no GPT-2 weights of this shape are in the "
        f"local Hugging Face cache; pass a local weights directory instead. Tried: {tried}"
    )


def starting_checkpoint_path(
    cfg: ModelConfig,
    cache_dir: str | Path | None = None,
    *,
    tokenizer: Tokenizer | None = None,
    pretrain_cfg: PretrainConfig = PretrainConfig(),
    log: Callable[[str], None] | None = None,
    use_shipped: bool = True,
) -> tuple[Path, bool]:
    """(path of the pre-trained state dict, whether this call built it): the cached one,
    else the shipped one of the same name (SHIPPED_DIR; not with use_shipped=False, which
    the rebuild check uses), else built under a file lock, so concurrent workers build it
    once."""
    if cfg.num_parameters() > MAX_PRETRAIN_PARAMS:
        raise ValueError(
            f"pre-training {cfg.num_parameters():,} parameters on a CPU exceeds "
            f"MAX_PRETRAIN_PARAMS={MAX_PRETRAIN_PARAMS:,}; use starting_checkpoint, "
            f"which loads GPT-2's published weights for such presets"
        )
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if tokenizer is None:
        tokenizer = tokenizer_for(cfg.vocab_size, cache_dir)
    path = checkpoint_path(cfg, cache_dir, tokenizer, pretrain_cfg)
    if use_shipped and (ready := existing_checkpoint(path)) is not None:
        return ready, False

    def write(tmp: Path) -> None:
        previous = torch.get_num_threads()
        if pretrain_cfg.threads is not None:
            torch.set_num_threads(pretrain_cfg.threads)
        try:
            state, stats = pretrain(cfg, tokenizer, pretrain_cfg, log)
        finally:
            torch.set_num_threads(previous)
        meta = {
            "model": cfg.to_dict(),
            "tokenizer": {"name": tokenizer.name, "fingerprint": tokenizer.fingerprint},
            "pretrain": dataclasses.asdict(pretrain_cfg),
            "stats": stats,
        }
        sidecar = path.with_suffix(".json")
        atomic_write(sidecar, lambda t: t.write_text(json.dumps(meta, indent=2) + "\n"))
        # Saved through a buffer: to a path, torch names the archive's records after the
        # file (here a random temporary name), and two builds would differ in those bytes.
        buffer = io.BytesIO()
        torch.save(state, buffer)
        tmp.write_bytes(buffer.getvalue())

    built = build_once(path, write)
    return path, built


def starting_checkpoint(
    cfg: ModelConfig,
    cache_dir: str | Path | None = None,
    *,
    tokenizer: Tokenizer | None = None,
    pretrain_cfg: PretrainConfig = PretrainConfig(),
) -> dict[str, torch.Tensor]:
    """Full-model state dict to fine-tune from (pass as `pretrained=` to init_stage):
    GPT-2's published weights for large presets, else the cached pre-trained model."""
    if cfg.num_parameters() > MAX_PRETRAIN_PARAMS:
        return _published_gpt2(cfg)
    path, _ = starting_checkpoint_path(
        cfg, cache_dir, tokenizer=tokenizer, pretrain_cfg=pretrain_cfg
    )
    return load_pretrained_state(path, cfg)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m aqsgd.model.pretrain", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    parser.add_argument("--cache-dir", type=Path, default=default_cache_dir())
    defaults = PretrainConfig()
    parser.add_argument("--steps", type=int, default=defaults.steps)
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size)
    parser.add_argument("--corpus-chars", type=int, default=defaults.corpus_chars)
    parser.add_argument(
        "--threads", type=int, default=defaults.threads, help="torch threads while training"
    )
    args = parser.parse_args(argv)
    cfg = PRESETS[args.preset]
    pcfg = dataclasses.replace(
        defaults, steps=args.steps, batch_size=args.batch_size, threads=args.threads,
        corpus_chars=args.corpus_chars,
        warmup_steps=min(defaults.warmup_steps, args.steps),
    )  # fmt: skip
    start = time.perf_counter()
    log = functools.partial(print, flush=True)
    print(f"pre-training preset {args.preset!r} unless cached under {args.cache_dir}", flush=True)
    path, built = starting_checkpoint_path(cfg, args.cache_dir, pretrain_cfg=pcfg, log=log)
    verb = "built" if built else "shipped" if path.parent == SHIPPED_DIR else "reusing"
    took_s = time.perf_counter() - start
    print(f"{verb} starting checkpoint for preset {args.preset!r}: {path} ({took_s:.1f} s)")
    sidecar = path.with_suffix(".json")
    if sidecar.exists():
        stats = json.loads(sidecar.read_text())["stats"]
        print(json.dumps(stats, indent=1))


if __name__ == "__main__":
    main()
