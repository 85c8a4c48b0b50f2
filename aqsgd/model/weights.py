"""Pretrained weights: GPT-2 state dicts from local files, in this package's names.

    from aqsgd.model.weights import load_pretrained_state
    state = load_pretrained_state("openai-community/gpt2", PRESETS["gpt2"])  # cached only

A state dict in Hugging Face's naming (`transformer.h.7.attn.c_attn.weight`) is
renamed to the stages' global names (`blocks.7.attn.c_attn.weight`); the LM head is
untied from the token embedding (Note [untied LM head] in aqsgd.model.gpt2). Nothing
is ever downloaded.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch

from aqsgd.model.config import ModelConfig

if TYPE_CHECKING:
    from transformers import GPT2Config

__all__ = ["load_pretrained_state"]


def _from_hf_names(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Hugging Face GPT2LMHeadModel names -> the stages' names (aqsgd.model.gpt2)."""
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
    """Full-model state dict in the stages' names. `source`: a state dict (the
    stages' or HF naming), a state-dict file (.pt, .bin via torch.load with
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
        from transformers.utils import logging as hf_logging

        # no "Loading weights: 100%" bar at the head of a rank log: the suite's lines first
        hf_logging.disable_progress_bar()
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
