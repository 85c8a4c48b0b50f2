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

Between containers (the Docker launcher), each container runs a delay line of
its own (`--tunnel-config`): one TUN device in its own namespace, and one UDP
socket on the container's network. A packet the container's kernel sends to
peer j's TUN address comes out of the TUN, is dropped here with the link's
loss or else travels at once to peer j's delay line as one UDP datagram, stamped
with its send time; that delay line holds it until the send time plus the link's
delay (+- jitter, in order as above), then writes it into its TUN. The delay is
applied once per direction, so the round trip is delay(i -> j) + delay(j -> i) as
on the namespace path, and rate shaping stays on each TUN's egress. The TUN's MTU
leaves room for the UDP/IP header and the stamp (TUNNEL_OVERHEAD_BYTES), so no
datagram is fragmented.

Changing a link while it runs (a link's schedule, bench.net.schedule): on the namespace
path the delay line listens on a Unix datagram socket (`DelayLineConfig.control`, a path
in the run's state directory: a file-system socket reaches across namespaces), and
`set_link(control, src, dst, delay_ms, jitter_ms, loss_pct)` gives one directed link new
values; packets already waiting keep the time they were given. The container path has
no such channel (a link's delay is applied at its receiver, its loss at its sender): the
Docker launcher refuses delay, jitter and loss schedules on the delay line.

The TUN devices are not persistent: they disappear when this process exits.

(One file past the usual length on purpose: it runs as a process of its own inside the
namespaces with the standard library only, so the TUN plumbing, the scheduler and the
control socket travel together.)
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

__all__ = ["TUNNEL_OVERHEAD_BYTES", "DelayLineConfig", "TunnelConfig", "open_tun",
           "run_delay_line", "run_tunnel", "set_link"]

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
READ_BATCH = 256  # packets read from one TUN per wake-up
MAX_PACKET_BYTES = 65536
RT_PRIORITY = 10  # low among real-time priorities (1..99)
_STAMP = struct.Struct("!d")  # the send time in front of each tunnelled packet
# IPv4 (20) + UDP (8) + the send time around each tunnelled packet
TUNNEL_OVERHEAD_BYTES = 28 + _STAMP.size
TUNNEL_SOCKET_BYTES = 8 << 20
SO_SNDBUFFORCE, SO_RCVBUFFORCE = 32, 33  # Linux; the socket module does not name them


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
    control: str | None = None  # the Unix socket set_link talks to (None: no changes)

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
                   seed=int(raw["seed"]), control=raw.get("control"), **mats)


@dataclass(frozen=True)
class TunnelConfig:
    """The delay line of container `host` (see module doc): its TUN `tun`; every
    host's TUN address `tun_addrs[j]` (the workers' addresses) and address on the
    containers' network `peer_addrs[j]`, where its delay line listens on UDP `port`.
    Per peer j (entry `host` unused): `loss_out_pct[j]` of the link host -> j, dropped
    here before sending; `delay_in_ms[j]` and `jitter_in_ms[j]` of the link j -> host,
    applied here on arrival."""

    host: int
    tun: str
    tun_addrs: tuple[str, ...]
    peer_addrs: tuple[str, ...]
    port: int
    delay_in_ms: tuple[float, ...]
    jitter_in_ms: tuple[float, ...]
    loss_out_pct: tuple[float, ...]
    seed: int = 0

    def __post_init__(self) -> None:
        n = len(self.tun_addrs)
        if not 0 <= self.host < n:
            raise ValueError(f"TunnelConfig.host: expected 0..{n - 1}, got {self.host}")
        for name in ("peer_addrs", *_TUNNEL_ROWS):
            row = getattr(self, name)
            if len(row) != n:
                raise ValueError(f"TunnelConfig.{name}: expected {n} entries (one per host), "
                                 f"got {row}")
        for name in _TUNNEL_ROWS:
            if any(v < 0 for v in getattr(self, name)):
                raise ValueError(f"TunnelConfig.{name}: negative entry in {getattr(self, name)}")
        if not 0 < self.port < 65536:
            raise ValueError(f"TunnelConfig.port: expected 1..65535, got {self.port}")

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> TunnelConfig:
        raw = json.loads(text)
        rows = {k: tuple(float(v) for v in raw[k]) for k in _TUNNEL_ROWS}
        return cls(host=int(raw["host"]), tun=raw["tun"], tun_addrs=tuple(raw["tun_addrs"]),
                   peer_addrs=tuple(raw["peer_addrs"]), port=int(raw["port"]),
                   seed=int(raw["seed"]), **rows)


_TUNNEL_ROWS = ("delay_in_ms", "jitter_in_ms", "loss_out_pct")


def _libc() -> ctypes.CDLL:
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
    libc = _libc()
    own = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{netns}", os.O_RDONLY)
    try:
        if libc.setns(target, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into network namespace {netns!r}: {os.strerror(err)}")
        try:
            fd = _tun_fd(name)
        finally:
            if libc.setns(own, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back into the original namespace")
    finally:
        os.close(own)
        os.close(target)
    return fd


class _Impairments:
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


def _ipv4_dst(pkt: bytes) -> bytes | None:
    # IPv4 only (byte 0 high nibble); the destination address is bytes 16..20
    return pkt[16:20] if len(pkt) >= 20 and pkt[0] >> 4 == 4 else None


def _select(fds: list, wait_s: float | None) -> list:
    # select() takes a microsecond timeout (epoll rounds up to whole milliseconds)
    return select.select(fds, [], [], wait_s)[0] if wait_s is not None \
        else select.select(fds, [], [])[0]


def _read_batch(fd: int):
    for _ in range(READ_BATCH):
        try:
            yield os.read(fd, MAX_PACKET_BYTES)
        except BlockingIOError:
            return


def _write(fd: int, pkt: bytes) -> None:
    try:
        os.write(fd, pkt)
    except (BlockingIOError, OSError):
        pass  # the receiving TUN is full or down: a drop, as a real link would


CONTROL_KEYS = ("src", "dst", "delay_ms", "jitter_ms", "loss_pct")


UNIX_PATH_MAX = 107  # a Unix socket's path, in bytes (sun_path holds 108 with the NUL)


class _UnixAddress:
    """A Unix socket path usable whatever its length: a long one (a deep results
    directory) is reached through its folder opened as /proc/self/fd/N."""

    def __init__(self, path: str | Path):
        path = Path(path)
        self.fd = None
        self.address = str(path)
        if len(os.fsencode(self.address)) > UNIX_PATH_MAX:
            self.fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
            self.address = f"/proc/self/fd/{self.fd}/{path.name}"

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def set_link(control: str | Path, src: int, dst: int, delay_ms: float, jitter_ms: float,
             loss_pct: float) -> None:
    """Tell the delay line listening on `control` the new values of link src -> dst
    (one datagram; raises OSError when no delay line listens there)."""
    message = dict(zip(CONTROL_KEYS, (src, dst, delay_ms, jitter_ms, loss_pct), strict=True))
    where = _UnixAddress(control)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.sendto(json.dumps(message).encode(), where.address)
    finally:
        where.close()


def _control_socket(path: str) -> socket.socket:
    Path(path).unlink(missing_ok=True)
    where = _UnixAddress(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.bind(where.address)
    finally:
        where.close()
    sock.setblocking(False)
    return sock


def _apply_control(sock: socket.socket, links: _Impairments, n: int) -> None:
    """Every waiting control message; one that does not parse is reported and ignored
    (the sender is the suite's own set_link)."""
    while True:
        try:
            data = sock.recv(4096)
        except BlockingIOError:
            return
        try:
            m = json.loads(data)
            src, dst = int(m["src"]), int(m["dst"])
            values = [float(m[k]) for k in CONTROL_KEYS[2:]]
            if not (0 <= src < n and 0 <= dst < n) or any(v < 0 for v in values):
                raise ValueError(f"link {src} -> {dst} or values {values} out of range")
        except (ValueError, KeyError, TypeError) as e:
            print(f"delay line: control message refused ({e}): {data!r}", file=sys.stderr,
                  flush=True)
            continue
        links.set_link(src, dst, *values)


def run_delay_line(cfg: DelayLineConfig, ready=sys.stdout, scheduling: str = "normal") -> None:
    """Open the TUNs (and the control socket), print "ready SCHEDULING", forward
    packets until SIGTERM."""
    fds = [open_tun(ns, tun) for ns, tun in zip(cfg.netns, cfg.tun, strict=True)]
    host_of = {socket.inet_aton(a): i for i, a in enumerate(cfg.addrs)}
    links = _Impairments(cfg.delay_ms, cfg.jitter_ms, cfg.loss_pct, cfg.seed)
    src_of_fd = {fd: i for i, fd in enumerate(fds)}
    control = None if cfg.control is None else _control_socket(cfg.control)
    watched = fds if control is None else [*fds, control]
    print(f"ready {scheduling}", file=ready, flush=True)

    while True:
        readable = _select(watched, links.wait_s())
        now = time.monotonic()
        for fd in readable:
            if fd is control:
                _apply_control(control, links, len(fds))
                continue
            src = src_of_fd[fd]
            for pkt in _read_batch(fd):
                dst = host_of.get(_ipv4_dst(pkt))
                if dst is not None and dst != src:
                    links.admit(src, dst, pkt, now)
        for dst, pkt in links.due(time.monotonic()):
            _write(fds[dst], pkt)


def _socket_buffer(sock: socket.socket, nbytes: int) -> None:
    """Deep socket buffers, so that a burst is not dropped while this process waits for
    a CPU: the FORCE options pass net.core.[rw]mem_max (they need CAP_NET_ADMIN, which
    a delay line has), the plain ones are the fallback (capped by those limits)."""
    for force, plain in ((SO_RCVBUFFORCE, socket.SO_RCVBUF), (SO_SNDBUFFORCE, socket.SO_SNDBUF)):
        try:
            sock.setsockopt(socket.SOL_SOCKET, force, nbytes)
        except PermissionError:
            sock.setsockopt(socket.SOL_SOCKET, plain, nbytes)


def run_tunnel(cfg: TunnelConfig, ready_path: Path, scheduling: str = "normal") -> None:
    """One container's delay line (see module doc): open its TUN and UDP socket, write
    "ready SCHEDULING" to ready_path (atomically), forward packets until SIGTERM.

    A packet leaves at once, stamped with the time it left the TUN (CLOCK_MONOTONIC,
    one clock for every container of a kernel); the receiver holds it until that time
    plus the link's delay (+- jitter). The crossing and the receiver's wake-up so fall
    inside the delay instead of adding to it."""
    n, me = len(cfg.tun_addrs), cfg.host
    tun = open_tun(None, cfg.tun)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    _socket_buffer(udp, TUNNEL_SOCKET_BYTES)
    udp.bind((cfg.peer_addrs[me], cfg.port))
    udp.setblocking(False)
    host_of = {socket.inet_aton(a): j for j, a in enumerate(cfg.tun_addrs)}
    peer_of = {(a, cfg.port): j for j, a in enumerate(cfg.peer_addrs) if j != me}
    loss_out = [p / 100.0 for p in cfg.loss_out_pct]
    rng = random.Random(cfg.seed)

    def towards_me(row: tuple[float, ...]) -> list[list[float]]:
        return [[row[j] if k == me else 0.0 for k in range(n)] for j in range(n)]  # (n, n)

    arriving = _Impairments(towards_me(cfg.delay_in_ms), towards_me(cfg.jitter_in_ms),
                            [[0.0] * n for _ in range(n)], cfg.seed + 1)
    tmp = ready_path.with_name(ready_path.name + ".tmp")
    tmp.write_text(f"ready {scheduling}\n")
    os.replace(tmp, ready_path)

    while True:
        readable = _select([tun, udp], arriving.wait_s())
        if tun in readable:
            for pkt in _read_batch(tun):
                dst = host_of.get(_ipv4_dst(pkt))
                if dst is None or dst == me or (loss_out[dst] and rng.random() < loss_out[dst]):
                    continue
                try:  # stamp and packet gathered by the kernel: no copy here
                    udp.sendmsg([_STAMP.pack(time.monotonic()), pkt],
                                [], 0, (cfg.peer_addrs[dst], cfg.port))
                except (BlockingIOError, OSError):
                    pass  # the socket's buffer is full: a drop, as a real link would
        if udp in readable:
            for _ in range(READ_BATCH):
                try:
                    data, sender = udp.recvfrom(MAX_PACKET_BYTES)
                except BlockingIOError:
                    break
                src = peer_of.get(sender)  # nothing else may inject packets into the TUN
                if src is not None and len(data) > _STAMP.size:
                    (sent,) = _STAMP.unpack_from(data)
                    arriving.admit(src, me, memoryview(data)[_STAMP.size:], sent)
        for _, pkt in arriving.due(time.monotonic()):
            _write(tun, pkt)


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
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--config", type=Path, help="DelayLineConfig JSON file (namespaces)")
    mode.add_argument("--tunnel-config", type=Path,
                      help="TunnelConfig JSON file (this container's delay line)")
    parser.add_argument("--ready-file", type=Path,
                        help="with --tunnel-config: written once the delay line forwards")
    args = parser.parse_args(argv)
    if args.tunnel_config is not None and args.ready_file is None:
        parser.error("--tunnel-config needs --ready-file")
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    # die with the launcher, so a killed run leaves no forwarding process behind
    _libc().prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if args.config is not None:
        run_delay_line(DelayLineConfig.load(args.config), scheduling=_realtime_priority())
    else:
        run_tunnel(TunnelConfig.from_json(args.tunnel_config.read_text()), args.ready_file,
                   scheduling=_realtime_priority())


if __name__ == "__main__":
    main()
