"""What a message is on the wire: a list of tensors, sent one after the other.

Every compressor's `encode` returns such a list, p2p sends it, and the byte counters of
the pipeline and of data-parallel gradient averaging count it with `message_nbytes`.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

__all__ = ["message_nbytes"]


def message_nbytes(tensors: Iterable[torch.Tensor]) -> int:
    """Exact bytes a message puts on the wire: every tensor's payload, headers included."""
    return sum(t.numel() * t.element_size() for t in tensors)
