"""Model shapes (aqsgd.model.config): layer splits, field checks, preset sizes, the config
hash, and the `tiny` family of presets for deeper pipelines."""

import pytest
import torch
from model_helpers import SMALL

from aqsgd.model.config import PRESETS, TINY_FAMILY, layer_split
from aqsgd.model.gpt2 import GPT2Stage


def test_tiny_stays_the_two_stage_regression_shape():
    tiny = PRESETS["tiny"]
    assert (tiny.n_layer, tiny.n_embd, tiny.n_head, tiny.vocab_size, tiny.seq_len) == (
        2, 128, 2, 384, 64)
    assert tiny.n_inner is None and tiny.dropout == 0.1


@pytest.mark.parametrize("name, stages", [("tiny-4", 4), ("tiny-8", 8)])
def test_tiny_family_has_one_block_per_stage_and_tinys_boundary(name, stages):
    cfg, tiny = PRESETS[name], PRESETS["tiny"]
    assert TINY_FAMILY[name] == stages
    assert cfg.n_layer == stages
    assert [len(r) for r in layer_split(cfg.n_layer, stages)] == [1] * stages
    # a boundary carries (B, seq_len, n_embd) activations: the same bytes as tiny's
    assert (cfg.n_embd, cfg.seq_len, cfg.vocab_size) == (tiny.n_embd, tiny.seq_len,
                                                         tiny.vocab_size)
    # a narrower MLP makes a block cheaper than tiny's at the same boundary
    assert cfg.inner_dim < tiny.inner_dim
    assert cfg.num_parameters() < PRESETS["tiny"].replace(n_layer=stages).num_parameters()


def test_tiny_preset_for_picks_the_family_member_sized_for_the_depth():
    from aqsgd.model.config import tiny_preset_for

    assert [tiny_preset_for(s) for s in (2, 4, 8)] == ["tiny", "tiny-4", "tiny-8"]
    with pytest.raises(ValueError, match=r"no tiny preset is sized for 3 stages.*4 \(tiny-4\)"):
        tiny_preset_for(3)


def test_layer_split_balanced():
    assert layer_split(4, 2) == [range(0, 2), range(2, 4)]
    assert layer_split(48, 8) == [range(6 * i, 6 * i + 6) for i in range(8)]
    splits = layer_split(10, 4)
    assert [len(r) for r in splits] == [3, 3, 2, 2]
    assert [i for r in splits for i in r] == list(range(10))
    assert layer_split(3, 3) == [range(0, 1), range(1, 2), range(2, 3)]


@pytest.mark.parametrize(
    ("n_layer", "num_stages", "match"),
    [(2, 3, r"num_stages \(3\).*n_layer \(2\)"), (4, 0, "num_stages"), (0, 1, "n_layer")],
)
def test_layer_split_errors(n_layer, num_stages, match):
    with pytest.raises(ValueError, match=match):
        layer_split(n_layer, num_stages)


@pytest.mark.parametrize(
    ("field", "value"),
    [("n_layer", 0), ("n_head", 5), ("dropout", 1.0), ("activation", "swish"), ("seq_len", 0)],
)
def test_model_config_validation_names_field(field, value):
    with pytest.raises(ValueError, match=field):
        SMALL.replace(**{field: value})


def test_preset_parameter_counts_without_allocating():
    # GPT-2's published sizes count the head tied to wte.
    assert PRESETS["gpt2"].num_parameters(untied_head=False) == 124_439_808
    assert PRESETS["gpt2-medium"].num_parameters(untied_head=False) == 354_823_168
    assert PRESETS["gpt2-xl"].num_parameters(untied_head=False) == 1_557_611_200
    xl = PRESETS["gpt2-xl"]
    assert (xl.n_layer, xl.n_embd, xl.n_head) == (48, 1600, 25)
    for name in ("tiny", "gpt2", "gpt2-xl"):
        cfg = PRESETS[name]
        with torch.device("meta"):
            model = GPT2Stage(cfg, range(cfg.n_layer), first=True, last=True)
        counted = sum(p.numel() for p in model.parameters())
        assert counted == cfg.num_parameters(), name


def test_config_hash_stable_and_sensitive():
    assert SMALL.config_hash() == SMALL.replace().config_hash()
    assert SMALL.config_hash() != SMALL.replace(dropout=0.1).config_hash()
    assert len(SMALL.config_hash()) == 16
