"""What the stage-model tests share (tests/aqsgd/model/): a small model shape and its
inputs, and stages run one after another."""

import torch

from aqsgd.model.config import ModelConfig

# 4 layers so that 1..4 stages all have a block; dropout off for exact comparisons.
SMALL = ModelConfig(n_layer=4, n_embd=32, n_head=2, vocab_size=97, seq_len=16, dropout=0.0)


def token_ids(cfg, batch=3, length=None, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, cfg.vocab_size, (batch, length or cfg.seq_len), generator=gen)


def compose(stages, ids):
    x = ids
    for stage in stages:
        x = stage(x)
    return x
