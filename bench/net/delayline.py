"""Userspace delay line: adds delay, jitter and loss between network namespaces
on a kernel without netem.

    python -m bench.net.delayline --config DELAYLINE.json   (started by the netns launcher)

Each host namespace gets one TUN device (an L3 point-to-point interface, no
Ethernet header). This process holds every TUN's file descriptor: a packet the
kernel of host i sends to host j's address comes out of TUN i, waits
delay(i -> j) +- jitter (or is dropped with probability loss(i -> j)), then goes
into TUN j, where host j's kernel receives it. Rate shaping stays in the kernel
(htb on each TUN's egress), so a packet first queues at the bottleneck, then
propagates: the order of a real link.

Delivery on one directed link stays in order under jitter (a packet never
leaves before the one sent ahead of it), unlike netem's default reordering; so
under sustained traffic the delay drifts from delay_ms towards delay_ms +
jitter_ms, while sparse packets (pings) see delay_ms +- jitter_ms.
Timing: the process runs SCHED_FIFO where allowed and sleeps in select() with a
microsecond timeout, so packets leave within a fraction of a millisecond of due.
Throughput: one Python process moves every packet, which caps what the delay
line carries: 1.1-1.4 Gbit/s of TCP payload at MTU 1500 on an unshaped link
between two hosts, measured on a busy 2-core machine. The link probe reports a
link that falls short, and `python -m bench.launch calibrate` measures this
machine's ceiling ("delay mechanism ceiling").

The TUN devices are not persistent: they disappear when this process exits.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import heapq
import json
import os
import random
import select
import signal
import socket
import struct
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["DelayLineConfig", "open_tun", "run_delay_line"]

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
READ_BATCH = 256  # packets read from one TUN per wake-up
MAX_PACKET_BYTES = 65536
RT_PRIORITY = 10  # low among real-time priorities (1..99)


@dataclass(frozen=True)
class DelayLineConfig:
    """Host i is `netns[i]`, its TUN `tun[i]`, its address `addrs[i]`; the n x n
    matrices give the directed link i -> j (diagonal unused)."""

    netns: tuple[str, ...]
    tun: tuple[str, ...]
    addrs: tuple[str, ...]
    delay_ms: tuple[tuple[float, ...], ...]
    jitter_ms: tuple[tuple[float, ...], ...]
    loss_pct: tuple[tuple[float, ...], ...]
    seed: int = 0

    def __post_init__(self) -> None:
        n = len(self.netns)
        if not (len(self.tun) == len(self.addrs) == n):
            raise ValueError(f"DelayLineConfig: netns, tun and addrs must have one entry per "
                             f"host, got {n}, {len(self.tun)}, {len(self.addrs)}")
        for name in ("delay_ms", "jitter_ms", "loss_pct"):
            m = getattr(self, name)
            if len(m) != n or any(len(row) != n for row in m):
                raise ValueError(f"DelayLineConfig.{name}: expected a {n} x {n} matrix, got {m}")
            if any(v < 0 for row in m for v in row):
                raise ValueError(f"DelayLineConfig.{name}: negative entry in {m}")

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))

    @classmethod
    def load(cls, path: Path) -> DelayLineConfig:
        raw = json.loads(path.read_text())
        mats = {k: tuple(tuple(float(v) for v in row) for row in raw[k])
                for k in ("delay_ms", "jitter_ms", "loss_pct")}
        return cls(netns=tuple(raw["netns"]), tun=tuple(raw["tun"]), addrs=tuple(raw["addrs"]),
                   seed=int(raw["seed"]), **mats)


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def open_tun(netns: str, name: str) -> int:
    """Create TUN device `name` inside namespace `netns`; return its (non-blocking) fd.
    The process enters the namespace only to create the device, then returns."""
    libc = _libc()
    own = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{netns}", os.O_RDONLY)
    try:
        if libc.setns(target, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into network namespace {netns!r}: {os.strerror(err)}")
        try:
            fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
            ifr = struct.pack("16sH22x", name.encode(), IFF_TUN | IFF_NO_PI)
            fcntl.ioctl(fd, TUNSETIFF, ifr)
        finally:
            if libc.setns(own, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back into the original namespace")
    finally:
        os.close(own)
        os.close(target)
    return fd


def run_delay_line(cfg: DelayLineConfig, ready=sys.stdout, scheduling: str = "normal") -> None:
    """Open the TUNs, print "ready SCHEDULING", forward packets until SIGTERM."""
    n = len(cfg.netns)
    fds = [open_tun(ns, tun) for ns, tun in zip(cfg.netns, cfg.tun, strict=True)]
    host_of = {socket.inet_aton(a): i for i, a in enumerate(cfg.addrs)}
    delay_s = [[d / 1e3 for d in row] for row in cfg.delay_ms]
    jitter_s = [[j / 1e3 for j in row] for row in cfg.jitter_ms]
    loss = [[p / 100.0 for p in row] for row in cfg.loss_pct]
    last_out = [[0.0] * n for _ in range(n)]  # per-link FIFO: no packet overtakes
    rng = random.Random(cfg.seed)
    pending: list[tuple[float, int, int, bytes]] = []  # heap of (due time, seq, dst, packet)
    seq = 0

    src_of_fd = {fd: i for i, fd in enumerate(fds)}
    print(f"ready {scheduling}", file=ready, flush=True)

    while True:
        # select() takes a microsecond timeout (epoll rounds up to whole milliseconds)
        if pending:
            wait_s = max(0.0, pending[0][0] - time.monotonic())
            readable, _, _ = select.select(fds, [], [], wait_s)
        else:
            readable, _, _ = select.select(fds, [], [])
        now = time.monotonic()
        for fd in readable:
            src = src_of_fd[fd]
            for _ in range(READ_BATCH):
                try:
                    pkt = os.read(fd, MAX_PACKET_BYTES)
                except BlockingIOError:
                    break
                # IPv4 only (byte 0 high nibble); the destination address is bytes 16..20
                if len(pkt) < 20 or pkt[0] >> 4 != 4:
                    continue
                dst = host_of.get(pkt[16:20])
                if dst is None or dst == src:
                    continue
                if loss[src][dst] and rng.random() < loss[src][dst]:
                    continue
                due = now + delay_s[src][dst]
                if jitter_s[src][dst]:
                    due += rng.uniform(-jitter_s[src][dst], jitter_s[src][dst])
                due = max(due, last_out[src][dst])
                last_out[src][dst] = due
                heapq.heappush(pending, (due, seq, dst, pkt))
                seq += 1
        now = time.monotonic()
        while pending and pending[0][0] <= now:
            _, _, dst, pkt = heapq.heappop(pending)
            try:
                os.write(fds[dst], pkt)
            except (BlockingIOError, OSError):
                pass  # the receiving TUN is full or down: a drop, as a real link would


def _realtime_priority() -> str:
    """Run as a real-time (SCHED_FIFO) task where allowed: on a machine loaded by the
    workers, a normal task can wake milliseconds late, which would show up as extra
    delay. The kernel's RT throttling still leaves 5% of each CPU to other tasks."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(RT_PRIORITY))
    except (PermissionError, OSError):
        return "normal"
    return f"fifo:{RT_PRIORITY}"


def _exit_on_sigterm(signum, frame):
    raise SystemExit(0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, required=True, help="DelayLineConfig JSON file")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    # die with the launcher, so a killed run leaves no forwarding process behind
    _libc().prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    run_delay_line(DelayLineConfig.load(args.config), scheduling=_realtime_priority())


if __name__ == "__main__":
    main()
