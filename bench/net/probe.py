"""Link probe: what a shaped link actually delivers.

For one directed link src -> dst: a small TCP ping-pong (round-trip time) and a
TCP bulk transfer, timed at the receiver. `plan_probe` sizes the transfer from the
link's configured rate and round trip: about one second at the rate on a short link
(12.5 MB at 100 Mbit/s), longer where TCP's slow start or the token bucket would
otherwise fill it (6 s and 34 MB at 100 Mbit/s with a 200 ms round trip; 7 s and
178 kB at 0.2 Mbit/s), never more than 60 s. Run by the launchers inside the
namespaces, with the plan's arguments (`ProbePlan.client_args`):

    python -m bench.net.probe serve --addr 198.18.0.2 --port 5201 --sessions 1
    python -m bench.net.probe measure --addr 198.18.0.2 --port 5201 --bytes 12500000 \
        --steady-from-bytes 52278 --timeout-s 32 --max-pacing-mbit 200

`measure` prints one JSON object. Two payload rates are reported:
`rate_mbit_first_to_last` (first to last byte at the receiver) and
`rate_mbit` (from the plan's `steady_from_bytes` to the last byte: leaves out TCP
slow start and the token bucket's initial burst, so it is the rate a long transfer
sees; this is the one checked against the scenario). The client caps its pacing at
twice the link's rate (PACING_HEADROOM: small send batches, the shaper still the
limit). Arrival times are the kernel's receive timestamps (SO_TIMESTAMPNS), not the
moment the probe process happens to run.

Host-limited links: Python TCP through veth pairs (or the userspace delay line)
is CPU-bound, so a fast link (10 Gbit/s on a 2-core machine) may deliver less
than its scenario because the host cannot carry more, not because the shaping
is wrong. When a link falls short, the launcher measures the same path with its
rate limit lifted (`rate_mbit_ceiling`, the host's ceiling for that path);
`rate_verdict` then decides: a ceiling below the configured rate (by more than
the tolerance) means the link is host-limited, which is recorded
(`host_limited: true`) and warned about but does not stop the run; a ceiling
that would carry the configured rate means the shaping is off, which stops it.

Every launcher returns its measurements as `ProbeRecord`s (one per directed
link); `check_links`, `host_limited_warning` and `format_table` read them.

Longer than most modules: the plan, the client and server that carry it out and the
record they produce are one contract between the launcher and the processes it starts
inside the namespaces or containers.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import math
import socket
import statistics
import struct
import sys
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["CEILING_HEADROOM", "CEILING_TOLERANCE", "LinkProbeError", "MAX_TRANSFER_S", "ProbePlan",
           "ProbePlanError", "ProbeRecord", "check_links", "format_table",
           "host_limited_warning", "measure", "plan_probe", "rate_verdict", "serve",
           "slow_start_bytes", "slow_start_rtts"]

PING_BYTES = 64
CHUNK_BYTES = 1 << 20
# Linux's SO_TIMESTAMPNS (struct timespec in a control message); Python does not name it
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
CMSG_SPACE = socket.CMSG_SPACE(16)
# A host-limited link must still deliver this close to the host's ceiling: the shaper
# is not the binding limit there, so the two differ only by load noise (measured on
# the 2-core machine: 3.7-5.4 Gbit/s from one probe to the next); a link far below
# even the ceiling is shaped wrongly.
CEILING_TOLERANCE = 0.35
# A link whose host carries less than this multiple of its rate with the limits lifted is
# at the host's mercy when shaped (rate_verdict); a shaping error shows as a link far
# below a rate its host carries many times over (a 20 Mbit/s link on a host that carries
# gigabits).
CEILING_HEADROOM = 2.0


class LinkProbeError(RuntimeError):
    """A link delivers something other than its scenario promises."""


@dataclass(frozen=True)
class ProbeRecord:
    """One directed link src -> dst as the probe measured it; every launcher returns
    these, with every field filled. Rates are TCP payload Mbit/s, times ms.

    `rate_mbit_configured`: what the link should carry (None = unshaped: loopback,
    the local launcher). `rate_mbit_achieved`: steady-state rate (`measure`'s
    `rate_mbit`); `rate_mbit_first_to_last`: first to last byte. `rate_mbit_ceiling`:
    what the host carries on that path with its rate limits lifted, measured only
    when the shaped link fell short (else None). `host_limited`: that ceiling is
    below the configured rate too, so the shortfall is the host's (`rate_verdict`).
    `rtt_ms` / `rtt_ms_min`: median / least ping-pong round trip;
    `rtt_ms_configured`: the round trip the scenario's delays add up to (0.0 when
    none is emulated). `probe_bytes`: size of the bulk transfer."""

    src: int
    dst: int
    rate_mbit_configured: float | None
    rate_mbit_achieved: float
    rate_mbit_first_to_last: float
    rate_mbit_ceiling: float | None
    host_limited: bool
    rtt_ms: float
    rtt_ms_min: float
    rtt_ms_configured: float
    probe_bytes: int

    def __post_init__(self) -> None:
        for name in ("src", "dst"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"ProbeRecord.{name}: expected a host index >= 0, "
                                 f"got {value!r}")
        def number(value) -> bool:
            return isinstance(value, int | float) and not isinstance(value, bool)

        configured = self.rate_mbit_configured
        if configured is not None and not (number(configured) and configured > 0):
            raise ValueError(f"ProbeRecord.rate_mbit_configured: expected > 0 or None "
                             f"(unshaped), got {configured!r}")
        for name in ("rate_mbit_achieved", "rate_mbit_first_to_last", "rtt_ms", "rtt_ms_min",
                     "rtt_ms_configured"):
            value = getattr(self, name)
            if not (number(value) and value >= 0):
                raise ValueError(f"ProbeRecord.{name}: expected a number >= 0, got {value!r}")
        ceiling = self.rate_mbit_ceiling
        if ceiling is not None and not (number(ceiling) and ceiling >= 0):
            raise ValueError(f"ProbeRecord.rate_mbit_ceiling: expected >= 0 or None, "
                             f"got {ceiling!r}")
        if self.host_limited and (self.rate_mbit_ceiling is None
                                  or self.rate_mbit_configured is None):
            raise ValueError(f"ProbeRecord.host_limited: True needs a configured rate and a "
                             f"measured ceiling, got rate_mbit_configured="
                             f"{self.rate_mbit_configured!r}, rate_mbit_ceiling="
                             f"{self.rate_mbit_ceiling!r}")
        if not isinstance(self.probe_bytes, int) or self.probe_bytes <= 0:
            raise ValueError(f"ProbeRecord.probe_bytes: expected an int > 0, "
                             f"got {self.probe_bytes!r}")

    @classmethod
    def from_measurement(cls, src: int, dst: int, measured: dict[str, Any], *,
                         rate_mbit_configured: float | None, rtt_ms_configured: float,
                         rate_mbit_ceiling: float | None = None,
                         host_limited: bool = False) -> ProbeRecord:
        """A record from `measure`'s result and what the scenario configured."""
        return cls(src=src, dst=dst, rate_mbit_configured=rate_mbit_configured,
                   rate_mbit_achieved=measured["rate_mbit"],
                   rate_mbit_first_to_last=measured["rate_mbit_first_to_last"],
                   rate_mbit_ceiling=rate_mbit_ceiling, host_limited=host_limited,
                   rtt_ms=measured["rtt_ms"], rtt_ms_min=measured["rtt_ms_min"],
                   rtt_ms_configured=rtt_ms_configured, probe_bytes=measured["bytes"])

    def to_dict(self) -> dict[str, Any]:
        """The JSON form kept in meta.json (`probe`) and the launcher record."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProbeRecord:
        return cls(**data)


# The steady window starts this many token buckets (bench.net.tc.burst_bytes) after
# slow start. Measured on this suite's htb classes: starting right after one bucket,
# 0.2 and 0.5 Mbit/s links read 9% high (0.218 and 0.545 over 145 kB), after two
# within 6% (0.188-0.208 and 0.489-0.519).
BUCKET_BURSTS = 2
MSS_BYTES = 1448  # TCP payload of a full 1500-byte frame with timestamps
INITIAL_WINDOW_SEGMENTS = 10  # Linux's initial congestion window (RFC 6928)
# Rounds TCP spends after its window has grown to the link's: BBR (this kernel's default)
# leaves its start-up only after 3 rounds without bandwidth growth; CUBIC leaves sooner.
SLOW_START_EXTRA_RTTS = 3
# The steady window (after slow start and the token bucket's burst) is at least this
# share of the bulk transfer and STEADY_SEGMENTS full segments where MAX_TRANSFER_S
# allows, and never under MIN_STEADY_SEGMENTS.
STEADY_SHARE = 2 / 3
STEADY_SEGMENTS = 100
MIN_STEADY_SEGMENTS = 10
# One link's bulk transfer (slow start and steady window) takes at most this long.
MAX_TRANSFER_S = 60.0
# The unshaped transfer, and the most a fast link's `duration_s` asks for: a host-limited
# 10 Gbit/s link carries 256 MiB in about 0.5-1 s on a 2-core machine.
MAX_BULK_BYTES = 256 << 20
PINGS = 10
# The client caps its pacing at this multiple of the link's rate. Why: TCP builds its
# segments' GSO batches from the pacing rate (about 1 ms of it, at least 2 segments), and
# htb lets a whole batch through on any positive token count; unpaced, a low-rate link
# passes 64 KiB batches (measured over 145 kB steady windows: unpaced, 0.2 and 0.5 Mbit/s
# links read 0.82 of their rate three times out of three; paced, 0.94-1.04). At twice
# the rate the shaper, not the sender, still sets the rate: a link that passes too much
# reads high.
PACING_HEADROOM = 2.0
SO_MAX_PACING_RATE = getattr(socket, "SO_MAX_PACING_RATE", 47)  # Linux's; bytes/s
# The client's timeout: twice the planned time (a loaded machine, a host-limited link)
# and time to start, connect and exchange replies.
TIMEOUT_FACTOR = 2.0
TIMEOUT_SLACK_S = 30.0
# The launcher waits this much longer than the client's own timeout: the interpreter's
# start (`docker exec` included), so the client's error is the one reported.
PROCESS_START_S = 15.0


class ProbePlanError(ValueError):
    """A link whose probe cannot fit MAX_TRANSFER_S."""


@dataclass(frozen=True)
class ProbePlan:
    """How one directed link is probed: `bulk_bytes` sent, the receiver's steady window
    from byte `steady_from_bytes` to the last, `slow_start_rtts` round trips left to TCP
    before it, `planned_s` the expected time (pings and bulk transfer), `timeout_s` the
    client's connection and socket timeout (`process_timeout_s` is the launcher's),
    `max_pacing_mbit` the client's pacing cap (None: uncapped; PACING_HEADROOM)."""

    bulk_bytes: int
    steady_from_bytes: int
    slow_start_rtts: int
    planned_s: float
    timeout_s: float
    max_pacing_mbit: float | None

    def __post_init__(self) -> None:
        steady = self.bulk_bytes - self.steady_from_bytes
        if not (isinstance(self.steady_from_bytes, int) and self.steady_from_bytes >= 0):
            raise ValueError(f"ProbePlan.steady_from_bytes: expected an int >= 0, got "
                             f"{self.steady_from_bytes!r}")
        if not isinstance(self.bulk_bytes, int) or steady < MIN_STEADY_SEGMENTS * MSS_BYTES:
            raise ValueError(f"ProbePlan.bulk_bytes: expected an int at least "
                             f"{MIN_STEADY_SEGMENTS} segments ({MIN_STEADY_SEGMENTS * MSS_BYTES}"
                             f" bytes) above steady_from_bytes={self.steady_from_bytes}, got "
                             f"{self.bulk_bytes!r}")
        for name in ("planned_s", "timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"ProbePlan.{name}: expected > 0, got {getattr(self, name)!r}")

    @property
    def process_timeout_s(self) -> float:
        return self.timeout_s + PROCESS_START_S

    def client_args(self) -> list[str]:
        """The `measure` command line's arguments for this plan (every launcher's)."""
        args = ["--bytes", str(self.bulk_bytes), "--steady-from-bytes",
                str(self.steady_from_bytes), "--timeout-s", f"{self.timeout_s:g}"]
        if self.max_pacing_mbit is not None:
            args += ["--max-pacing-mbit", f"{self.max_pacing_mbit:g}"]
        return args


def slow_start_rtts(rate_mbit: float, rtt_ms: float) -> int:
    """Round trips before TCP's window carries the link: log2 of the window it needs
    (the bandwidth-delay product, in segments) over the initial window, as the window
    doubles once per round trip, plus SLOW_START_EXTRA_RTTS; 0 when the initial window
    already holds the bandwidth-delay product."""
    window_segments = rate_mbit * 1e6 / 8 * rtt_ms / 1e3 / MSS_BYTES
    if window_segments <= INITIAL_WINDOW_SEGMENTS:
        return 0
    return math.ceil(math.log2(window_segments / INITIAL_WINDOW_SEGMENTS)) + \
        SLOW_START_EXTRA_RTTS


def slow_start_bytes(rate_mbit: float, rtt_ms: float) -> int:
    """The most the link delivers during those round trips: the k-th carries the initial
    window doubled k times, never more than the bandwidth-delay product, and the extra
    ones a bandwidth-delay product each (at most 5 products in all, however long the
    slow start: fewer than the rate times its time once it lasts more than 5 rounds)."""
    bdp_bytes = rate_mbit * 1e6 / 8 * rtt_ms / 1e3
    doublings = slow_start_rtts(rate_mbit, rtt_ms) - SLOW_START_EXTRA_RTTS
    if doublings < 0:
        return 0
    first = INITIAL_WINDOW_SEGMENTS * MSS_BYTES
    return math.ceil(sum(min(first * 2 ** k, bdp_bytes) for k in range(doublings))
                     + SLOW_START_EXTRA_RTTS * bdp_bytes)


def plan_probe(rate_mbit: float | None, rtt_ms: float, duration_s: float = 1.0) -> ProbePlan:
    """The probe of one link whose payload rate should be `rate_mbit` (None = unshaped)
    and round trip `rtt_ms`, its bulk transfer about `duration_s` long where the link
    allows. The steady window starts after the bytes the link carries during TCP's slow
    start (`slow_start_bytes`) and BUCKET_BURSTS token buckets (bench.net.tc.burst_bytes
    of the tc rate, which counts frames: payload_factor), and is at least STEADY_SHARE of
    the transfer and STEADY_SEGMENTS segments; the transfer is capped at MAX_TRANSFER_S.
    Raises ProbePlanError when a steady window of MIN_STEADY_SEGMENTS segments does not
    fit that cap."""
    # imported here: the probe's server and client start once per link and need not
    # load the scenario schema that bench.net.tc imports
    from bench.net.tc import burst_bytes, payload_factor

    if not (duration_s > 0 and rtt_ms >= 0):
        raise ValueError(f"plan_probe: expected duration_s > 0 and rtt_ms >= 0, got "
                         f"duration_s={duration_s!r}, rtt_ms={rtt_ms!r}")
    pings_s = (PINGS + 1) * rtt_ms / 1e3
    if rate_mbit is None:
        # no rate to plan from: the byte cap, its first third left out
        return ProbePlan(MAX_BULK_BYTES, int(MAX_BULK_BYTES * (1 - STEADY_SHARE)), 0,
                         MAX_TRANSFER_S, TIMEOUT_FACTOR * (pings_s + MAX_TRANSFER_S)
                         + TIMEOUT_SLACK_S, None)
    rate_bytes_s = rate_mbit * 1e6 / 8
    rtts = slow_start_rtts(rate_mbit, rtt_ms)
    slow_start_s = rtts * rtt_ms / 1e3
    ramp = slow_start_bytes(rate_mbit, rtt_ms)
    steady_from = BUCKET_BURSTS * burst_bytes(rate_mbit * 1e6 * payload_factor()) + ramp
    least = steady_from + MIN_STEADY_SEGMENTS * MSS_BYTES
    bulk = max(min(int(rate_bytes_s * duration_s), MAX_BULK_BYTES),
               math.ceil(steady_from / (1 - STEADY_SHARE)),
               steady_from + STEADY_SEGMENTS * MSS_BYTES)
    # slow start delivers `ramp` in its time, the rest goes at the rate
    fits = ramp + int(rate_bytes_s * (MAX_TRANSFER_S - slow_start_s))
    bulk = min(bulk, fits)
    if bulk < least:
        raise ProbePlanError(
            f"probe of a {rate_mbit:g} Mbit/s link with a {rtt_ms:g} ms round trip: its "
            f"slow start ({rtts} round trips) and token buckets take {steady_from} "
            f"bytes, and {MIN_STEADY_SEGMENTS} more segments ({least} bytes in all) do not "
            f"fit the {MAX_TRANSFER_S:g} s a probe may take (at most {max(fits, 0)} bytes "
            f"at that rate and round trip)")
    planned_s = pings_s + slow_start_s + (bulk - ramp) / rate_bytes_s
    return ProbePlan(bulk, steady_from, rtts, planned_s,
                     TIMEOUT_FACTOR * planned_s + TIMEOUT_SLACK_S,
                     PACING_HEADROOM * rate_mbit)


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
    `max_pacing_mbit` (`plan_probe` gives these numbers); returns the results."""
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


def rate_verdict(configured: float | None, achieved: float, ceiling: float | None = None,
                 tolerance: float = 0.10,
                 ceiling_tolerance: float = CEILING_TOLERANCE) -> str:
    """Judge one link's payload rate (Mbit/s):
    - "ok": unshaped, or within `tolerance` of the configured rate;
    - "short": below it and no ceiling measured yet (measure one, then ask again);
    - "host_limited": below it, and the same path with its rate limit lifted
      (`ceiling`) carries less than CEILING_HEADROOM x the rate, while the shaped link
      gets within `ceiling_tolerance` of the lesser of the rate and that ceiling: the
      host, not the shaper, is the limit. A host that carries a rate unshaped only
      with little to spare does not carry it reliably through the shaper under load;
      measured on the 2-core machine: 1 Gbit/s links read 690 and 891 Mbit/s with
      ceilings of 1040 and 1085; on the 10 Gbit/s scenario, in one probe, shaped
      readings of 6748-9839 Mbit/s came with ceilings of 6080-16878;
    - "off": above the configured rate, or below it although the host carries it
      (or far below even the host's ceiling): the shaping is wrong.
    """
    if configured is None or abs(achieved - configured) <= tolerance * configured:
        return "ok"
    if achieved > configured:
        return "off"
    if ceiling is None:
        return "short"
    if ceiling < CEILING_HEADROOM * configured and \
            achieved >= (1 - ceiling_tolerance) * min(ceiling, configured):
        return "host_limited"
    return "off"


def check_links(records: list[ProbeRecord], tolerance: float = 0.10,
                rtt_slack_ms: float = 2.0) -> None:
    """Raise LinkProbeError if a link's rate is off by more than `tolerance` of its
    configured payload rate (a host-limited link, see `rate_verdict`, is not), or its
    RTT by more than max(tolerance, rtt_slack_ms)."""
    bad = []
    for r in records:
        want, ceiling = r.rate_mbit_configured, r.rate_mbit_ceiling
        verdict = rate_verdict(want, r.rate_mbit_achieved, ceiling, tolerance)
        if verdict in ("short", "off"):
            why = "" if ceiling is None else (
                f" (the host carries {ceiling:.1f} Mbit/s on this path with the rate limit "
                f"lifted: the shaping is wrong)")
            bad.append(f"host {r.src} -> {r.dst}: {r.rate_mbit_achieved:.1f} Mbit/s "
                       f"achieved, {want:g} Mbit/s configured{why}")
        rtt_want = r.rtt_ms_configured
        if abs(r.rtt_ms - rtt_want) > max(tolerance * rtt_want, rtt_slack_ms):
            bad.append(f"host {r.src} -> {r.dst}: RTT {r.rtt_ms:.2f} ms achieved, "
                       f"{rtt_want:g} ms configured")
    if bad:
        raise LinkProbeError(
            f"link probe: {len(bad)} link(s) off by more than {tolerance:.0%} of the scenario "
            f"(is the machine overloaded, or the rate above what this machine or the delay "
            f"mechanism carries? `python -m bench.launch calibrate` measures both; "
            f"probe(check=False) runs anyway):\n  " + "\n  ".join(bad) + "\n"
            + format_table(records))


def host_limited_warning(records: list[ProbeRecord]) -> str | None:
    """A loud multi-line warning naming every host-limited link, or None."""
    limited = [r for r in records if r.host_limited]
    if not limited:
        return None
    lines = [f"  host {r.src} -> {r.dst}: {r.rate_mbit_configured:g} Mbit/s "
             f"configured, {r.rate_mbit_achieved:.1f} achieved, host ceiling "
             f"{r.rate_mbit_ceiling:.1f} Mbit/s" for r in limited]
    return ("WARNING: HOST-LIMITED LINK(S): this machine does not carry the scenario's "
            "rate with room to spare even unshaped; results on these links reflect the "
            "host's ceiling, not the configured rate (recorded as host_limited in "
            "meta.json and labelled in the table, report and figures):\n" + "\n".join(lines))


TABLE_WIDTH = 120  # wide enough that rich never wraps a row


def format_table(records: list[ProbeRecord]) -> str:
    """The probe table as plain text: a header line, then one line per link (ending in
    HOST-LIMITED where the host, not the shaping, limits it), then the units."""
    # imported here: the server and client above start once per probed link and need
    # not load rich
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, pad_edge=False, caption="rates: TCP payload Mbit/s; RTT: ms",
                  caption_justify="left")
    table.add_column("link")
    for name in ("configured", "achieved", "ratio", "ceiling", "RTT cfg", "RTT"):
        table.add_column(name, justify="right")
    table.add_column("")  # the HOST-LIMITED marker
    for r in records:
        want, ceiling = r.rate_mbit_configured, r.rate_mbit_ceiling
        table.add_row(f"{r.src} -> {r.dst}",
                      "unshaped" if want is None else f"{want:.1f}",
                      f"{r.rate_mbit_achieved:.1f}",
                      "-" if want is None else f"{r.rate_mbit_achieved / want:.3f}",
                      "-" if ceiling is None else f"{ceiling:.1f}",
                      f"{r.rtt_ms_configured:.2f}", f"{r.rtt_ms:.2f}",
                      "HOST-LIMITED" if r.host_limited else "")
    out = io.StringIO()
    Console(file=out, width=TABLE_WIDTH, markup=False, highlight=False,
            color_system=None).print(table)
    # rich pads every line to the table's width; callers embed the text in messages
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="TCP link probe (server and client)")
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


if __name__ == "__main__":
    main()
