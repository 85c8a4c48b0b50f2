"""`python -m bench.launch up SCENARIO`: the scenario's hosts up until Ctrl-C, its
schedules, competing flows and stragglers played on the schedule runner's clock
(bench/launch/schedules.py, as during a cell), each change printed as it is applied.

    code = hold_or_play(netns(scenario, n_hosts), scenario)   # 1 when a change failed
    code = hold_or_play(netns(first_phase_held(scenario), n_hosts), scenario, hold=True)

Ctrl-C or SIGTERM stops the schedule (every link back to its own values, the flows'
senders stopped, the CPU caps lifted) and tears the hosts down by their exact names
(bench/launch/lifecycle.py). docs/changing-links.md, "Trying a program under a scenario: up".
"""

from __future__ import annotations

import sys
import threading
from dataclasses import replace
from typing import TextIO

from bench.launch.base import Launcher
from bench.launch.schedules import ScheduleFailed, merged_events
from bench.net.scenario import LinkSpec, NetworkScenario

__all__ = ["change_line", "first_phase_held", "hold_or_play", "plan_lines"]


def first_phase_held(scenario: NetworkScenario) -> NetworkScenario:
    """`up --hold-first-phase`: every scheduled link at its first phase's values for
    good, no competing flows, no stragglers; ValueError when a first phase is an outage
    (held, the link would carry nothing)."""
    def held(spec: LinkSpec, where: str) -> LinkSpec:
        if spec.schedule is None:
            return spec
        first = spec.schedule.phases[0]
        if first.down:
            raise ValueError(f"--hold-first-phase: {where}'s first phase is an outage; "
                             f"held, the link would carry nothing")
        return spec.in_phase(first)

    return replace(scenario, link=held(scenario.link, "the scenario's link"),
                   overrides=tuple(replace(o, spec=held(o.spec, f"link {o.src} -> {o.dst}"))
                                   for o in scenario.overrides),
                   competing=(), stragglers=())


def _values(rate_mbit: float | None, delay_ms: float, jitter_ms: float,
            loss_pct: float) -> str:
    """A link's values in words: its rate, and its delay, jitter and loss where not 0."""
    parts = ["unshaped" if rate_mbit is None else f"{rate_mbit:g} Mbit/s"]
    parts += [f"{name} {v:g}{unit}" for name, v, unit in (
        ("delay", delay_ms, " ms"), ("jitter", jitter_ms, " ms"), ("loss", loss_pct, "%")) if v]
    return ", ".join(parts)


def change_line(entry: dict, scenario: NetworkScenario) -> str | None:
    """One line for a change the schedule runner applied (its record entry); None for
    a byte counter read, which changes nothing."""
    kind = entry.get("kind", "link")
    if kind == "counter":
        return None
    if kind == "link":
        what = "back to its own values" if entry["phase"] < 0 else \
            f"phase {entry['phase']}" + (f" (lap {entry['lap']})" if entry["lap"] else "")
        state = "down (an outage)" if entry["down"] else _values(
            entry["rate_mbit"], entry["delay_ms"], entry["jitter_ms"], entry["loss_pct"])
        line = f"link {entry['src']} -> {entry['dst']}: {what}: {state}"
    elif kind == "cpu":
        line = f"straggler {entry['straggler']}: host {entry['host']} " + (
            "at full speed again" if entry["factor"] is None
            else f"computes {entry['factor']:g}x slower")
    else:
        flow = scenario.competing[entry["flow"]]
        line = f"competing flow {entry['flow']} ({flow.src} -> {flow.dst}) " + (
            "starts" if kind == "flow_start" else "stops")
    failed = f"  FAILED: {entry['error']}" if "error" in entry else ""
    return f"t = {entry['applied_s']:8.2f} s  {line}{failed}"


def plan_lines(scenario: NetworkScenario, n_hosts: int, hold: bool = False) -> list[str]:
    """What `up` does with the links of `scenario` (as written, not held), in words."""
    links = scenario.scheduled_links(n_hosts)
    flows = len(scenario.competing_within(n_hosts))
    stragglers = len(scenario.stragglers_within(n_hosts))
    if not scenario.changes_during_run(n_hosts):
        return ["no schedule, competing flow or straggler: the links hold still"]
    if hold:
        held = [(a, b, s.in_phase(s.schedule.phases[0])) for a, b, s in links]
        return [f"holding link {a} -> {b} at its schedule's first phase: "
                f"{_values(h.rate_mbit, h.delay_ms, h.jitter_ms, h.loss_pct)}"
                for a, b, h in held] + \
            [f"held, not played: the schedules, {flows} competing flow(s), {stragglers} "
             f"straggler(s) (without --hold-first-phase, up plays them)"]
    looping = [s.schedule.duration_s for _, _, s in links if s.schedule.loop]
    if looping:
        when = f"looping (laps of {', '.join(f'{d:g}' for d in sorted(set(looping)))} s)"
    else:
        last_s = max(e.t_s for e in merged_events(scenario, n_hosts))
        when = f"the last change at {last_s:g} s, its values held after it"
    return [f"playing the scenario: {len(links)} scheduled link(s), {flows} competing "
            f"flow(s), {stragglers} straggler(s); {when}; each change below as it is "
            f"applied (t: seconds after the schedule's start)"]


def hold_or_play(launcher: Launcher, scenario: NetworkScenario, hold: bool = False,
                 out: TextIO | None = None) -> int:
    """Bring the launcher's hosts up, print them and `plan_lines`, play the scenario
    (unless `hold`: the launcher was built from `first_phase_held(scenario)`) until
    Ctrl-C or SIGTERM, stop it, tear down. 0, or 1 when a change failed."""
    out = sys.stdout if out is None else out
    failed, printing = threading.Event(), threading.Lock()

    def say(*lines: str) -> None:  # whole lines: the runner's thread prints too
        with printing:
            out.write("".join(f"{line}\n" for line in lines))
            out.flush()

    def show(entry: dict) -> None:
        line = change_line(entry, scenario)
        if line is not None:
            say(line)
        if "error" in entry:
            failed.set()

    error = None
    with launcher as hosts:
        say(*(f"host {h['host']}: ip netns exec {h['netns']} ...  ({h['device']}, "
              f"{h['addr']})" for h in hosts.record()["hosts"]),
            *plan_lines(scenario, hosts.n_hosts, hold),
            f"state file {hosts.state_path}; Ctrl-C to tear down")
        play = not hold and scenario.changes_during_run(hosts.n_hosts)
        try:
            if play:
                hosts.start_schedule(on_change=show)
                say(f"t = 0 at unix time "
                    f"{hosts.record()['schedule']['run']['started_unix']:.3f}")
            while not failed.wait(1.0):
                pass
        except KeyboardInterrupt:
            say("tearing down")
        finally:
            if play:
                try:
                    hosts.stop_schedule()
                except ScheduleFailed as err:
                    error = str(err)
    if error is not None:
        print(f"error: the schedule stopped at a change that failed: {error}",
              file=sys.stderr)
        return 1
    return 0
