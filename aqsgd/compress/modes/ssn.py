"""Mode ``ssn``: Subspace Networks (Ramasinghe et al., "Protocol Models", arXiv 2506.01260;
docs/trainable-codecs.md): the residual stream lives in one fixed rank-k subspace U
(D x k, orthonormal, from a seed) around a fixed anchor, x = E[token] + P[position] + U z,
so a boundary carries z (k values a token, bf16) and the token ids, and the receiver
rebuilds x exactly.

    half = Subspace(cfg, BoundaryShape(L, D, V, seed, embeddings=tables))
    half.constrain(writers, embedding)   # every block but the last writes into span(U)
    z = half.sender_module()(h, tokens)  # (B, L, D) -> (B, L, k)

The anchor (E, P) is the embedding tables the run starts from (a checkpoint's, or the
random init's, which every rank rebuilds from the seed); U is the same on every boundary.
The half has no parameters: it is fixed by the mode's name, k, the run's seed and its
starting point. Gradients travel back as k values a token (mode none, bf16).
"""

from __future__ import annotations

import torch
from torch import nn

from aqsgd.compress.ingraph import InGraph
from aqsgd.compress.modes.base import ActivationMode, Comparison

__all__ = ["MODE", "COMPARISONS", "SSN", "Subspace", "SubspaceSpace", "subspace_basis"]

_MAX_VOCAB = 1 << 16  # ids travel as 2 bytes (aqsgd.compress.ingraph, token ids)


def subspace_basis(width: int, k: int, seed: int) -> torch.Tensor:
    """(width, k) orthonormal columns from `seed`: the same on every rank."""
    g = torch.Generator().manual_seed(7_919 * seed + 1_000_003 * width + k)
    q, _ = torch.linalg.qr(torch.randn(width, k, generator=g, dtype=torch.float64))
    return q.float()  # (D, k)


class SubspaceSpace(nn.Module):
    """The fixed subspace and anchor one stage shares between its sender, its receiver
    and the hooks that keep its blocks in the subspace; buffers only (not saved: they
    follow from the seed and the starting point)."""

    def __init__(self, basis: torch.Tensor, token_table: torch.Tensor,
                 position_table: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("basis", basis, persistent=False)  # U (D, k)
        self.register_buffer("token_table", token_table, persistent=False)  # E (V, D)
        self.register_buffer("position_table", position_table, persistent=False)  # P (L, D)

    def anchor(self, tokens: torch.Tensor) -> torch.Tensor:
        """E[tokens] + P[:L]: (B, L) -> (B, L, D)."""
        return self.token_table[tokens] + self.position_table[: tokens.shape[1]]

    def coords(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.basis.to(x.dtype)  # (..., D) -> (..., k)

    def lift(self, z: torch.Tensor) -> torch.Tensor:
        return z @ self.basis.T.to(z.dtype)  # (..., k) -> (..., D)

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """U U^T x: x's part in the subspace."""
        return self.lift(self.coords(x))


class SubspaceSender(nn.Module):
    def __init__(self, space: SubspaceSpace) -> None:
        super().__init__()
        self.space = space

    def forward(self, h: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        return self.space.coords(h - self.space.anchor(tokens))  # (B, L, k)


class SubspaceReceiver(nn.Module):
    def __init__(self, space: SubspaceSpace) -> None:
        super().__init__()
        self.space = space

    def forward(self, z: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        return self.space.anchor(tokens) + self.space.lift(z.float())  # (B, L, D)


class Subspace(InGraph):
    """ssn's in-graph half: coordinates in U around the anchor; the stage constrained."""

    carries_tokens = True

    def __init__(self, cfg, shape) -> None:
        super().__init__(cfg, shape)
        if shape.vocab_size > _MAX_VOCAB:
            raise ValueError(f"model.vocab_size: mode ssn sends token ids as 2 bytes, so at "
                             f"most {_MAX_VOCAB} tokens; got {shape.vocab_size}")
        if shape.embeddings is None:
            raise ValueError("mode ssn: its anchor needs the starting embedding tables "
                             "(BoundaryShape.embeddings), got None")
        tokens, positions = shape.embeddings()
        self.space = SubspaceSpace(subspace_basis(shape.width, self.coords, shape.seed),
                                   tokens.detach().float().clone(),
                                   positions.detach().float().clone())

    def sender_module(self) -> nn.Module:
        return SubspaceSender(self.space)

    def receiver_module(self) -> nn.Module:
        return SubspaceReceiver(self.space)

    def constrain(self, writers: list[nn.Module], embedding: nn.Module | None) -> None:
        """Forward hooks: each writer's output (after its dropout) becomes U U^T out; the
        embedding's becomes anchor + U U^T (out - anchor). The residual stream is then
        anchor + U z after every constrained block."""
        space = self.space
        for writer in writers:
            writer.register_forward_hook(lambda _m, _inp, out: space.project(out))
        if embedding is not None:
            def onto_anchor(_m, inp, out):
                anchor = space.anchor(inp[0]).to(out.dtype)
                return anchor + space.project(out - anchor)

            embedding.register_forward_hook(onto_anchor)


class SSN(ActivationMode):
    name = "ssn"
    rank = 4.5  # tables: after aqsgd+gc (4), before bottleneck (4.6) and bf16 (5)
    codes_rows = False  # the coordinates go raw in the comparison's dtype (bf16)
    in_graph = Subspace
    bench_cases = (("bf16", 16),)
    smoke_case = ("bf16", 16)


MODE = SSN
COMPARISONS = (Comparison("ssn", rank=4.5, forward="ssn", backward="none", dtype="bf16"),)
