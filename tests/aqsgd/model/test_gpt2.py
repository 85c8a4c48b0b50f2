"""Stage models (aqsgd.model.gpt2): composition equals the full model, the stages' names
partition it, split gradients, dropout in training, the stage index, the language-model loss."""

import pytest
import torch
from model_helpers import SMALL, compose, token_ids

from aqsgd.model.gpt2 import build_full_model, build_stage, init_stage, lm_loss


@pytest.mark.timeout(30)
@pytest.mark.parametrize("num_stages", [1, 2, 3, 4])
def test_stages_compose_to_full_model(num_stages):
    full = build_full_model(SMALL, seed=3).eval()
    ids = token_ids(SMALL)
    expected = full(ids)
    assert expected.shape == (3, SMALL.seq_len, SMALL.vocab_size)
    stages = [build_stage(full, SMALL, s, num_stages).eval() for s in range(num_stages)]
    for s in range(num_stages - 1):
        out = compose(stages[: s + 1], ids)
        assert out.shape == (3, SMALL.seq_len, SMALL.n_embd), f"stage {s} output"
    torch.testing.assert_close(compose(stages, ids), expected, rtol=0, atol=1e-6)
    # Built directly from the seed, without the full model: the same weights.
    direct = [init_stage(SMALL, s, num_stages, seed=3).eval() for s in range(num_stages)]
    for a, b in zip(stages, direct, strict=True):
        sa, sb = a.state_dict(), b.state_dict()
        assert sa.keys() == sb.keys()
        for key in sa:
            assert torch.equal(sa[key], sb[key]), key


@pytest.mark.timeout(30)
def test_stage_names_are_global_and_partition_the_full_model():
    full = build_full_model(SMALL, seed=0)
    stages = [build_stage(full, SMALL, s, 3) for s in range(3)]
    names = [set(dict(s.named_parameters())) for s in stages]
    assert set.union(*names) == set(dict(full.named_parameters()))
    assert sum(len(n) for n in names) == len(list(full.parameters()))
    assert "blocks.3.attn.c_attn.weight" in names[2] and "embed.wte.weight" in names[0]
    assert "head.lm_head.weight" in names[2]
    # Copies: training a stage leaves the full model alone.
    with torch.no_grad():
        stages[0].embed.wte.weight.add_(1.0)
    assert not torch.equal(stages[0].embed.wte.weight, full.embed.wte.weight)


@pytest.mark.timeout(30)
def test_gradients_of_split_match_full_model():
    full = build_full_model(SMALL, seed=5)
    stages = [build_stage(full, SMALL, s, 2) for s in range(2)]
    ids = token_ids(SMALL)
    lm_loss(full(ids), ids).backward()
    hidden = stages[0](ids)
    received = hidden.detach().requires_grad_()
    lm_loss(stages[1](received), ids).backward()
    hidden.backward(received.grad)
    grads = {n: p.grad for n, p in full.named_parameters()}
    for stage in stages:
        for name, p in stage.named_parameters():
            torch.testing.assert_close(p.grad, grads[name], rtol=0, atol=1e-6, msg=name)


def test_dropout_changes_training_output():
    cfg = SMALL.replace(dropout=0.5)
    model = build_full_model(cfg, seed=0).train()
    ids = token_ids(cfg)
    assert not torch.equal(model(ids), model(ids))
    model.eval()
    assert torch.equal(model(ids), model(ids))


def test_stage_index_error():
    with pytest.raises(ValueError, match=r"stage must be in \[0, 2\), got 2"):
        init_stage(SMALL, 2, 2)


def test_lm_loss_shifts_targets():
    vocab = 5
    ids = torch.tensor([[1, 2, 3]])
    # Logits that put all mass on the next token give ~0 loss; on the same token, high.
    right = torch.full((1, 3, vocab), -30.0)
    right[0, 0, 2] = right[0, 1, 3] = 30.0
    wrong = torch.full((1, 3, vocab), -30.0)
    wrong[0, 0, 1] = wrong[0, 1, 2] = 30.0
    assert lm_loss(right, ids).item() < 1e-6
    assert lm_loss(wrong, ids).item() > 10
    with pytest.raises(ValueError, match="do not match"):
        lm_loss(right, ids[:, :2])
