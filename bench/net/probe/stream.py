"""The time-resolved probe: one TCP stream for a fixed time, the bytes that arrive counted
in bins of the receiver's kernel clock, so that a link whose rate changes (a schedule,
bench.net.schedule) can be checked phase by phase (bench.net.probe.timeline).

    python -m bench.net.probe stream-serve --addr 198.18.0.2 --port 5201 --bin-s 0.1
    python -m bench.net.probe stream-send --addr 198.18.0.2 --port 5201 --duration-s 10 \
        --max-pacing-mbit 100

`stream-serve` prints "listening", then, once the sender has closed, one JSON object:
`t0_unix` (arrival of the first byte, CLOCK_REALTIME, the clock the schedule runner
records its start on), `bin_s`, `bytes` (payload bytes per bin from t0). `stream-send`
sends for `duration_s` (paced at most at `max_pacing_mbit`) and closes; while the link
is down it waits (its socket times out every second to look at the clock). Standard
library only, like the rest of the probe's wire.
"""

from __future__ import annotations

import argparse
import json
import math
import socket
import struct
import sys
import time

from bench.net.probe.wire import (
    CMSG_SPACE,
    SO_MAX_PACING_RATE,
    _arrival_time,
    _connect,
    _enable_rx_timestamps,
)

__all__ = ["STREAM_COMMANDS", "main", "stream_send", "stream_serve"]

STREAM_COMMANDS = ("stream-serve", "stream-send")

SEND_CHUNK_BYTES = 64 << 10
RECV_CHUNK_BYTES = 1 << 20
SEND_POLL_S = 1.0


def stream_serve(addr: str, port: int, bin_s: float, out=sys.stdout) -> dict:
    """Accept one stream, count its bytes per bin until the sender closes; print and
    return the result (module doc)."""
    if not bin_s > 0:
        raise ValueError(f"bin_s: expected > 0, got {bin_s}")
    view = memoryview(bytearray(RECV_CHUNK_BYTES))
    with socket.create_server((addr, port), reuse_port=False) as srv:
        print("listening", file=out, flush=True)
        conn, _ = srv.accept()
        with conn:
            kernel_clock = _enable_rx_timestamps(conn)
            counts: list[int] = []
            t0 = None
            while True:
                n, ancillary, _, _ = conn.recvmsg_into([view], CMSG_SPACE)
                if n == 0:
                    break
                now = _arrival_time(ancillary) if kernel_clock else time.time()
                t0 = now if t0 is None else t0
                k = int((now - t0) / bin_s)
                counts += [0] * (k + 1 - len(counts))
                counts[k] += n
    result = {"t0_unix": t0, "bin_s": bin_s, "bytes": counts,
              "kernel_clock": kernel_clock}
    print(json.dumps(result), file=out, flush=True)
    return result


def stream_send(addr: str, port: int, duration_s: float,
                max_pacing_mbit: float | None = None, connect_timeout_s: float = 30.0) -> int:
    """Send to a `stream_serve` for `duration_s` seconds, then close; returns the bytes
    handed to the socket."""
    block = memoryview(b"\0" * SEND_CHUNK_BYTES)
    sent = 0
    with _connect(addr, port, connect_timeout_s) as conn:
        if max_pacing_mbit is not None:
            conn.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE,
                            struct.pack("Q", math.ceil(max_pacing_mbit * 1e6 / 8)))
        conn.settimeout(SEND_POLL_S)
        deadline = time.monotonic() + duration_s
        while time.monotonic() < deadline:
            try:
                sent += conn.send(block)
            except TimeoutError:
                continue  # the link is down or slow: look at the clock again
    return sent


def main(argv: list[str] | None = None) -> None:
    """`python -m bench.net.probe stream-serve|stream-send ...` (module doc)."""
    parser = argparse.ArgumentParser(prog="python -m bench.net.probe",
                                     description="time-resolved TCP link probe")
    sub = parser.add_subparsers(dest="cmd", required=True)
    ss = sub.add_parser("stream-serve", help="receive one stream, count its bytes per bin")
    ss.add_argument("--addr", required=True)
    ss.add_argument("--port", type=int, required=True)
    ss.add_argument("--bin-s", type=float, default=0.1)
    sd = sub.add_parser("stream-send", help="send for a fixed time, then close")
    sd.add_argument("--addr", required=True)
    sd.add_argument("--port", type=int, required=True)
    sd.add_argument("--duration-s", type=float, required=True)
    sd.add_argument("--max-pacing-mbit", type=float)
    args = parser.parse_args(argv)
    if args.cmd == "stream-serve":
        stream_serve(args.addr, args.port, args.bin_s)
    else:
        stream_send(args.addr, args.port, args.duration_s, args.max_pacing_mbit)
