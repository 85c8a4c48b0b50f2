"""What a message is on the wire: a list of tensors, sent one after the other.

Every compressor's `encode` returns such a list, p2p sends it, and the byte counters of
the pipeline and of data-parallel gradient averaging count it with `message_nbytes`.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

__all__ = ["WireSpec", "message_nbytes", "spec_nbytes"]

# a message described before its tensors exist: [(shape, dtype)] in wire order
WireSpec = list[tuple[tuple[int, ...], torch.dtype]]


def message_nbytes(tensors: Iterable[torch.Tensor]) -> int:
    """Exact bytes a message puts on the wire: every tensor's payload, headers included."""
    return sum(t.numel() * t.element_size() for t in tensors)


def spec_nbytes(spec: WireSpec) -> int:
    """Exact bytes of a message described as [(shape, dtype)] (a compressor's wire spec):
    what `message_nbytes` counts once the tensors exist, without allocating them."""
    total = 0
    for shape, dtype in spec:
        numel = 1
        for n in shape:
            numel *= int(n)
        total += numel * torch.empty((), dtype=dtype).element_size()
    return total
