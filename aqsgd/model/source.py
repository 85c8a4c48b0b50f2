"""Which model a run trains and which tokenizer feeds it: a preset, or a checkpoint on disk.

    from aqsgd.model.source import resolve_model, run_tokenizer
    m = resolve_model("my-gpt2/", preset="tiny")    # a save_pretrained folder
    m.config, m.weights, m.tokenizer                 # ModelConfig, its path, tokenizer file
    tok = run_tokenizer(m.tokenizer, m.config.vocab_size, checkpoint=m.weights)

A model is a preset (no checkpoint: aqsgd.model.config.PRESETS), a `save_pretrained`
folder or a model id in the local Hugging Face cache (shape from its config.json), or a
state-dict file (shape from the preset). Its tokenizer is the one named, else the
checkpoint's own files (its folder), else for a preset the suite's BPE of its vocabulary
(aqsgd.data.tokenizer.tokenizer_for). Refused with a ModelSourceError, never replaced: a
checkpoint with no tokenizer (saying where it looked), a tokenizer whose vocabulary is
not the checkpoint's (both sizes). Nothing is downloaded. docs/models.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from aqsgd.data.hfcache import hf_cache_dirs
from aqsgd.data.tokenizer import (
    Tokenizer,
    files_digest,
    load_tokenizer,
    looked_for,
    tokenizer_files,
    tokenizer_for,
)
from aqsgd.filecache import default_cache_dir
from aqsgd.model.config import PRESETS, ModelConfig

__all__ = ["ModelChoice", "ModelSourceError", "config_from_folder", "resolve_model",
           "run_tokenizer"]


class ModelSourceError(ValueError):
    """A model or tokenizer that cannot be used; `setting` names the one to change
    ('model' or 'tokenizer')."""

    def __init__(self, message: str, setting: str):
        super().__init__(message)
        self.setting = setting


@dataclass(frozen=True)
class ModelChoice:
    """A resolved model: its shape, its checkpoint (None: a preset, whose weights the
    run's init_from decides) and its tokenizer file (None: the suite's BPE)."""

    config: ModelConfig
    weights: str | None
    tokenizer: str | None

    def tokenizer_digest(self) -> str | None:
        """Hash of the tokenizer's files (aqsgd.data.tokenizer.files_digest); None for the
        suite's own."""
        if self.tokenizer is None:
            return None
        return files_digest(tokenizer_files(self.tokenizer) or ())


def config_from_folder(folder: str | Path) -> ModelConfig:
    """The ModelConfig of a GPT-2 checkpoint folder's config.json (seq_len: n_positions)."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        raise ModelSourceError(f"{folder}: no config.json (a save_pretrained folder has "
                               f"one)", "model")
    hf = json.loads(path.read_text())
    if hf.get("model_type", "gpt2") != "gpt2":
        raise ModelSourceError(f"{path}: model_type {hf['model_type']!r}; the suite's stages "
                               f"are GPT-2 blocks (model_type 'gpt2')", "model")
    try:
        return ModelConfig(
            n_layer=hf["n_layer"], n_embd=hf["n_embd"], n_head=hf["n_head"],
            vocab_size=hf["vocab_size"], seq_len=hf["n_positions"],
            dropout=hf.get("resid_pdrop", 0.1),
            activation=hf.get("activation_function", "gelu_new"),
            n_inner=hf.get("n_inner"), layer_norm_eps=hf.get("layer_norm_epsilon", 1e-5))
    except (KeyError, ValueError) as err:
        raise ModelSourceError(f"{path}: not a GPT-2 config ({err})", "model") from None


def _hub_folder(model_id: str) -> Path | None:
    """The snapshot folder of `model_id` in the local hub cache, or None."""
    from aqsgd.model.weights import _resolve_hub_repo_dir

    repo = hf_cache_dirs()[0] / ("models--" + model_id.replace("/", "--"))
    if not repo.is_dir():
        return None
    try:
        return Path(_resolve_hub_repo_dir(str(repo)))
    except FileNotFoundError as err:  # several snapshots and no refs/main
        raise ModelSourceError(str(err), "model") from None


def _local(spec: str, setting: str) -> Path:
    """A path on disk, or a model id's snapshot in the local hub cache."""
    path = Path(spec).expanduser()
    if path.exists():
        return path.resolve()
    found = _hub_folder(spec)
    if found is None:
        raise ModelSourceError(
            f"{setting} {spec!r} is neither a path nor a model id in the local Hugging Face "
            f"cache ({hf_cache_dirs()[0]}; downloads are disabled)", setting)
    return found


def _tokenizer_file(tokenizer: str | None, checkpoint: Path | None) -> str | None:
    if tokenizer is not None:
        where = _local(tokenizer, "tokenizer")
        files = tokenizer_files(where)
        if files is None:
            raise ModelSourceError(f"no tokenizer at {tokenizer!r}: looked for "
                                   f"{looked_for(where)}", "tokenizer")
        return str(files[0])
    if checkpoint is None:
        return None
    folder = checkpoint if checkpoint.is_dir() else checkpoint.parent
    files = tokenizer_files(folder)
    if files is None:
        raise ModelSourceError(
            f"pretrained checkpoint {checkpoint} has no tokenizer: looked for "
            f"{looked_for(folder)}; name its tokenizer (the one its embeddings were "
            f"trained with)", "tokenizer")
    return str(files[0])


def resolve_model(model: str | None, preset: str, tokenizer: str | None = None,
                  seq_len: int | None = None) -> ModelChoice:
    """`model` (None: the preset) with its tokenizer (module docstring); `seq_len`
    shortens the windows (at most the checkpoint's positions)."""
    if preset not in PRESETS:
        raise ModelSourceError(f"preset must be one of {sorted(PRESETS)}, got {preset!r}",
                               "model")
    checkpoint = None if model is None else _local(model, "model")
    if checkpoint is None or checkpoint.is_file():
        config = PRESETS[preset]
    else:
        config = config_from_folder(checkpoint)
    if seq_len is not None:
        if seq_len > config.seq_len and checkpoint is not None:
            raise ModelSourceError(f"seq_len {seq_len} exceeds the {config.seq_len} positions "
                                   f"of {checkpoint}", "seq_len")
        config = config.replace(seq_len=seq_len)
    weights = None if checkpoint is None else str(checkpoint)
    return ModelChoice(config, weights, _tokenizer_file(tokenizer, checkpoint))


def run_tokenizer(tokenizer: str | None, vocab_size: int, *, checkpoint: str | None,
                  cache_dir: str | Path | None = None) -> Tokenizer:
    """The tokenizer of a run whose weights come from `checkpoint` (None: a preset's): the
    file `tokenizer` names, else a checkpoint folder's own (refused if it has none), else
    the suite's BPE for `vocab_size` (tokenizer_for). Its vocabulary must fit the
    model's, and equal it for a checkpoint (its embeddings learned that tokenizer's ids)."""
    if tokenizer is None and checkpoint is not None and Path(checkpoint).is_dir():
        tokenizer = _tokenizer_file(None, Path(checkpoint))
    if tokenizer is None:
        try:
            return tokenizer_for(vocab_size, cache_dir or default_cache_dir())
        except FileNotFoundError as err:
            raise ModelSourceError(str(err), "tokenizer") from None
    try:
        tok = load_tokenizer(tokenizer)
    except (OSError, ValueError) as err:
        raise ModelSourceError(str(err), "tokenizer") from None
    if tok.vocab_size > vocab_size or (checkpoint and tok.vocab_size != vocab_size):
        whose = "the checkpoint's" if checkpoint else "the model's"
        raise ModelSourceError(
            f"tokenizer {tokenizer} has {tok.vocab_size} tokens, {whose} vocabulary "
            f"{vocab_size}: they must match (ids of another tokenizer mean nothing to "
            f"these embeddings)", "tokenizer")
    return tok
