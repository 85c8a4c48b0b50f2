"""Point-to-point messages between pipeline stages over torch.distributed.

A message is the list of tensors a compressor's `encode` returns (aqsgd.compress.activation:
its own int64 header [format, epoch, n_raw, sample ids...] first, then the payload).
Both ends derive every micro-batch's sample ids from the sampler and compute
`wire_spec` identically, so the receiver posts `irecv`s of exactly the right sizes
before the data arrives; the compressor's `decode` then checks the header against
the ids the receiver derived. On one (src, dst) link, the n-th message sent is
matched with the n-th receive posted, for gloo and NCCL alike: the schedule
validator guarantees the orders agree.

Sends return at once and complete in the background (`wait_sends` at the end of
the step); receives are posted early and waited for only when the data is needed.
Every wait has a timeout, so a dead peer turns into an exception, not a hang.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from aqsgd.compress.wire import message_nbytes
from aqsgd.train.metrics import StepMeter

__all__ = ["PendingRecv", "P2P"]

@dataclass
class PendingRecv:
    """A posted receive; `tensors` are valid only after P2P.wait_recv."""

    peer: int
    kind: str  # activation | gradient
    label: str  # for errors and the trace, e.g. "activation mb3 step 7"
    tensors: list[torch.Tensor]
    works: list
    posted_us: float


class P2P:
    """This rank's sends and receives, with byte counting, tracing and timeouts."""

    def __init__(self, meter: StepMeter, device: torch.device, timeout_s: float):
        self.meter = meter
        self.device = device
        self.timeout = timedelta(seconds=timeout_s)
        self._sends: list[tuple[int, str, list, list[torch.Tensor], float]] = []

    def send(self, peer: int, kind: str, tensors: list[torch.Tensor]) -> None:
        """Post one message; returns at once (the tensors are kept until sent)."""
        msg = [t.contiguous() for t in tensors]
        works = [dist.isend(t, dst=peer) for t in msg]
        self.meter.add_bytes(kind, peer, sent=message_nbytes(msg))
        self._sends.append((peer, kind, works, msg, self.meter.now_us()))

    def post_recv(self, peer: int, kind: str, label: str,
                  spec: list[tuple[tuple[int, ...], torch.dtype]]) -> PendingRecv:  # fmt: skip
        """Post the receives of one message described by `spec` = [(shape, dtype)]."""
        tensors = [torch.empty(shape, dtype=dtype, device=self.device) for shape, dtype in spec]
        works = [dist.irecv(t, src=peer) for t in tensors]
        return PendingRecv(peer, kind, label, tensors, works, self.meter.now_us())

    def _wait(self, works: list, what: str) -> None:
        for w in works:
            try:
                w.wait(self.timeout)
            except RuntimeError as e:
                raise RuntimeError(f"{what} failed or timed out after "
                                   f"{self.timeout.total_seconds():.0f} s: {e}") from e  # fmt: skip

    def wait_recv(self, pending: PendingRecv) -> list[torch.Tensor]:
        """Block until the message has arrived; returns its tensors."""
        with self.meter.span("comm_wait", f"wait {pending.label}"):
            self._wait(pending.works, f"receiving {pending.label} from rank {pending.peer}")
        self.meter.add_bytes(pending.kind, pending.peer, recv=message_nbytes(pending.tensors))
        self.meter.add_trace(f"recv {pending.label}", "recv", pending.posted_us,
                             self.meter.now_us() - pending.posted_us)  # fmt: skip
        return pending.tensors

    def wait_sends(self) -> None:
        """Block until every send posted so far has completed."""
        if not self._sends:
            return
        with self.meter.span("comm_wait", "wait sends"):
            for peer, kind, works, _msg, posted_us in self._sends:
                self._wait(works, f"sending {kind} to rank {peer}")
                self.meter.add_trace(f"send {kind}", "send", posted_us,
                                     self.meter.now_us() - posted_us)  # fmt: skip
        self._sends.clear()
