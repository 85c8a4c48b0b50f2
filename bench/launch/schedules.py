"""Links that change during a run: the schedule runner every shaped launcher shares.

    hosts.start_schedule()   # t = 0 of every link's schedule (bench.net.schedule)
    ...                      # the workers run
    hosts.stop_schedule()    # every link back to its own values; the record of the run

One thread of the launcher's process walks the changes of all scheduled links in time
order (`link_changes`, pure) on time.monotonic() and applies each through the launcher's
transport (`_run_on_host`: the plan's `tc ... change` commands, ShapingPlan.phase_argvs)
or its delay line (`_set_delay_line`); the same clock starts and stops competing flows
and stragglers (bench/launch/competing.py) on the launchers that name them in
`during_run`. A failed change stops the runner and `stop_schedule` raises it.
`probe_timeline` streams over one link through any launcher's `spawn`. What each record
holds and why: docs/architecture/launch.md, "Launchers".
"""

from __future__ import annotations

import heapq
import json
import math
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.launch.base import Launcher
from bench.launch.competing import (
    CounterRead,
    CpuChange,
    FlowEvent,
    FlowProcesses,
    competing_record,
    run_events,
)
from bench.launch.process import TEARDOWN_GRACE_S, env_with_repo, python_argv, stop_group
from bench.net.executor import format_argv
from bench.net.probe import PhaseWindow
from bench.net.scenario import LinkSpec, NetworkScenario
from bench.net.shaping import Interface, ShapingPlan
from bench.net.tc import ShapingError

__all__ = ["LinkChange", "ScheduleFailed", "ScheduleRunner", "ScheduledLinks",
           "changes_impairments", "link_changes", "probe_timeline", "restore_changes",
           "schedule_windows"]

STOP_JOIN_S = 90.0  # longer than a command may take (bench.net.executor's 60 s)
TIMELINE_PORT = 5202  # beside the link probe's 5201
SERVER_START_S = 30.0
TIMELINE_SLACK_S = 60.0  # the sender's close and the server's reply, after duration_s


class ScheduleFailed(RuntimeError):
    """A link change could not be applied: the links were not what the schedule says."""


@dataclass(frozen=True)
class LinkChange:
    """Link src -> dst becomes `spec` at `t_s` seconds (phase `index` of lap `lap`;
    index -1: back to the link's own values); `down`: it carries nothing; `was_down`: it
    was down until now."""

    t_s: float
    src: int
    dst: int
    index: int
    lap: int
    spec: LinkSpec
    down: bool
    was_down: bool

    def describe(self) -> str:
        return f"link {self.src} -> {self.dst}, phase {self.index}"

    def to_dict(self) -> dict:
        return {"t_s": self.t_s, "src": self.src, "dst": self.dst, "phase": self.index,
                "lap": self.lap, "rate_mbit": self.spec.rate_mbit, "delay_ms": self.spec.delay_ms,
                "jitter_ms": self.spec.jitter_ms, "loss_pct": self.spec.loss_pct,
                "down": self.down}


def link_changes(scenario: NetworkScenario, n_hosts: int,
                 until_s: float = math.inf) -> Iterator[LinkChange]:
    """Every phase start of every scheduled link between n_hosts hosts before `until_s`,
    in time order (ties: in link order), each knowing whether its link was down."""
    def one(src: int, dst: int, spec: LinkSpec) -> Iterator[tuple[float, int, int, LinkChange]]:
        was_down = False
        for start in spec.schedule.starts(until_s):
            yield (start.t_s, src, dst, LinkChange(
                start.t_s, src, dst, start.index, start.lap, spec.in_phase(start.phase),
                start.phase.down, was_down))
            was_down = start.phase.down

    streams = [one(a, b, s) for a, b, s in scenario.scheduled_links(n_hosts)]
    for *_, change in heapq.merge(*streams, key=lambda item: item[:3]):
        yield change


def restore_changes(scenario: NetworkScenario, last: dict[tuple[int, int], LinkChange],
                    t_s: float) -> list[LinkChange]:
    """The changes putting each link of `last` (its last applied change) back to its
    own values."""
    return [LinkChange(t_s, a, b, -1, 0, replace(scenario.link_spec(a, b), schedule=None),
                       False, c.down) for (a, b), c in last.items()]


def changes_impairments(scenario: NetworkScenario, n_hosts: int) -> bool:
    """Whether some phase gives a link another delay, jitter or loss than its own."""
    def impairments(s: LinkSpec) -> tuple[float, float, float]:
        return s.delay_ms, s.jitter_ms, s.loss_pct

    return any(impairments(spec.in_phase(p)) != impairments(spec)
               for _, _, spec in scenario.scheduled_links(n_hosts) for p in spec.schedule.phases)


Event = LinkChange | FlowEvent | CounterRead | CpuChange


def merged_events(scenario: NetworkScenario, n_hosts: int) -> Iterator[Event]:
    """The link changes (`link_changes`, unending where a schedule loops) and the
    competing flows' and stragglers' events (`run_events`), in time order (at one time
    the link changes first)."""
    def key(e: Event) -> tuple[float, int]:
        return e.t_s, 0 if isinstance(e, LinkChange) else 1

    yield from heapq.merge(link_changes(scenario, n_hosts), run_events(scenario, n_hosts),
                           key=key)


class ScheduleRunner:
    """A thread applying `changes` (in time order) at their times: `apply(change)`
    returns the commands it ran (as text). `clock` gives seconds (monotonic);
    `on_applied(entry)`, if given, gets each change's record entry once it is applied."""

    def __init__(self, changes: Iterable[Event], apply: Callable[[Event], list[str]],
                 clock: Callable[[], float] = time.monotonic,
                 on_applied: Callable[[dict], None] | None = None):
        self._changes = iter(changes)
        self._apply = apply
        self._clock = clock
        self._on_applied = on_applied
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.t0 = 0.0
        self.started_unix: float | None = None
        self.stopped_unix: float | None = None
        self.applied: list[dict[str, Any]] = []
        self.last: dict[tuple[int, int], LinkChange] = {}  # each link's last change
        self.error: str | None = None

    def start(self) -> None:
        self.t0, self.started_unix = self._clock(), time.time()
        self._thread = threading.Thread(target=self._run, name="link-schedule", daemon=True)
        self._thread.start()

    def elapsed_s(self) -> float:
        return self._clock() - self.t0

    def _run(self) -> None:
        for change in self._changes:
            if self._stop.wait(max(0.0, change.t_s - self.elapsed_s())):
                return
            self.apply_now(change)
            if self.error is not None:
                return

    def apply_now(self, change: Event) -> None:
        """Apply one change at once and record it (an error stops the runner)."""
        applied_s = self.elapsed_s()
        entry = {**change.to_dict(), "applied_s": round(applied_s, 4)}
        try:
            entry["commands"] = self._apply(change)
        except Exception as err:  # recorded, and raised again by stop()
            self.error = f"{change.describe()} at {change.t_s:g} s: {type(err).__name__}: {err}"
            entry["error"] = self.error
        else:
            if isinstance(change, LinkChange):
                self.last[(change.src, change.dst)] = change
        entry["done_s"] = round(self.elapsed_s(), 4)
        self.applied.append(entry)
        if self._on_applied is not None:
            self._on_applied(entry)

    def stop(self) -> None:
        """Stop applying changes (the thread ends; what it applied stays)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(STOP_JOIN_S)
        self.stopped_unix = time.time()

    def record(self) -> dict:
        return {"started_unix": self.started_unix, "stopped_unix": self.stopped_unix,
                "changes": list(self.applied), "error": self.error}


class ScheduledLinks:
    """start_schedule / stop_schedule / schedule_record of a shaped launcher (module doc).
    The launcher gives its plan and interfaces (`_schedule_plan`), how a command runs on
    a host (`_run_on_host`, its transport: bench.launch.hosts.Hosts) and, where a delay
    line carries delay, jitter and loss, how one link's values reach it
    (`_set_delay_line`; the default refuses)."""

    scenario: NetworkScenario
    n_hosts: int
    mechanisms: dict[str, str]
    # what besides link schedules this launcher runs on the clock: "competing" (flows),
    # "stragglers" (CPU caps); bench.harness.preflight refuses the others before bring-up
    during_run: frozenset[str] = frozenset()
    _schedule: ScheduleRunner | None = None
    _last_schedule: dict | None = None
    _delay_line_changes = False  # the delay line gets every change (start_schedule)
    _flows: FlowProcesses | None = None
    _readings: list[dict] | None = None  # the counter reads of the running schedule
    _last_dynamics: dict | None = None  # the `competing` / `stragglers` blocks of the last run

    def _schedule_plan(self) -> tuple[ShapingPlan, tuple[Interface, ...]]:
        raise NotImplementedError

    def _set_delay_line(self, change: LinkChange) -> str:
        """Give the delay line change.spec's delay, jitter and loss for the link; returns
        what was done, as text."""
        raise ShapingError(f"{type(self).__name__}: this launcher's delay line cannot change "
                           f"a link's delay, jitter or loss during a run")

    def _class_bytes(self, src: int, dst: int) -> int:
        """The bytes link src -> dst's htb class has sent so far (its tc counter)."""
        raise NotImplementedError

    def _framing(self) -> float:
        """Bytes the link's class counts per byte of TCP payload of a full segment."""
        raise NotImplementedError

    def _flow_log_dir(self) -> Path:
        """A folder of this run for the competing flows' logs (removed at teardown)."""
        raise NotImplementedError

    def _set_cpu(self, host: int, factor: float | None) -> str:
        """Cap host's CPU for `factor` (bench.net.straggler; None: lift the cap); returns
        what was done, as text."""
        raise NotImplementedError

    def check_schedule(self) -> None:
        """Refuse, before anything runs, a schedule this launcher cannot apply: delay,
        jitter or loss changes on a delay line without a control channel; competing
        flows or stragglers on a launcher that does not run them (`during_run`)."""
        name = getattr(self, "name", type(self).__name__)
        asked = {"competing": self.scenario.competing_within(self.n_hosts),
                 "stragglers": self.scenario.stragglers_within(self.n_hosts)}
        for what, entries in asked.items():
            if entries and what not in self.during_run:
                raise ShapingError(f"scenario {self.scenario.name}: the {name} launcher "
                                   f"does not run {what} (the netns launcher does)")
        delay_line = "delayline" in self.mechanisms.values()
        if delay_line and changes_impairments(self.scenario, self.n_hosts) and \
                type(self)._set_delay_line is ScheduledLinks._set_delay_line:
            raise ShapingError(
                f"scenario {self.scenario.name}: a link's schedule changes delay, jitter or "
                f"loss, which the {getattr(self, 'name', type(self).__name__)} launcher's "
                f"delay line cannot change during a run (netem can, where the kernel has "
                f"it); give those phases rates only")

    def _apply_change(self, change: Event) -> list[str]:
        if isinstance(change, FlowEvent):
            if change.start:
                return [self._flows.start(change.flow, self._flow_remaining_s(change.flow))]
            return [self._flows.stop(change.flow)]
        if isinstance(change, CounterRead):
            counted = self._class_bytes(change.src, change.dst)
            self._readings.append({**change.to_dict(), "bytes": counted,
                                   "applied_s": round(self._schedule.elapsed_s(), 4)})
            return [f"class counter of link {change.src} -> {change.dst}: {counted} bytes"]
        if isinstance(change, CpuChange):
            return [self._set_cpu(change.host, change.factor)]
        plan, interfaces = self._schedule_plan()
        done = []
        for host, argv in plan.phase_argvs(change.src, change.dst, change.spec,
                                           down=change.down, was_down=change.was_down,
                                           interfaces=interfaces):
            self._run_on_host(host, argv)
            done.append(format_argv(argv))
        if self._delay_line_changes:
            done.append(self._set_delay_line(change))
        return done

    def _flow_remaining_s(self, k: int) -> float:
        return self.scenario.competing[k].end_s - self._schedule.elapsed_s()

    def start_schedule(self, on_change: Callable[[dict], None] | None = None) -> None:
        """Start every link's schedule, competing flow and straggler now (nothing when
        the scenario has none); the flows' receivers listen before t = 0. `on_change`
        gets each change's record entry as it is applied (`bench.launch up` prints it)."""
        if self._schedule is not None:
            raise RuntimeError("start_schedule: a schedule runs already; stop_schedule first")
        if not self.scenario.changes_during_run(self.n_hosts):
            return
        on_delay_line = any(self.mechanisms.get(p) == "delayline"
                            for p in ("delay", "jitter", "loss"))
        self._delay_line_changes = on_delay_line and changes_impairments(self.scenario,
                                                                         self.n_hosts)
        flows = {k: f for k, f in enumerate(self.scenario.competing)
                 if f.src < self.n_hosts and f.dst < self.n_hosts}
        self._readings = []
        if flows:
            self._flows = FlowProcesses(self, flows, self._flow_log_dir())
            self._flows.start_receivers()
        self._schedule = ScheduleRunner(merged_events(self.scenario, self.n_hosts),
                                        self._apply_change, on_applied=on_change)
        self._schedule.start()

    def stop_schedule(self) -> dict | None:
        """Stop the schedule and put every changed link back to its own values; the
        record of the run (None when none ran). Raises ScheduleFailed when a change
        failed."""
        runner = self._schedule
        if runner is None:
            return None
        runner.stop()
        for change in restore_changes(self.scenario, runner.last, runner.elapsed_s()):
            runner.apply_now(change)
        self._last_dynamics = self._finish_dynamics(runner)
        self._last_schedule = runner.record()
        self._schedule = None
        if runner.error is not None:
            raise ScheduleFailed(runner.error)
        return self._last_schedule

    def _finish_dynamics(self, runner: ScheduleRunner) -> dict:
        """Lift the CPU caps still on and read the flows' receivers: the record's
        `competing` and `stragglers` blocks of this run."""
        out: dict[str, Any] = {}
        stragglers = self.scenario.stragglers_within(self.n_hosts)
        if stragglers:
            capped = {}
            for c in runner.applied:
                if c.get("kind") == "cpu" and "error" not in c:
                    capped[c["host"]] = c["factor"] is not None
            for host in [h for h, on in capped.items() if on]:
                runner.apply_now(CpuChange(runner.elapsed_s(), host, None, -1))
            out["stragglers"] = {
                "mechanism": self._cpu_mechanism(),
                "stragglers": [s.to_dict() for s in self.scenario.stragglers],
                "applied": [c for c in runner.applied if c.get("kind") == "cpu"]}
        if self._flows is not None:
            for src, dst in dict.fromkeys((f.src, f.dst) for f in self._flows.flows.values()):
                runner.apply_now(CounterRead(runner.elapsed_s(), src, dst, final=True))
            for k in self._flows.senders:
                if k not in {c["flow"] for c in runner.applied
                             if c.get("kind") == "flow_stop"}:
                    runner.apply_now(FlowEvent(runner.elapsed_s(), k, False))
            replies = self._flows.finish()
            out["competing"] = competing_record(self.scenario, self.n_hosts, self._readings,
                                                replies, runner.started_unix, self._framing())
            self._flows = None
        return out

    def _cpu_mechanism(self) -> str:
        """What caps a straggler's CPU, in words (the launcher's)."""
        raise NotImplementedError

    def schedule_record(self) -> dict | None:
        """record()'s `schedule`: every scheduled link's schedule and the last run
        (None when no link has a schedule)."""
        if not self.scenario.changes_during_run(self.n_hosts):
            return None
        links = self.scenario.scheduled_links(self.n_hosts)
        runner = self._schedule
        run = runner.record() if runner is not None else self._last_schedule
        return {"clock": "one thread of the launcher process, time.monotonic(); "
                         "started_unix is time.time() at t = 0",
                "links": [{"src": a, "dst": b, **s.schedule.to_dict()} for a, b, s in links],
                "run": run,
                **(self._last_dynamics if runner is None and self._last_dynamics else {})}


# -- the time-resolved probe ----------------------------------------------------------
def schedule_windows(spec: LinkSpec, until_s: float, payload_ratio: float = 1.0,
                     cap_mbit: float | None = None) -> list[PhaseWindow]:
    """Each phase of `spec`'s schedule that starts before `until_s`: its window (s after
    the schedule's start; the last cut at until_s) and the payload rate it promises
    (the phase's rate, at most `cap_mbit` (the hosts' caps on the path, which have no
    schedule), x `payload_ratio`; None when down)."""
    starts = list(spec.schedule.starts(until_s))
    windows = []
    for k, start in enumerate(starts):
        end = starts[k + 1].t_s if k + 1 < len(starts) else until_s
        rate = spec.in_phase(start.phase).rate_mbit
        if cap_mbit is not None:
            rate = min(rate, cap_mbit)
        rate = None if start.phase.down else rate * payload_ratio
        windows.append(PhaseWindow(start.index, start.t_s, min(end, until_s), rate))
    return windows


def _wait_listening(server: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        if log.is_file() and "listening" in log.read_text():
            return
        if server.poll() is not None:
            raise RuntimeError(f"timeline probe server exited with {server.returncode}: "
                               f"{log.read_text() if log.is_file() else '(no log)'}")
        time.sleep(0.05)
    raise RuntimeError(f"timeline probe server did not listen within {SERVER_START_S:g} s")


def probe_timeline(hosts: Launcher, src: int, dst: int, duration_s: float, log_dir: Path, *,
                   max_pacing_mbit: float | None = None, bin_s: float = 0.1,
                   port: int = TIMELINE_PORT) -> dict:
    """Stream from host src to host dst for `duration_s` (bench.net.probe.stream, both
    ends through `hosts.spawn`, so on any launcher); the receiver's reply: `t0_unix`,
    `bin_s`, `bytes` per bin. Logs go to `log_dir` (a folder the hosts can write)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    python = python_argv(sys.executable, "-m", "bench.net.probe")
    server_log, client_log = log_dir / f"timeline-{src}-{dst}-recv.log", \
        log_dir / f"timeline-{src}-{dst}-send.log"
    server = hosts.spawn(dst, [*python, "stream-serve", "--addr", hosts.addr(dst), "--port",
                               str(port), "--bin-s", str(bin_s)], env_with_repo(), server_log)
    client = None
    try:
        _wait_listening(server, server_log)
        pacing = [] if max_pacing_mbit is None else ["--max-pacing-mbit", str(max_pacing_mbit)]
        client = hosts.spawn(src, [*python, "stream-send", "--addr", hosts.addr(dst), "--port",
                                   str(port), "--duration-s", str(duration_s), *pacing],
                             env_with_repo(), client_log)
        client.wait(timeout=duration_s + TIMELINE_SLACK_S)
        server.wait(timeout=TIMELINE_SLACK_S)
    finally:
        for proc in (client, server):
            if proc is not None:
                stop_group(proc, TEARDOWN_GRACE_S)
    if client.returncode != 0 or server.returncode != 0:
        raise RuntimeError(f"timeline probe {src} -> {dst} failed (sender {client.returncode}, "
                           f"receiver {server.returncode}): {client_log.read_text()}"
                           f"{server_log.read_text()}")
    return json.loads(server_log.read_text().strip().splitlines()[-1])
