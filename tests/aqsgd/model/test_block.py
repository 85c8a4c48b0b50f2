"""The GPT-2 block of aqsgd.model.block against transformers' GPT2Block, bit for bit."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers.models.gpt2.modeling_gpt2 import GPT2Block as HFBlock

from aqsgd.model.block import MLP, GPT2Block
from aqsgd.model.config import ModelConfig
from aqsgd.model.dropout import use_sample_dropout

# Irregular sizes (3 heads of 8, an MLP of 40) so that a transposed or mis-split weight shows.
CFG = ModelConfig(n_layer=1, n_embd=24, n_head=3, vocab_size=11, seq_len=16, dropout=0.2,
                  n_inner=40)  # fmt: skip
ACTIVATIONS = ("gelu", "gelu_new", "relu")
REPO = Path(__file__).resolve().parents[3]


def _pair(cfg: ModelConfig) -> tuple[HFBlock, GPT2Block]:
    """transformers' block with its own random init, and ours holding the same weights."""
    torch.manual_seed(0)
    theirs = HFBlock(cfg.hf_config(), layer_idx=0)
    with torch.no_grad():  # non-zero biases and norms, so that each one is exercised
        for param in theirs.parameters():
            param.add_(torch.randn(param.shape) * 0.1)
    ours = GPT2Block(cfg)
    ours.load_state_dict(theirs.state_dict(), strict=True)
    return theirs, ours


def _run(block: torch.nn.Module, length: int, seed: int) -> dict[str, torch.Tensor]:
    """Output, input gradient and every parameter gradient of one forward and backward,
    with torch's generator at `seed` for the dropout masks."""
    block.zero_grad(set_to_none=True)
    x = torch.randn(3, length, CFG.n_embd, generator=torch.Generator().manual_seed(1),
                    requires_grad=True)  # fmt: skip
    torch.manual_seed(seed)
    out = block(x)
    out.backward(torch.randn(out.shape, generator=torch.Generator().manual_seed(2)))
    grads = {f"grad {name}": p.grad for name, p in block.named_parameters()}
    return {"out": out.detach(), "grad x": x.grad, **grads}


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_state_dict_names_and_shapes_are_transformers(activation):
    cfg = CFG.replace(activation=activation)
    theirs = HFBlock(cfg.hf_config(), layer_idx=0).state_dict()
    ours = GPT2Block(cfg).state_dict()
    assert list(ours) == list(theirs)
    assert {k: tuple(v.shape) for k, v in ours.items()} == {
        k: tuple(v.shape) for k, v in theirs.items()
    }
    assert ours["attn.c_attn.weight"].shape == (24, 72)  # (in, out), as GPT-2's Conv1D


@pytest.mark.parametrize("length", [1, 13])
@pytest.mark.parametrize("mode", ["eval", "train"])
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_forward_and_backward_are_bit_identical(activation, mode, length):
    """In training both draw their dropout masks from torch's generator: the same draws."""
    theirs, ours = _pair(CFG.replace(activation=activation))
    theirs.train(mode == "train")
    ours.train(mode == "train")
    want, got = _run(theirs, length, seed=5), _run(ours, length, seed=5)
    assert got.keys() == want.keys()
    for key in want:
        assert torch.equal(got[key], want[key]), f"{activation} {mode} L={length}: {key}"


def test_training_draws_new_masks_from_torchs_generator():
    """The bit-identity in training is not dropout doing nothing: other seeds, other masks."""
    _, ours = _pair(CFG)
    ours.train()
    assert not torch.equal(_run(ours, 13, seed=5)["out"], _run(ours, 13, seed=6)["out"])


def test_per_sample_masks_replace_the_attention_dropout_of_sdpa():
    """A converted block applies its own attention-weight mask: torch's seed changes
    nothing, the sample ids do, and only the attention dropout is left on here."""
    _, ours = _pair(CFG)
    ours.train()
    masks = use_sample_dropout(ours, seed=0)
    ours.attn.resid_dropout.p = ours.mlp.dropout.p = 0.0
    with masks.samples(torch.arange(3)):
        first, again = _run(ours, 13, seed=5), _run(ours, 13, seed=6)
    with masks.samples(torch.arange(3) + 3):
        other = _run(ours, 13, seed=5)["out"]
    assert all(torch.equal(again[key], first[key]) for key in first)
    assert not torch.equal(other, first["out"])
    ours.eval()
    assert not torch.equal(_run(ours, 13, seed=5)["out"], first["out"])  # it did drop


def test_unknown_activation_names_the_value():
    with pytest.raises(ValueError, match=r"activation must be one of .*'swish'"):
        MLP(8, 16, "swish", 0.0)


@pytest.mark.timeout(60)
def test_the_worker_imports_without_transformers():
    code = "import sys, aqsgd.train.worker; print('transformers' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                          text=True, check=True)  # fmt: skip
    assert done.stdout.strip() == "False", done.stderr
