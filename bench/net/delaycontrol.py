"""The namespace delay line's control socket: change one directed link while it runs.

    set_link(control, src, dst, delay_ms, jitter_ms, loss_pct)   # from the schedule runner

The delay line (bench.net.delayline) listens on a Unix datagram socket, a path in the
run's state directory (a file-system socket reaches across namespaces); packets already
waiting keep the time they were given. A path longer than a Unix socket allows is
reached through its folder opened as /proc/self/fd/N.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

from bench.net.tun import Impairments

__all__ = ["CONTROL_KEYS", "apply_control", "control_socket", "set_link"]

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


def control_socket(path: str) -> socket.socket:
    Path(path).unlink(missing_ok=True)
    where = _UnixAddress(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.bind(where.address)
    finally:
        where.close()
    sock.setblocking(False)
    return sock


def apply_control(sock: socket.socket, links: Impairments, n: int) -> None:
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
