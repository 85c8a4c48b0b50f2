"""TUN devices and the per-link packet queue that both delay lines share
(bench.net.delayline between namespaces, bench.net.tunnel between containers).

    fd = open_tun("aq1-h0", "aqtun0")         # a non-blocking fd (None: this namespace)
    links = Impairments(delay_ms, jitter_ms, loss_pct, seed)   # n x n matrices
    links.admit(src, dst, packet, time.monotonic()); links.due(time.monotonic())

Standard library only: the delay line runs as a process of its own inside the
namespaces and containers. docs/shaping.md, "The userspace delay line", has the design.
"""

from __future__ import annotations

import ctypes
import fcntl
import heapq
import os
import random
import select
import struct
import time

__all__ = ["MAX_PACKET_BYTES", "READ_BATCH", "Impairments", "ipv4_dst", "libc", "open_tun",
           "read_batch", "wait_readable", "write_packet"]

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
CLONE_NEWNET = 0x40000000
READ_BATCH = 256  # packets read from one TUN per wake-up
MAX_PACKET_BYTES = 65536


def libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _tun_fd(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH22x", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def open_tun(netns: str | None, name: str) -> int:
    """Create TUN device `name` inside namespace `netns` (None: this process's own);
    return its (non-blocking) fd. The process enters the namespace only to create the
    device, then returns."""
    if netns is None:
        return _tun_fd(name)
    lib = libc()
    own = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{netns}", os.O_RDONLY)
    try:
        if lib.setns(target, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into network namespace {netns!r}: {os.strerror(err)}")
        try:
            fd = _tun_fd(name)
        finally:
            if lib.setns(own, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back into the original namespace")
    finally:
        os.close(own)
        os.close(target)
    return fd


class Impairments:
    """Delay, jitter and loss of directed links (ms, ms, % matrices), and the heap of
    packets waiting to leave: `admit` schedules one packet (or drops it), `due`
    pops those whose time has come."""

    def __init__(self, delay_ms, jitter_ms, loss_pct, seed: int):
        self.delay_s = [[d / 1e3 for d in row] for row in delay_ms]
        self.jitter_s = [[j / 1e3 for j in row] for row in jitter_ms]
        self.loss = [[p / 100.0 for p in row] for row in loss_pct]
        self.last_out = [[0.0] * len(row) for row in delay_ms]  # per-link FIFO
        self.rng = random.Random(seed)
        self.pending: list[tuple[float, int, int, bytes]] = []  # (due time, seq, dst, packet)
        self.seq = 0

    def set_link(self, src: int, dst: int, delay_ms: float, jitter_ms: float,
                 loss_pct: float) -> None:
        """New values for the directed link src -> dst, from the next packet on."""
        self.delay_s[src][dst] = delay_ms / 1e3
        self.jitter_s[src][dst] = jitter_ms / 1e3
        self.loss[src][dst] = loss_pct / 100.0

    def wait_s(self) -> float | None:
        """Seconds until the next packet is due; None when none waits."""
        return max(0.0, self.pending[0][0] - time.monotonic()) if self.pending else None

    def admit(self, src: int, dst: int, pkt: bytes, now: float) -> None:
        loss, jitter = self.loss[src][dst], self.jitter_s[src][dst]
        if loss and self.rng.random() < loss:
            return
        due = now + self.delay_s[src][dst]
        if jitter:
            due += self.rng.uniform(-jitter, jitter)
        due = max(due, self.last_out[src][dst])  # no packet overtakes the one ahead
        self.last_out[src][dst] = due
        heapq.heappush(self.pending, (due, self.seq, dst, pkt))
        self.seq += 1

    def due(self, now: float):
        while self.pending and self.pending[0][0] <= now:
            _, _, dst, pkt = heapq.heappop(self.pending)
            yield dst, pkt


def ipv4_dst(pkt: bytes) -> bytes | None:
    # IPv4 only (byte 0 high nibble); the destination address is bytes 16..20
    return pkt[16:20] if len(pkt) >= 20 and pkt[0] >> 4 == 4 else None


def wait_readable(fds: list, wait_s: float | None) -> list:
    # select() takes a microsecond timeout (epoll rounds up to whole milliseconds)
    return select.select(fds, [], [], wait_s)[0] if wait_s is not None \
        else select.select(fds, [], [])[0]


def read_batch(fd: int):
    for _ in range(READ_BATCH):
        try:
            yield os.read(fd, MAX_PACKET_BYTES)
        except BlockingIOError:
            return


def write_packet(fd: int, pkt: bytes) -> None:
    try:
        os.write(fd, pkt)
    except (BlockingIOError, OSError):
        pass  # the receiving TUN is full or down: a drop, as a real link would
