"""QuantizedAdam's frozen second moment and its floor (aqsgd.compress.gradient)."""

import pytest
import torch

from aqsgd.compress.gradient import GradCompressionConfig, make_data_parallel

VOCAB, DIM, LR, FREEZE, AFTER = 16, 8, 1e-3, 5, 3
ABSENT = 12  # a token no batch holds before the freeze


def _absent_token_move(cfg: GradCompressionConfig) -> tuple[float, float]:
    """Train an embedding and a head on tokens 0..7 for FREEZE steps (one replica,
    no torch.distributed), then AFTER steps on batches holding ABSENT too. Returns the
    largest coordinate move in one of those steps, of ABSENT's embedding row and of the
    rows seen before. (The first moment is exchanged 8-bit quantized with error
    feedback, so a small m can take a step or two to show.)"""
    torch.manual_seed(0)
    emb, head = torch.nn.Embedding(VOCAB, DIM), torch.nn.Linear(DIM, 1)
    dp = make_data_parallel(cfg, [*emb.parameters(), *head.parameters()], None,
                            {"lr": LR, "weight_decay": 0.0})  # fmt: skip
    gen = torch.Generator().manual_seed(1)
    absent = seen = 0.0
    for step in range(FREEZE + AFTER):
        tokens = torch.randint(0, 8, (32,), generator=gen)
        if step >= FREEZE:
            tokens[:4] = ABSENT
        loss = (head(emb(tokens)).squeeze(-1) - 1.0).pow(2).mean()
        loss.backward()
        assert (emb.weight.grad[ABSENT].abs().max() > 0) == (step >= FREEZE)
        before = emb.weight.detach().clone()
        dp.optimizer.step()
        dp.optimizer.zero_grad()
        if step >= FREEZE:
            move = (emb.weight.detach() - before).abs()
            absent, seen = max(absent, float(move[ABSENT].max())), max(seen, float(move[:8].max()))
    return absent, seen


def test_a_token_absent_until_the_freeze_moves_by_a_bounded_amount():
    absent, seen = _absent_token_move(GradCompressionConfig(mode="qadam",
                                                            freeze_after_steps=FREEZE))
    # at most 10 lr x (g / rms) (class docstring); a gradient of a typical size: ~ lr
    assert 0 < absent <= 20 * LR, absent
    assert seen <= 20 * LR
    # without the floor the same step is lr * m / eps: thousands of normal steps
    unfloored, _ = _absent_token_move(GradCompressionConfig(mode="qadam", v_floor=0.0,
                                                            freeze_after_steps=FREEZE))
    assert unfloored > 1000 * LR, unfloored


def test_the_floor_leaves_coordinates_with_gradient_history_alone():
    """A run where every coordinate had gradient before the freeze moves exactly as
    without the floor when their v is above it."""
    moves = [_absent_token_move(GradCompressionConfig(mode="qadam", v_floor=f,
                                                      freeze_after_steps=FREEZE))[1]
             for f in (0.0, 1e-6)]  # fmt: skip
    assert moves[0] == moves[1]


@pytest.mark.parametrize("value", [-0.1, float("inf"), "0.01", True])
def test_bad_v_floor_is_rejected(value):
    with pytest.raises(ValueError, match=r"GradCompressionConfig.v_floor must be a finite "
                                         r"number >= 0, got"):
        GradCompressionConfig(mode="qadam", v_floor=value)
