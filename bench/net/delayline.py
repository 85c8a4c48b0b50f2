"""Userspace delay line: delay, jitter and loss between network namespaces on a kernel
without netem (the netns launcher starts it).

    python -m bench.net.delayline --config DELAYLINE.json
    python -m bench.net.delayline --tunnel-config CFG.json --ready-file F   (a container)

One TUN device per host namespace, every fd held by this process: a packet host i sends
to host j comes out of TUN i, waits delay(i -> j) +- jitter (or is dropped with
loss(i -> j)), then goes into TUN j. Rate shaping stays in the kernel (htb on each
TUN's egress). The container path is bench.net.tunnel, the control socket
bench.net.delaycontrol, the shared TUN and queue code bench.net.tun; docs/shaping.md,
"The userspace delay line", has the design and the measured ceiling.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.net.delaycontrol import apply_control, control_socket, set_link
from bench.net.tun import (
    Impairments,
    ipv4_dst,
    libc,
    open_tun,
    read_batch,
    wait_readable,
    write_packet,
)
from bench.net.tunnel import TUNNEL_OVERHEAD_BYTES, TunnelConfig, run_tunnel

# TunnelConfig, TUNNEL_OVERHEAD_BYTES and set_link: the launchers import them from here
__all__ = ["TUNNEL_OVERHEAD_BYTES", "DelayLineConfig", "TunnelConfig", "open_tun",
           "run_delay_line", "run_tunnel", "set_link"]

PR_SET_PDEATHSIG = 1
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


def run_delay_line(cfg: DelayLineConfig, ready=sys.stdout, scheduling: str = "normal") -> None:
    """Open the TUNs (and the control socket), print "ready SCHEDULING", forward
    packets until SIGTERM."""
    fds = [open_tun(ns, tun) for ns, tun in zip(cfg.netns, cfg.tun, strict=True)]
    host_of = {socket.inet_aton(a): i for i, a in enumerate(cfg.addrs)}
    links = Impairments(cfg.delay_ms, cfg.jitter_ms, cfg.loss_pct, cfg.seed)
    src_of_fd = {fd: i for i, fd in enumerate(fds)}
    control = None if cfg.control is None else control_socket(cfg.control)
    watched = fds if control is None else [*fds, control]
    print(f"ready {scheduling}", file=ready, flush=True)

    while True:
        readable = wait_readable(watched, links.wait_s())
        now = time.monotonic()
        for fd in readable:
            if fd is control:
                apply_control(control, links, len(fds))
                continue
            src = src_of_fd[fd]
            for pkt in read_batch(fd):
                dst = host_of.get(ipv4_dst(pkt))
                if dst is not None and dst != src:
                    links.admit(src, dst, pkt, now)
        for dst, pkt in links.due(time.monotonic()):
            write_packet(fds[dst], pkt)


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
    libc().prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if args.config is not None:
        run_delay_line(DelayLineConfig.load(args.config), scheduling=_realtime_priority())
    else:
        run_tunnel(TunnelConfig.from_json(args.tunnel_config.read_text()), args.ready_file,
                   scheduling=_realtime_priority())


if __name__ == "__main__":
    main()
