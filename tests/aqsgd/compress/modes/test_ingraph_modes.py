"""The in-graph halves of ssn and bottleneck (aqsgd.compress.modes.ssn, .bottleneck) and
the contract around them (aqsgd.compress.ingraph): shapes on irregular sizes, ssn's exact
rebuild of a stage constrained to its subspace, bottleneck's PCA start, the token ids on
the wire, and the errors that name the field and the value.
"""

import pytest
import torch
from torch import nn

from aqsgd.compress.ingraph import BoundaryShape, StageBoundary, boundary_width
from aqsgd.compress.message import CompressionConfig
from aqsgd.compress.modes.bottleneck import Bottleneck, principal_components
from aqsgd.compress.modes.ssn import Subspace, subspace_basis

B, L, D, V = 3, 7, 40, 50  # irregular on purpose


def tables(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(V, D, generator=g) * 0.02, torch.randn(L, D, generator=g) * 0.01


def shape(**kw) -> BoundaryShape:
    return BoundaryShape(seq_len=L, width=D, vocab_size=V, seed=3, embeddings=tables, **kw)


def test_subspace_basis_is_orthonormal_and_seeded():
    u = subspace_basis(D, 9, seed=1)
    assert u.shape == (D, 9)
    torch.testing.assert_close(u.T @ u, torch.eye(9), atol=1e-5, rtol=0)
    assert torch.equal(u, subspace_basis(D, 9, seed=1))
    assert not torch.equal(u, subspace_basis(D, 9, seed=2))


class _Stage(nn.Module):
    """A toy stage: embedding (first) then two residual writers with dropout."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Sequential(nn.Embedding(V, D), nn.Dropout(0.2))
        self.writers = nn.ModuleList(nn.Sequential(nn.Linear(D, D), nn.Dropout(0.2))
                                     for _ in range(2))

    def forward(self, tokens):
        h = self.embed(tokens)
        for w in self.writers:
            h = h + w(torch.tanh(h))
        return h  # (B, L, D)


def test_ssn_rebuilds_a_constrained_stage_exactly_from_k_coordinates():
    """Dropout on, the stage's blocks constrained: the receiver's rebuild of the sender's
    k coordinates is the stage's output, to fp32 rounding; the coordinates are (B, L, k)."""
    cfg = CompressionConfig(mode="ssn", dtype="bf16", coords=6)
    half = Subspace(cfg, shape())
    stage = _Stage().train()
    half.constrain(list(stage.writers), stage.embed)
    tokens = torch.randint(0, V, (B, L))
    h = stage(tokens)
    z = half.sender_module()(h, tokens)
    assert z.shape == (B, L, 6)
    rebuilt = half.receiver_module()(z, tokens)
    torch.testing.assert_close(rebuilt, h, atol=1e-6, rtol=0)


def test_ssn_gradient_flows_through_the_coordinates():
    cfg = CompressionConfig(mode="ssn", coords=5)
    half = Subspace(cfg, shape())
    stage = _Stage()
    half.constrain(list(stage.writers), stage.embed)
    tokens = torch.randint(0, V, (B, L))
    z = half.sender_module()(stage(tokens), tokens)
    z.pow(2).sum().backward()
    assert stage.writers[0][0].weight.grad.abs().sum() > 0


def test_ssn_refuses_a_vocabulary_its_two_byte_ids_cannot_hold():
    cfg = CompressionConfig(mode="ssn", coords=4)
    big = BoundaryShape(seq_len=L, width=D, vocab_size=70_000, embeddings=tables)
    with pytest.raises(ValueError, match=r"model.vocab_size.*70000"):
        Subspace(cfg, big)


@pytest.mark.parametrize("coords, match", [(0, r"coords.*>= 1; got 0"),
                                           (-3, r"coords.*got -3")])
def test_a_bad_rank_is_refused_naming_the_field_and_value(coords, match):
    with pytest.raises(ValueError, match=match):
        CompressionConfig(mode="ssn", coords=coords)


def test_a_rank_over_the_width_and_coords_of_a_byte_level_mode_are_refused():
    with pytest.raises(ValueError, match=r"coords: mode 'ssn'.*width 40 .*got 41"):
        boundary_width(CompressionConfig(mode="ssn", coords=41), D)
    with pytest.raises(ValueError, match=r"coords: mode 'directq' has no in-graph half"):
        CompressionConfig(mode="directq", coords=4)


def test_boundary_width_defaults_to_the_modes_fraction():
    assert boundary_width(CompressionConfig(mode="ssn"), 1024) == 160
    assert boundary_width(CompressionConfig(mode="bottleneck"), 1024) == 128
    assert boundary_width(CompressionConfig(mode="aqsgd"), 1024) == 1024


def test_principal_components_span_a_low_rank_cloud_and_are_signed():
    g = torch.Generator().manual_seed(0)
    basis, _ = torch.linalg.qr(torch.randn(D, 3, generator=g))
    mean = torch.randn(D, generator=g)
    acts = torch.randn(500, 3, generator=g) * torch.tensor([5.0, 3.0, 1.0]) @ basis.T + mean
    v, mu = principal_components(acts, 3)
    assert v.shape == (D, 3) and mu.shape == (D,)
    torch.testing.assert_close(mu, acts.mean(0), atol=1e-5, rtol=0)
    torch.testing.assert_close(v @ v.T @ basis, basis, atol=1e-4, rtol=0)  # same span
    pivots = v.abs().argmax(0)
    assert (v[pivots, torch.arange(3)] > 0).all()


def test_bottleneck_starts_from_pca_and_reconstructs_in_span():
    """After calibration down(h) = V^T (h - mu) and up(z) = V z + mu: activations in a
    k-dimensional affine subspace come back exactly; the shapes are (B, L, k)."""
    k = 4
    half = Bottleneck(CompressionConfig(mode="bottleneck", coords=k), shape())
    g = torch.Generator().manual_seed(1)
    basis, _ = torch.linalg.qr(torch.randn(D, k, generator=g))
    acts = (torch.randn(B * L * 10, k, generator=g) @ basis.T + 0.5)  # (N, D)
    down, up = half.sender_module(), half.receiver_module()
    half.calibrate(down, acts)
    half.calibrate(up, acts)
    v, mu = principal_components(acts, k)
    torch.testing.assert_close(down.proj.weight, v.T)
    torch.testing.assert_close(up.proj.bias, mu)
    h = acts[: B * L].reshape(B, L, D)
    z = down(h, None)
    assert z.shape == (B, L, k)
    torch.testing.assert_close(up(z, None), h, atol=1e-4, rtol=0)
    assert sum(p.numel() for p in down.parameters()) == D * k + k


def test_stage_boundary_carries_token_ids_as_two_bytes_and_back():
    half = Subspace(CompressionConfig(mode="ssn", coords=4), shape())
    boundary = StageBoundary(half, first=False, last=False)
    tokens = torch.tensor([[0, 1, V - 1], [2, 40000 % V, 7]])
    assert boundary.extra_spec((2, 3, 4)) == [((2, 3), torch.int16)]
    (wire,) = boundary.pack(tokens)
    assert wire.dtype == torch.int16 and wire.element_size() == 2
    rest, back = boundary.unpack([torch.zeros(1), wire], tokens)
    assert len(rest) == 1 and torch.equal(back, tokens)
    big = torch.tensor([[65535, 0]])
    assert torch.equal(boundary.unpack([boundary.pack(big)[0]], big)[1], big)


def test_a_byte_level_mode_has_an_identity_boundary():
    boundary = StageBoundary(None, first=False, last=False)
    x, tokens = torch.randn(B, L, D), torch.zeros(B, L, dtype=torch.long)
    assert boundary.inbound(x, tokens) is x and boundary.outbound(x, tokens) is x
    assert boundary.extra_spec((B, L, D)) == [] and boundary.pack(tokens) == []
    assert list(boundary.parameters()) == []


class _WrongWidth(nn.Module):
    def forward(self, h, tokens):
        return h  # (B, L, D): not the k coordinates


class _BrokenHalf(Subspace):
    def sender_module(self):
        return _WrongWidth()


def test_registering_checks_the_in_graph_half_on_hidden_rows():
    """The load-time check builds the half and runs its modules: a sender that does not
    return k coordinates is refused naming the shape it returned and the one expected."""
    from aqsgd.compress.modes.ssn import SSN
    from aqsgd.compress.registry import RegistryError
    from aqsgd.compress.trial import round_trip

    round_trip(SSN, "ssn-module")  # the built-in passes

    class Broken(SSN):
        in_graph = _BrokenHalf

    with pytest.raises(RegistryError, match=r"ssn-module: activation mode 'ssn' its in-graph "
                                            r"sender returned \(3, 4, 64\), expected \(3, 4, 10\)"):
        round_trip(Broken, "ssn-module")


def test_a_run_config_refuses_a_rank_over_the_width_naming_both():
    from aqsgd.train.config import config_from_dict

    cfg = {"model": {"preset": "tiny", "n_embd": 32, "n_head": 2, "vocab_size": 96,
                     "seq_len": 8},
           "forward": {"mode": "ssn", "coords": 40}, "train": {"init_from": None},
           "data": {"name": "synthetic"}, "output": {"dir": "out"}}
    with pytest.raises(ValueError, match=r"forward.coords: mode 'ssn' sends at most the "
                                         r"hidden width 32 .*got 40 \(model.n_embd 32\)"):
        config_from_dict(cfg)
