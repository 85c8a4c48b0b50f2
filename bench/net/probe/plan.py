"""The probe plan: how one directed link is probed, sized from its configured payload rate
and round trip with a model of TCP's slow start and the shaper's token bucket.

`plan_probe` makes the bulk transfer about one second at the rate on a short link
(12.5 MB at 100 Mbit/s), longer where slow start or the token bucket would otherwise fill
it (6 s and 34 MB at 100 Mbit/s with a 200 ms round trip; 7 s and 178 kB at 0.2 Mbit/s),
never more than MAX_TRANSFER_S (60 s); `ProbePlan.client_args` is the `measure` command
line that carries it out (bench.net.probe.wire). docs/network.md has the measured figures.

Standard library only at import: `plan_probe` loads bench.net.tc when called, so the
probe's server and client, which start once per link, never load the scenario schema.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bench.net.probe.wire import PINGS

__all__ = ["MAX_TRANSFER_S", "ProbePlan", "ProbePlanError", "plan_probe", "slow_start_bytes",
           "slow_start_rtts"]

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
# The client caps its pacing at this multiple of the link's rate. Why: TCP builds its
# segments' GSO batches from the pacing rate (about 1 ms of it, at least 2 segments), and
# htb lets a whole batch through on any positive token count; unpaced, a low-rate link
# passes 64 KiB batches (measured over 145 kB steady windows: unpaced, 0.2 and 0.5 Mbit/s
# links read 0.82 of their rate three times out of three; paced, 0.94-1.04). At twice
# the rate the shaper, not the sender, still sets the rate: a link that passes too much
# reads high.
PACING_HEADROOM = 2.0
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
