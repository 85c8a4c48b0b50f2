"""Pretrained weights (aqsgd.model.weights): a local Hugging Face directory loads into
stages that match transformers, its errors, a state dict passed in directly."""

import pytest
import torch
from model_helpers import SMALL, compose, token_ids
from transformers import GPT2LMHeadModel

from aqsgd.model.gpt2 import build_full_model, build_stage, init_stage
from aqsgd.model.weights import load_pretrained_state


@pytest.mark.timeout(60)
def test_pretrained_from_local_directory_matches_hf(tmp_path):
    cfg = SMALL.replace(activation="gelu_new")
    hf_cfg = cfg.replace(seq_len=32).hf_config()  # longer wpe than we use: sliced on load
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(hf_cfg).eval()
    hf.save_pretrained(tmp_path / "gpt2-small-test")
    model = build_full_model(cfg, seed=123, pretrained=tmp_path / "gpt2-small-test").eval()
    ids = token_ids(cfg)
    with torch.no_grad():
        expected = hf(ids).logits
        got = model(ids)
    # Same weights, same causal attention: the HF model and ours agree.
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    # The head is a copy of wte, not the same storage (Note [untied LM head]).
    assert torch.equal(model.head.lm_head.weight, model.embed.wte.weight)
    assert model.head.lm_head.weight.data_ptr() != model.embed.wte.weight.data_ptr()
    # Stages built from the directory compose to the same logits.
    where = tmp_path / "gpt2-small-test"
    stages = [init_stage(cfg, s, 2, pretrained=where).eval() for s in range(2)]
    with torch.no_grad():
        torch.testing.assert_close(compose(stages, ids), got, rtol=0, atol=1e-6)
    # The same weights inside a hub cache's repo folder (refs/main -> snapshot).
    repo = tmp_path / "hub" / "models--someone--gpt2-small-test"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0123abcd\n")
    hf.save_pretrained(repo / "snapshots" / "0123abcd")
    from_hub = build_full_model(cfg, pretrained=repo).eval()
    with torch.no_grad():
        assert torch.equal(from_hub(ids), got)
    # An HF-named state dict cuts into the same stage.
    last = build_stage(hf.state_dict(), cfg, 1, 2)
    for (name, a), b in zip(
        stages[1].state_dict().items(), last.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name


@pytest.mark.timeout(30)
def test_pretrained_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="downloads are disabled"):
        load_pretrained_state(tmp_path / "nothing-here", SMALL)
    hf = GPT2LMHeadModel(SMALL.replace(n_embd=16).hf_config())
    hf.save_pretrained(tmp_path / "other")
    with pytest.raises(ValueError, match="n_embd=16"):
        load_pretrained_state(tmp_path / "other", SMALL)


def test_state_dict_round_trip_through_pretrained_argument():
    full = build_full_model(SMALL, seed=9)
    again = build_full_model(SMALL, seed=0, pretrained=full.state_dict())
    for (name, a), b in zip(full.state_dict().items(), again.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
