"""Point-to-point messages between pipeline stages over torch.distributed.

    p2p = P2P(meter, device, timeout_s)
    p2p.send(peer, "activation", tensors)             # returns at once
    pending = p2p.post_recv(peer, "activation", label, spec)
    tensors = p2p.wait_recv(pending); p2p.wait_sends()

How messages match (the receiver posts irecvs of the sizes `wire_spec` gives), when
sends and receives complete, and the send timing adaptive widths read: docs/pipeline.md,
"Messages between stages". A direction whose mode is sized by data passes
`length_first=True` to both calls: the shapes go first (aqsgd.compress.wire.shape_prefix),
the receiver posts the tensors' irecvs once the prefix arrived (from a watcher thread on
gloo; in wait_recv on NCCL, whose calls on a communicator come from one thread), and
both count the prefix.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from aqsgd.compress.wire import (
    WireSpec,
    message_nbytes,
    prefix_spec,
    resolve_spec,
    shape_prefix,
    sized_by_data,
)
from aqsgd.train.metrics import StepMeter

__all__ = ["PendingRecv", "P2P", "SendTimer"]

@dataclass
class PendingRecv:
    """A posted receive; `tensors` are valid only after P2P.wait_recv."""

    peer: int
    kind: str  # activation | gradient
    label: str  # for errors and the trace, e.g. "activation mb3 step 7"
    tensors: list[torch.Tensor]
    works: list
    posted_us: float
    # length-first: the message's spec, its DATA_SIZED dims read from `tensors[0]`, the
    # shape prefix (the tensors' irecvs are posted once it has arrived)
    spec: WireSpec | None = None
    ready: threading.Event | None = None  # set once the tensors' receives are posted
    error: Exception | None = None  # why they could not be


class _TimedSend:
    """One send the timer waits on: `done` once its works completed or failed (`error`)."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: RuntimeError | None = None

    def wait(self, timeout: timedelta) -> None:
        if not self.done.wait(timeout.total_seconds() + 1.0):
            raise RuntimeError(f"the send timer got no completion within "
                               f"{timeout.total_seconds():.0f} s")
        if self.error is not None:
            raise self.error


class SendTimer:
    """Busy time of the sends to each peer (module docstring, "Send timing"), measured by
    a daemon thread that waits on each send's works (torch releases the GIL in wait)."""

    def __init__(self, timeout: timedelta):
        self.timeout = timeout
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._totals: dict[int, list[float]] = defaultdict(lambda: [0, 0.0])  # bytes, busy s
        self._last_done: dict[int, float] = {}
        self._thread = threading.Thread(target=self._watch, name="send-timer", daemon=True)
        self._thread.start()

    def add(self, peer: int, works: list, nbytes: int) -> _TimedSend:
        timed = _TimedSend()
        self._queue.put((timed, peer, works, nbytes, time.perf_counter()))
        return timed

    def _watch(self) -> None:
        while True:
            timed, peer, works, nbytes, posted = self._queue.get()
            try:
                for w in works:
                    w.wait(self.timeout)
            except RuntimeError as e:  # wait_sends raises it on the main thread
                timed.error = e
                timed.done.set()
                continue
            done = time.perf_counter()
            start = max(posted, self._last_done.get(peer, posted))
            self._last_done[peer] = done
            with self._lock:
                self._totals[peer][0] += nbytes
                self._totals[peer][1] += done - start
            timed.done.set()  # after the totals: a step's sends are in its count

    def take(self, peer: int) -> tuple[int, float]:
        """(bytes, busy seconds) of the sends to `peer` completed since the last call."""
        with self._lock:
            sent, busy = self._totals.pop(peer, (0, 0.0))
        return int(sent), float(busy)


class _PrefixWatcher:
    """Posts a length-first message's tensor receives as soon as its shape prefix has
    arrived, from a daemon thread: gloo holds a send until its receive is posted, so
    posting them only at wait_recv would stall the payload behind the receiver's compute
    (docs/pipeline.md, "Messages whose size depends on the data")."""

    def __init__(self, p2p: P2P):
        self.p2p = p2p
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._watch, name="prefix-watcher",
                                        daemon=True)
        self._thread.start()

    def add(self, pending: PendingRecv) -> None:
        pending.ready = threading.Event()
        self._queue.put(pending)

    def _watch(self) -> None:
        while True:
            pending = self._queue.get()
            try:
                # a gloo work is waited once (a second wait waits for another message)
                pending.works.pop(0).wait(self.p2p.timeout)
                spec = resolve_spec(pending.spec, pending.tensors[0])
                self.p2p._post(pending, spec)
            except (RuntimeError, ValueError) as e:  # wait_recv raises it on the main thread
                pending.error = e
            pending.ready.set()


class P2P:
    """This rank's sends and receives, with byte counting, tracing and timeouts."""

    def __init__(self, meter: StepMeter, device: torch.device, timeout_s: float,
                 time_sends: bool = False, wire_device: torch.device | None = None):  # fmt: skip
        self.meter = meter
        self.device = device
        # where the transport's buffers live (default `device`): gloo sends host memory
        # only, so a CUDA stage on gloo passes the CPU and its messages go through it
        self.wire_device = wire_device or device
        self.timeout = timedelta(seconds=timeout_s)
        self._sends: list[tuple[int, str, list, list[torch.Tensor], float]] = []
        self.send_timer = SendTimer(self.timeout) if time_sends else None
        self._watcher: _PrefixWatcher | None = None  # started by the first length-first recv
        # who posts a length-first message's tensor receives: the watcher, or wait_recv
        # (NCCL: one thread a communicator)
        self.prefix_thread = dist.is_initialized() and dist.get_backend() != "nccl"

    def send(self, peer: int, kind: str, tensors: list[torch.Tensor],
             length_first: bool = False) -> None:
        """Post one message; returns at once (the tensors are kept until sent). With
        `length_first` its shape prefix goes first (module docstring)."""
        msg = [t.to(self.wire_device).contiguous() for t in tensors]
        if length_first:
            msg.insert(0, shape_prefix(msg).to(self.wire_device))
        works = [dist.isend(t, dst=peer) for t in msg if t.numel()]  # an empty part: no send
        nbytes = message_nbytes(msg)
        self.meter.add_bytes(kind, peer, sent=nbytes)
        if self.send_timer is not None:  # the timer is the one waiter (module docstring)
            works = [self.send_timer.add(peer, works, nbytes)]
        self._sends.append((peer, kind, works, msg, self.meter.now_us()))

    def take_send_times(self, peer: int) -> tuple[int, float]:
        """(bytes, busy seconds) sent to `peer` since the last call (needs `time_sends`)."""
        if self.send_timer is None:
            raise RuntimeError("take_send_times() needs P2P(time_sends=True)")
        return self.send_timer.take(peer)

    def post_recv(self, peer: int, kind: str, label: str, spec: WireSpec,
                  length_first: bool = False) -> PendingRecv:
        """Post the receives of one message described by `spec` = [(shape, dtype)]; with
        `length_first` only its shape prefix's (`spec` may then hold DATA_SIZED dims)."""
        if sized_by_data(spec) and not length_first:
            raise ValueError(f"post_recv {label}: the spec {spec} has dims known only after "
                             f"encoding, so the message must travel length_first")
        pending = PendingRecv(peer, kind, label, [], [], self.meter.now_us(),
                              spec if length_first else None)
        self._post(pending, [prefix_spec(spec)] if length_first else spec)
        if length_first and self.prefix_thread:
            self._watcher = self._watcher or _PrefixWatcher(self)
            self._watcher.add(pending)
        return pending

    def _post(self, pending: PendingRecv, spec: WireSpec) -> None:
        tensors = [torch.empty(shape, dtype=dtype, device=self.wire_device)
                   for shape, dtype in spec]
        pending.tensors += tensors
        pending.works += [dist.irecv(t, src=pending.peer) for t in tensors if t.numel()]

    def _wait(self, works: list, what: str) -> None:
        for w in works:
            try:
                w.wait(self.timeout)
            except RuntimeError as e:
                raise RuntimeError(f"{what} failed or timed out after "
                                   f"{self.timeout.total_seconds():.0f} s: {e}") from e  # fmt: skip

    def wait_recv(self, pending: PendingRecv) -> list[torch.Tensor]:
        """Block until the message has arrived; returns its tensors."""
        what = f"receiving {pending.label} from rank {pending.peer}"
        with self.meter.span("comm_wait", f"wait {pending.label}"):
            if pending.ready is not None:  # length-first: the watcher posts the rest
                if not pending.ready.wait(self.timeout.total_seconds() + 1.0):
                    raise RuntimeError(f"{what}: no length prefix within "
                                       f"{self.timeout.total_seconds():.0f} s")
                if pending.error is not None:
                    raise RuntimeError(f"{what}: {pending.error}") from pending.error
            elif pending.spec is not None:  # length-first without the watcher: post here
                self._wait([pending.works.pop(0)], what)
                try:
                    spec = resolve_spec(pending.spec, pending.tensors[0])
                except ValueError as e:
                    raise RuntimeError(f"{what}: {e}") from e
                self._post(pending, spec)
            self._wait(pending.works, what)
        self.meter.add_bytes(pending.kind, pending.peer, recv=message_nbytes(pending.tensors))
        self.meter.add_trace(f"recv {pending.label}", "recv", pending.posted_us,
                             self.meter.now_us() - pending.posted_us)  # fmt: skip
        message = pending.tensors[1:] if pending.spec is not None else pending.tensors
        return [t.to(self.device) for t in message]

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
