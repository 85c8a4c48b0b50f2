"""The delay line of one container (the Docker launcher's `delay_mechanism="delayline"`).

    python -m bench.net.delayline --tunnel-config CFG.json --ready-file F   (entrypoint)

One TUN device in the container's namespace and one UDP socket on the containers'
network: a packet for peer j leaves the TUN, is dropped here with the link's loss or
else goes at once to peer j's delay line as one UDP datagram stamped with its send
time; that delay line holds it until the send time plus the link's delay (+- jitter,
in order), then writes it into its TUN. docs/shaping.md, "The userspace delay line".
"""

from __future__ import annotations

import json
import os
import random
import socket
import struct
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.net.tun import (
    MAX_PACKET_BYTES,
    READ_BATCH,
    Impairments,
    ipv4_dst,
    open_tun,
    read_batch,
    wait_readable,
    write_packet,
)

__all__ = ["TUNNEL_OVERHEAD_BYTES", "TunnelConfig", "run_tunnel"]

_STAMP = struct.Struct("!d")  # the send time in front of each tunnelled packet
# IPv4 (20) + UDP (8) + the send time around each tunnelled packet
TUNNEL_OVERHEAD_BYTES = 28 + _STAMP.size
TUNNEL_SOCKET_BYTES = 8 << 20
SO_SNDBUFFORCE, SO_RCVBUFFORCE = 32, 33  # Linux; the socket module does not name them
_TUNNEL_ROWS = ("delay_in_ms", "jitter_in_ms", "loss_out_pct")


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

    arriving = Impairments(towards_me(cfg.delay_in_ms), towards_me(cfg.jitter_in_ms),
                            [[0.0] * n for _ in range(n)], cfg.seed + 1)
    tmp = ready_path.with_name(ready_path.name + ".tmp")
    tmp.write_text(f"ready {scheduling}\n")
    os.replace(tmp, ready_path)

    while True:
        readable = wait_readable([tun, udp], arriving.wait_s())
        if tun in readable:
            for pkt in read_batch(tun):
                dst = host_of.get(ipv4_dst(pkt))
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
            write_packet(tun, pkt)
