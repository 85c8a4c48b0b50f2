"""Dropout masks seeded by sample id (aqsgd.model.dropout)."""

import pytest
import torch
import torch.nn.functional as F

from aqsgd.model.config import PRESETS
from aqsgd.model.dropout import SampleDropout, causal_attention, use_sample_dropout
from aqsgd.model.gpt2 import build_full_model, build_stage, init_stage

CFG = PRESETS["tiny"].replace(n_layer=2, n_embd=32, n_head=2, vocab_size=64, seq_len=12,
                              dropout=0.3)  # fmt: skip


def _ids(n=4, seed=0):
    return torch.randint(0, CFG.vocab_size, (n, CFG.seq_len),
                         generator=torch.Generator().manual_seed(seed))  # fmt: skip


def _converted(cfg=CFG, seed=5):
    model = build_full_model(cfg, seed=0).train()
    return model, use_sample_dropout(model, seed=seed)


def test_every_dropout_is_replaced_and_names_are_global():
    model, _ = _converted()
    names = {n for n, m in model.named_modules() if isinstance(m, SampleDropout)}
    assert not any(isinstance(m, torch.nn.Dropout) for m in model.modules())
    assert names == {"embed.drop"} | {f"blocks.{i}.{part}" for i in range(2) for part in
                                      ("attn.attn_dropout", "attn.resid_dropout", "mlp.dropout")}


def test_masks_repeat_at_every_visit_of_a_sample_and_follow_the_sample():
    model, masks = _converted()
    x, ids = _ids(), torch.tensor([7, 3, 11, 0])
    with masks.samples(ids):
        first, again = model(x), model(x)
    assert torch.equal(first, again)  # same samples, same masks
    order = torch.tensor([2, 0, 3, 1])
    with masks.samples(ids[order]):
        shuffled = model(x[order])  # each row keeps its sample's masks, wherever it sits
    torch.testing.assert_close(shuffled, first[order], rtol=0, atol=1e-5)
    with masks.samples(ids + 100):
        assert not torch.allclose(model(x), first)  # other samples, other masks
    model.eval()
    assert torch.equal(model(x), model(x))


def test_random_masks_differ_between_visits():
    model = build_full_model(CFG, seed=0).train()
    x = _ids()
    assert not torch.equal(model(x), model(x))


def test_explicit_attention_is_causal_sdpa():
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 3, 7, 5, generator=g) for _ in range(3))  # (B, H, L, hd)
    out, weights = causal_attention(q, k, v, 5**-0.5, torch.nn.Identity())
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)
    torch.testing.assert_close(out, want, rtol=0, atol=1e-6)
    assert weights.shape == (2, 3, 7, 7) and weights.triu(1).abs().max() == 0


def test_where_nothing_is_dropped_the_converted_stage_is_bit_identical():
    """Evaluation, and training at rate 0, run the stage as it was built."""
    x = _ids()
    plain = build_full_model(CFG, seed=0).eval()
    model, _ = _converted()
    assert torch.equal(model.eval()(x), plain(x))
    plain0 = build_full_model(CFG.replace(dropout=0.0), seed=0).train()
    model0, masks = _converted(CFG.replace(dropout=0.0))
    with masks.samples(torch.arange(4)):
        assert torch.equal(model0(x), plain0(x))


def test_a_sample_gets_the_same_masks_whatever_the_pipeline_split():
    full, full_masks = _converted()
    x, ids = _ids(), torch.tensor([4, 9, 1, 2])
    stages = [build_stage(full, CFG, s, 2).train() for s in range(2)]
    stage_masks = [use_sample_dropout(s, seed=5) for s in stages]
    with full_masks.samples(ids):
        want = full(x)
    with stage_masks[0].samples(ids):
        hidden = stages[0](x)
    with stage_masks[1].samples(ids):
        got = stages[1](hidden)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


def test_gradients_flow_through_the_masks():
    model, masks = _converted()
    with masks.samples(torch.arange(4)):
        model(_ids()).sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_a_training_forward_without_sample_ids_is_an_error():
    stage = init_stage(CFG, 0, 2, seed=0).train()
    masks = use_sample_dropout(stage, seed=0)
    with pytest.raises(RuntimeError, match=r"embed\.drop: .* needs the batch's sample ids"):
        stage(_ids())
    with pytest.raises(ValueError, match="batch of 4 rows, 2 sample ids"), \
            masks.samples(torch.tensor([1, 2])):
        stage(_ids())
