"""The probe on the wire: a timestamping TCP server and its client, one exchange per
directed link, started by the launchers on their hosts with a plan's arguments
(bench.net.probe.plan.ProbePlan.client_args):

    python -m bench.net.probe serve --addr 198.18.0.2 --port 5201 --sessions 1
    python -m bench.net.probe measure --addr 198.18.0.2 --port 5201 --bytes 12500000 \\
        --steady-from-bytes 52278 --timeout-s 32 --max-pacing-mbit 200

`measure` prints one JSON object: round trips from PINGS ping-pongs, then the bulk
transfer's payload rate timed at the receiver with the kernel's receive timestamps:
`rate_mbit` from the plan's `steady_from_bytes` (the one checked against the scenario),
`rate_mbit_first_to_last` from the first byte. Pacing is capped at `--max-pacing-mbit`.
Standard library only: it starts once per link, without site-packages where it must.
docs/architecture/launch.md, "Probe", says why each choice.
"""

from __future__ import annotations

import argparse
import json
import math
import socket
import statistics
import struct
import sys
import time

__all__ = ["PINGS", "main", "measure", "serve"]

PING_BYTES = 64
CHUNK_BYTES = 1 << 20
PINGS = 10  # timed ping-pongs per exchange, after one untimed
# Linux's SO_TIMESTAMPNS (struct timespec in a control message); Python does not name it
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
CMSG_SPACE = socket.CMSG_SPACE(16)
SO_MAX_PACING_RATE = getattr(socket, "SO_MAX_PACING_RATE", 47)  # Linux's; bytes/s


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"peer closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def _recv_line(conn: socket.socket) -> bytes:
    buf = bytearray()
    while not buf.endswith(b"\n"):
        chunk = conn.recv(1)
        if not chunk:
            raise ConnectionError("peer closed before the end of a line")
        buf += chunk
    return bytes(buf)


def _enable_rx_timestamps(conn: socket.socket) -> bool:
    """Ask the kernel to stamp each received segment: timing then does not depend on
    when this process is scheduled (it may wake milliseconds late on a loaded machine)."""
    try:
        conn.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


def _arrival_time(ancillary: list) -> float:
    """The kernel's receive time (CLOCK_REALTIME) of the last segment read."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
            sec, nsec = struct.unpack("qq", data[:16])
            return sec + nsec * 1e-9
    return time.time()


def _handle(conn: socket.socket) -> None:
    header = json.loads(_recv_line(conn))
    for _ in range(header["pings"]):
        conn.sendall(_recv_exact(conn, PING_BYTES))
    total = header["bulk_bytes"]
    view = memoryview(bytearray(CHUNK_BYTES))
    kernel_clock = _enable_rx_timestamps(conn)
    got, t_first, t_steady = 0, None, None
    steady_at = header["steady_from_bytes"]  # the plan's: after slow start and the burst
    while got < total:
        n, ancillary, _, _ = conn.recvmsg_into([view[:min(CHUNK_BYTES, total - got)]],
                                               CMSG_SPACE)
        if n == 0:
            raise ConnectionError(f"sender closed after {got} of {total} bytes")
        now = _arrival_time(ancillary) if kernel_clock else time.time()
        if t_first is None:
            t_first, first_bytes = now, n
        got += n
        if t_steady is None and got >= steady_at:
            t_steady, steady_bytes = now, got
    t_last = now
    reply = {"bytes": total, "first_bytes": first_bytes, "first_to_last_s": t_last - t_first,
             "steady_bytes": total - steady_bytes, "steady_s": t_last - t_steady}
    conn.sendall(json.dumps(reply).encode() + b"\n")


def serve(addr: str, port: int, sessions: int, out=sys.stdout) -> None:
    """Accept `sessions` probe clients one after the other, then exit."""
    with socket.create_server((addr, port), reuse_port=False) as srv:
        print("listening", file=out, flush=True)
        for _ in range(sessions):
            conn, _ = srv.accept()
            with conn:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                _handle(conn)


def _connect(addr: str, port: int, timeout_s: float) -> socket.socket:
    # a loop, not tenacity: the probe starts without site-packages (tests/bench/net/probe)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return socket.create_connection((addr, port), timeout=timeout_s)
        except (ConnectionRefusedError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def measure(addr: str, port: int, bulk_bytes: int, steady_from_bytes: int,
            timeout_s: float, max_pacing_mbit: float | None = None,
            pings: int = PINGS) -> dict:
    """Client side: ping-pong then bulk transfer to a `serve`r, which times the bytes
    from `steady_from_bytes` on as the steady window, the sender paced at most at
    `max_pacing_mbit` (bench.net.probe.plan.plan_probe gives these numbers); returns the
    results."""
    if not 0 <= steady_from_bytes < bulk_bytes:
        raise ValueError(f"measure: expected 0 <= steady_from_bytes < bulk_bytes, got "
                         f"steady_from_bytes={steady_from_bytes}, bulk_bytes={bulk_bytes}")
    with _connect(addr, port, timeout_s) as conn:
        conn.settimeout(timeout_s)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if max_pacing_mbit is not None:
            conn.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE,
                            struct.pack("Q", math.ceil(max_pacing_mbit * 1e6 / 8)))
        header = {"pings": pings + 1, "bulk_bytes": bulk_bytes,
                  "steady_from_bytes": steady_from_bytes}
        conn.sendall(json.dumps(header).encode() + b"\n")
        payload = b"p" * PING_BYTES
        rtts = []
        for _ in range(pings + 1):
            t0 = time.perf_counter()
            conn.sendall(payload)
            _recv_exact(conn, PING_BYTES)
            rtts.append(time.perf_counter() - t0)
        block = memoryview(b"\0" * CHUNK_BYTES)
        left = bulk_bytes
        while left:
            n = min(left, CHUNK_BYTES)
            conn.sendall(block[:n])
            left -= n
        reply = json.loads(_recv_line(conn))
    # the first round trip pays for connection warm-up: leave it out
    return {
        "rtt_ms": statistics.median(rtts[1:]) * 1e3,
        "rtt_ms_min": min(rtts[1:]) * 1e3,
        "rate_mbit": reply["steady_bytes"] * 8 / reply["steady_s"] / 1e6,
        "rate_mbit_first_to_last": (reply["bytes"] - reply["first_bytes"]) * 8
        / reply["first_to_last_s"] / 1e6,
        "bytes": reply["bytes"],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.net.probe",
                                     description="TCP link probe (server and client)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--addr", required=True)
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--sessions", type=int, default=1)
    m = sub.add_parser("measure")
    m.add_argument("--addr", required=True)
    m.add_argument("--port", type=int, required=True)
    m.add_argument("--bytes", type=int, required=True)
    m.add_argument("--steady-from-bytes", type=int, required=True)
    m.add_argument("--timeout-s", type=float, required=True)
    m.add_argument("--max-pacing-mbit", type=float)
    m.add_argument("--pings", type=int, default=PINGS)
    args = parser.parse_args(argv)
    if args.cmd == "serve":
        serve(args.addr, args.port, args.sessions)
    else:
        print(json.dumps(measure(args.addr, args.port, args.bytes, args.steady_from_bytes,
                                 args.timeout_s, args.max_pacing_mbit, args.pings)))

