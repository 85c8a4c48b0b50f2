"""Competing flows and stragglers during a run: the events they add to the schedule
runner's clock (bench/launch/schedules.py), the flows' processes, and what the record
says of them.

    events = run_events(scenario, n_hosts)   # flow starts/stops, counter reads, CPU changes
    flows = FlowProcesses(hosts, {k: flow, ...}, log_dir)   # the flows between the hosts up
    flows.start_receivers()                  # before t = 0: every receiver listening
    ...                                      # the runner starts and stops the senders
    replies = flows.finish()                 # each receiver's bytes per bin
    block = competing_record(scenario, n, readings, replies, started_unix, framing)

A flow is bench.net.probe.stream's sender and receiver (bench.net.competing says why),
both through the launcher's `spawn`, so between the run's own hosts and addresses only:
the receiver listens on host dst's address, the sender on host src connects to it.
At each start and stop of a flow the runner also reads the byte counter of the link's
htb class (the launcher's `_class_bytes`); the intervals between those reads and the
receivers' bytes in them give the training's share of the link (bench.net.competing,
Note [training share]).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.launch.base import Launcher
from bench.launch.process import TEARDOWN_GRACE_S, env_with_repo, python_argv, stop_group
from bench.net.competing import CompetingFlow, link_intervals, training_share
from bench.net.scenario import NetworkScenario

__all__ = ["FLOW_PORT_BASE", "CounterRead", "CpuChange", "FlowEvent", "FlowProcesses",
           "competing_record", "run_events"]

FLOW_PORT_BASE = 5210  # flow k listens on FLOW_PORT_BASE + k (the probes use 5201, 5202)
RECEIVER_START_S = 30.0
SENDER_STOP_S = 2.0  # a sender past its end gets this long to close on its own
RECEIVER_DONE_S = 60.0  # the senders' queued bytes drain at the link's rate, then EOF


@dataclass(frozen=True)
class FlowEvent:
    """Competing flow `flow` (its index in the scenario's list) starts or stops at t_s."""

    t_s: float
    flow: int
    start: bool

    def describe(self) -> str:
        return f"competing flow {self.flow} {'start' if self.start else 'stop'}"

    def to_dict(self) -> dict:
        return {"t_s": self.t_s, "kind": "flow_start" if self.start else "flow_stop",
                "flow": self.flow}


@dataclass(frozen=True)
class CounterRead:
    """Read the byte counter of link src -> dst's htb class at t_s; `final`: the read
    when the run stops, which ends an interval the run cut short."""

    t_s: float
    src: int
    dst: int
    final: bool = False

    def describe(self) -> str:
        return f"byte counter of link {self.src} -> {self.dst}"

    def to_dict(self) -> dict:
        return {"t_s": self.t_s, "kind": "counter", "src": self.src, "dst": self.dst,
                "final": self.final}


@dataclass(frozen=True)
class CpuChange:
    """Host `host` computes `factor` times slower from t_s (None: at full speed again);
    `straggler`: the index of its straggler entry."""

    t_s: float
    host: int
    factor: float | None
    straggler: int

    def describe(self) -> str:
        return f"straggler {self.straggler} (host {self.host})"

    def to_dict(self) -> dict:
        return {"t_s": self.t_s, "kind": "cpu", "host": self.host, "factor": self.factor,
                "straggler": self.straggler}


# at one time: flows stop, then CPU changes, then the counters are read, then flows start
_ORDER = {(FlowEvent, False): 0, (CpuChange, None): 1, (CounterRead, None): 2,
          (FlowEvent, True): 3}


def run_events(scenario: NetworkScenario, n_hosts: int
               ) -> list[FlowEvent | CounterRead | CpuChange]:
    """Every flow start and stop, counter read and CPU change of the scenario between
    n_hosts hosts, in time order (module doc)."""
    flows = scenario.competing_within(n_hosts)
    events: list[FlowEvent | CounterRead | CpuChange] = []
    for k, f in enumerate(scenario.competing):
        if f.src < n_hosts and f.dst < n_hosts:
            events += [FlowEvent(f.start_s, k, True), FlowEvent(f.end_s, k, False)]
    for src, dst in dict.fromkeys((f.src, f.dst) for f in flows):
        edges = {t for f in flows if (f.src, f.dst) == (src, dst) for t in (f.start_s, f.end_s)}
        events += [CounterRead(t, src, dst) for t in edges]
    for k, s in enumerate(scenario.stragglers):
        if s.host < n_hosts:
            events += [CpuChange(s.start_s, s.host, s.factor, k),
                       CpuChange(s.end_s, s.host, None, k)]

    def key(e: FlowEvent | CounterRead | CpuChange) -> tuple:
        return e.t_s, _ORDER[(type(e), e.start if isinstance(e, FlowEvent) else None)]

    return sorted(events, key=key)


class FlowProcesses:
    """The receivers and senders of a run's competing flows (module doc); every process
    through `hosts.spawn` (so the launcher records it and its teardown stops it)."""

    def __init__(self, hosts: Launcher, flows: dict[int, CompetingFlow], log_dir: Path):
        self.hosts, self.flows, self.log_dir = hosts, flows, log_dir
        self.receivers: dict[int, subprocess.Popen] = {}
        self.senders: dict[int, subprocess.Popen] = {}
        self.sent: dict[int, dict] = {}

    def _log(self, k: int, end: str) -> Path:
        return self.log_dir / f"flow{k}-{end}.log"

    def start_receivers(self) -> None:
        """A receiver per flow on its dst host, each listening before this returns."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for k, f in self.flows.items():
            log = self._log(k, "recv")
            log.unlink(missing_ok=True)
            self.receivers[k] = self.hosts.spawn(
                f.dst, python_argv(sys.executable, "-m", "bench.net.probe", "stream-serve",
                                   "--addr", self.hosts.addr(f.dst), "--port",
                                   str(FLOW_PORT_BASE + k), "--bin-s", "0.1"),
                env_with_repo(), log)
        deadline = time.monotonic() + RECEIVER_START_S
        for k, proc in self.receivers.items():
            log = self._log(k, "recv")
            while not (log.is_file() and "listening" in log.read_text()):
                if proc.poll() is not None or time.monotonic() > deadline:
                    said = log.read_text() if log.is_file() else "(no log)"
                    raise RuntimeError(f"competing flow {k}: its receiver on host "
                                       f"{self.flows[k].dst} did not listen (exit "
                                       f"{proc.poll()}): {said}")
                time.sleep(0.05)

    def start(self, k: int, remaining_s: float) -> str:
        """Start flow k's sender, sending for `remaining_s` (to the flow's planned end)."""
        f = self.flows[k]
        pacing = [] if f.max_rate_mbit is None else ["--max-pacing-mbit", str(f.max_rate_mbit)]
        argv = python_argv(sys.executable, "-m", "bench.net.probe", "stream-send", "--addr",
                           self.hosts.addr(f.dst), "--port", str(FLOW_PORT_BASE + k),
                           "--duration-s", f"{max(0.05, remaining_s):.3f}", *pacing)
        self.senders[k] = self.hosts.spawn(f.src, argv, env_with_repo(), self._log(k, "send"))
        return f"host {f.src}: {' '.join(argv[1:])}"

    def stop(self, k: int) -> str:
        """Flow k's sender ends at its planned end (stopped if it has not closed by then)."""
        proc = self.senders[k]
        try:
            proc.wait(SENDER_STOP_S)
            how = f"closed on its own (exit {proc.returncode})"
        except subprocess.TimeoutExpired:
            stop_group(proc, TEARDOWN_GRACE_S)
            how = "stopped"
        return f"flow {k} sender on host {self.flows[k].src} {how}"

    def finish(self) -> dict[int, dict | None]:
        """Every sender stopped, each receiver's reply (None: it never got a flow)."""
        for k in list(self.senders):
            if self.senders[k].poll() is None:
                stop_group(self.senders[k], TEARDOWN_GRACE_S)
        replies: dict[int, dict | None] = {}
        for k, proc in self.receivers.items():
            try:
                proc.wait(RECEIVER_DONE_S if k in self.senders else 0.0)
            except subprocess.TimeoutExpired:
                pass
            if proc.poll() is None:
                stop_group(proc, TEARDOWN_GRACE_S)
            lines = self._log(k, "recv").read_text().strip().splitlines()
            replies[k] = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else None
        return replies


def _bytes_between(reply: dict | None, a_unix: float, b_unix: float) -> int:
    """The reply's bytes in the bins that start in [a_unix, b_unix)."""
    if reply is None or reply["t0_unix"] is None:
        return 0
    t0, b = reply["t0_unix"], reply["bin_s"]
    return sum(n for k, n in enumerate(reply["bytes"]) if a_unix <= t0 + k * b < b_unix)


def competing_record(scenario: NetworkScenario, n_hosts: int, readings: list[dict],
                     replies: dict[int, dict | None], started_unix: float,
                     framing: float) -> dict:
    """The record's `competing` block: each flow's bytes and when they arrived, and per
    link and interval the class's bytes, the flows' bytes and the training's share
    (bench.net.competing, Note [training share]). `readings`: the counter reads applied
    ({src, dst, t_s, applied_s, bytes, final}; an interval the run cut short ends at
    the final read); `framing`: wire bytes per payload byte."""
    flows = []
    for k, f in enumerate(scenario.competing):
        reply = replies.get(k)
        got = sum(reply["bytes"]) if reply and reply["t0_unix"] is not None else 0
        first = None if not got else round(reply["t0_unix"] - started_unix, 3)
        last = None if not got else round(first + len(reply["bytes"]) * reply["bin_s"], 3)
        flows.append({**f.to_dict(), "ran": k in replies, "bytes_received": got,
                      "first_byte_s": first, "last_byte_s": last,
                      "rate_mbit": None if not got else round(got * 8 / 1e6 / (last - first), 3)})
    intervals = []
    for iv in link_intervals(scenario.competing):
        if iv.src >= n_hosts or iv.dst >= n_hosts:
            continue
        on_link = [r for r in readings if (r["src"], r["dst"]) == (iv.src, iv.dst)]
        a = next((r for r in on_link if r["t_s"] == iv.start_s and not r["final"]), None)
        b = next((r for r in on_link if r["t_s"] == iv.end_s and not r["final"]), None)
        final = next((r for r in on_link if r["final"]), None)
        ks = iv.flows
        row = {"src": iv.src, "dst": iv.dst, "start_s": iv.start_s, "end_s": iv.end_s,
               "flows": list(ks), "cut_at_s": None, "class_bytes": None,
               "competing_bytes": None, "training_bytes": None, "training_share": None}
        if a is not None and b is None and final is not None \
                and final["applied_s"] > a["applied_s"]:
            b = final  # the run stopped inside the interval
            row["cut_at_s"] = final["applied_s"]
        if a is not None and b is not None:
            a_unix, b_unix = started_unix + a["applied_s"], started_unix + b["applied_s"]
            competing = sum(_bytes_between(replies.get(k), a_unix, b_unix) for k in ks)
            total = b["bytes"] - a["bytes"]
            share = training_share(total, competing, framing)
            row.update(measured_s=round(b["applied_s"] - a["applied_s"], 3),
                       class_bytes=total, competing_bytes=competing,
                       training_bytes=max(0, round(total - framing * competing)),
                       training_share=None if share is None else round(share, 4))
        intervals.append(row)
    return {"sender": "bench.net.probe.stream (one TCP connection per flow)",
            "framing": framing, "flows": flows, "intervals": intervals}
