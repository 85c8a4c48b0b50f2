"""The probe record: one directed link as the probe measured it, the form every launcher
returns and meta.json keeps (`probe`). Standard library only.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = ["ProbeRecord"]


@dataclass(frozen=True)
class ProbeRecord:
    """One directed link src -> dst as the probe measured it; every launcher returns
    these, with every field filled. Rates are TCP payload Mbit/s, times ms.

    `rate_mbit_configured`: what the link should carry (None = unshaped: loopback,
    the local launcher). `rate_mbit_achieved`: steady-state rate (`measure`'s
    `rate_mbit`); `rate_mbit_first_to_last`: first to last byte. `rate_mbit_ceiling`:
    what the host carries on that path with its rate limits lifted, measured only
    when the shaped link fell short (else None). `host_limited`: the shortfall is the
    host's, not the shaping's (bench.net.probe.verdict.rate_verdict: that ceiling is
    below twice the configured rate).
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
