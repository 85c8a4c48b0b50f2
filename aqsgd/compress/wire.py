"""What a message is on the wire: a list of tensors, sent one after the other.

Every compressor's `encode` returns such a list, p2p sends it, and the byte counters of
the pipeline and of data-parallel gradient averaging count it with `message_nbytes`.
A message described before it exists is a `WireSpec`; a dim `DATA_SIZED` in it is known
only after encoding (a sparsifier's entry count), so such a message travels length-first
(docs/pipeline.md, "Messages whose size depends on the data"):

    prefix = shape_prefix(tensors)                 # sender: int64 (sum of ndims,), first
    prefix_spec(spec)                              # receiver: the prefix's own spec
    resolve_spec(spec, prefix)                     # the message's spec, every dim known
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

__all__ = ["DATA_SIZED", "WireSpec", "message_nbytes", "prefix_spec", "resolve_spec",
           "shape_prefix", "sized_by_data", "spec_nbytes"]

# a message described before its tensors exist: [(shape, dtype)] in wire order
WireSpec = list[tuple[tuple[int, ...], torch.dtype]]
# a dim of a WireSpec that only the encoder knows (the receiver learns it from the prefix)
DATA_SIZED = -1


def message_nbytes(tensors: Iterable[torch.Tensor]) -> int:
    """Exact bytes a message puts on the wire: every tensor's payload, headers included."""
    return sum(t.numel() * t.element_size() for t in tensors)


def sized_by_data(spec: WireSpec) -> bool:
    """Whether some dim of `spec` is DATA_SIZED (known only after encoding)."""
    return any(n == DATA_SIZED for shape, _ in spec for n in shape)


def spec_nbytes(spec: WireSpec) -> int:
    """Exact bytes of a message described as [(shape, dtype)] (a compressor's wire spec):
    what `message_nbytes` counts once the tensors exist, without allocating them. A spec
    with a DATA_SIZED dim has no such count: ValueError (a prediction takes the mode's
    `expected_spec`, aqsgd.compress.message.message_spec(..., expected=True))."""
    if sized_by_data(spec):
        raise ValueError(f"spec_nbytes: the spec {spec} has a dim known only after encoding "
                         f"(DATA_SIZED); predict with message_spec(..., expected=True)")
    total = 0
    for shape, dtype in spec:
        numel = 1
        for n in shape:
            numel *= int(n)
        total += numel * torch.empty((), dtype=dtype).element_size()
    return total


def prefix_spec(spec: WireSpec) -> tuple[tuple[int, ...], torch.dtype]:
    """The spec of a length-first message's prefix: int64 (sum of the tensors' ndims,)."""
    return ((sum(len(shape) for shape, _ in spec),), torch.int64)


def shape_prefix(tensors: Iterable[torch.Tensor]) -> torch.Tensor:
    """The prefix a length-first message sends before its tensors: every dim of every
    tensor in wire order, int64 (sum of ndims,)."""
    return torch.tensor([n for t in tensors for n in t.shape], dtype=torch.int64)


def resolve_spec(spec: WireSpec, prefix: torch.Tensor) -> WireSpec:
    """`spec` with its DATA_SIZED dims read from a received prefix; a fixed dim the
    prefix contradicts is a ValueError naming both."""
    dims = [int(n) for n in prefix.reshape(-1).tolist()]
    if len(dims) != prefix_spec(spec)[0][0]:
        raise ValueError(f"length prefix holds {len(dims)} dims, the spec {spec} has "
                         f"{prefix_spec(spec)[0][0]}")
    out, k = [], 0
    for shape, dtype in spec:
        got = tuple(dims[k:k + len(shape)])
        k += len(shape)
        for want, n in zip(shape, got, strict=True):
            if n < 0 or (want != DATA_SIZED and n != want):
                raise ValueError(f"length prefix: shape {got} where the spec says {shape} "
                                 f"(-1: any size); prefix {dims}")
        out.append((got, dtype))
    return out
