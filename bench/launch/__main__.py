"""Command line for the network emulation.

    python -m bench.launch probe 100mbps --hosts 2     # bring up, print the link table, tear down
    python -m bench.launch probe dynamic-halving --timeline 80   # each phase's rate, live
    python -m bench.launch up dynamic-halving          # bring up, play its schedule until Ctrl-C
    python -m bench.launch up dynamic-halving --hold-first-phase   # ... or hold phase 0
    python -m bench.launch cleanup --all-recorded      # remove what killed runs left behind
    python -m bench.launch cleanup --state /run/aqsgd-bench/state/aq1b2c3.json
    python -m bench.launch calibrate --repeats 3      # accuracy table of this machine's emulation

`probe --timeline SECONDS` runs the scenario's schedules after the static probe, streams
over one scheduled link (`--link SRC DST`) and prints each phase's rate against the
schedule's; exit 1 when one is off by more than `--tolerance`. `up` plays the scenario
and prints each change until Ctrl-C (bench/launch/up.py). probe, up and calibrate use
the netns launcher (found by name: this core module imports none). Cleanup removes only
the names killed runs wrote in state files, never by pattern (bench/launch/state.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from aqsgd.filecache import atomic_write_text
from bench.launch.base import Launcher
from bench.launch.choice import launcher_factory
from bench.launch.state import (
    DEFAULT_STATE_DIR,
    StateFileError,
    all_recorded_state_files,
    cleanup,
    recorded_state_files,
    run_is_live,
)
from bench.launch.up import first_phase_held, hold_or_play
from bench.net.placement import place
from bench.net.probe import LinkProbeError, check_links, format_table, host_limited_warning
from bench.net.probe.timeline import PhaseRateError, check_phases, phase_rates
from bench.net.scenario import LinkSpec, NetworkScenario, load_scenario, with_link

__all__ = ["calibrate", "main"]


def _launcher(args) -> tuple[Launcher, NetworkScenario, TimelineLink | None]:
    """The netns launcher (not brought up), the scenario as written and, for `probe
    --timeline`, the link to follow; ValueError (ScenarioError, PlacementError) on bad
    input. `up --hold-first-phase`'s launcher has every link at its first phase."""
    scenario = load_scenario(args.scenario)
    n_hosts = scenario.n_hosts if args.hosts is None else args.hosts
    place(scenario, n_hosts)  # PlacementError before anything exists: too many hosts
    link = _timeline_link(args, scenario, n_hosts) if args.cmd == "probe" and args.timeline \
        else None
    held = first_phase_held(scenario) if args.cmd == "up" and args.hold_first_phase \
        else scenario
    return launcher_factory("netns")(held, n_hosts, state_dir=args.state_dir,
                                     allow_drop=args.allow_drop,
                                     payload_correction=not args.no_payload_correction), \
        scenario, link


TimelineLink = tuple[int, int, LinkSpec]  # src, dst and the link's spec, its schedule


def _timeline_link(args, scenario: NetworkScenario, n_hosts: int) -> TimelineLink:
    """The link --timeline streams over; ValueError when there is none to follow."""
    scheduled = scenario.scheduled_links(n_hosts)
    if args.link is not None:
        src, dst = args.link
        for link in scheduled:
            if link[:2] == (src, dst):
                return link
        raise ValueError(f"--link {src} {dst}: not a scheduled link of "
                         f"{args.scenario} on {n_hosts} hosts (scheduled: "
                         f"{', '.join(f'{a} {b}' for a, b, _ in scheduled) or 'none'})")
    if not scheduled:
        raise ValueError(f"--timeline: scenario {args.scenario} has no link with a schedule")
    return scheduled[0]


def _probe_timeline(args, hosts: Launcher, link: TimelineLink) -> tuple[list[str], str]:
    """--timeline: start the schedules, stream over `link`; (the lines that give each
    phase's rate against the schedule's, '' or why a phase failed its tolerance)."""
    from bench.launch.schedules import probe_timeline, schedule_windows

    src, dst, spec = link
    top = max((p.rate_mbit for p in spec.schedule.phases if p.rate_mbit is not None),
              default=spec.rate_mbit)
    hosts.start_schedule()
    try:
        reply = probe_timeline(hosts, src, dst, args.timeline, args.state_dir / "timeline-logs",
                               max_pacing_mbit=2 * max(top, spec.rate_mbit))
    finally:
        run = hosts.stop_schedule()
    rates = phase_rates(reply, run["started_unix"], schedule_windows(spec, args.timeline),
                        settle_s=args.settle_s)
    lines = [f"link {src} -> {dst}, {args.timeline:g} s of one TCP stream while the "
             f"schedule ran (first {args.settle_s:g} s of each phase left out):",
             f"{'phase':>5}  {'from s':>7}  {'to s':>7}  {'schedule':>9}  {'measured':>9}  "
             f"{'ratio':>6}"]
    for r in rates:
        want = r.rate_mbit_expected
        lines.append(f"{r.index:>5}  {r.start_s:>7.1f}  {r.end_s:>7.1f}  "
                     f"{'down' if want is None else f'{want:.2f}':>9}  "
                     f"{r.rate_mbit_achieved:>9.2f}  "
                     f"{'-' if not want else f'{r.rate_mbit_achieved / want:.3f}':>6}")
    lines.append("rates: TCP payload Mbit/s")
    try:
        check_phases(rates, args.tolerance)
    except PhaseRateError as e:
        return lines, str(e)
    return lines, ""


def _probe(args, launcher: Launcher, link: TimelineLink | None) -> int:
    timeline, off = [], ""
    with launcher as hosts:
        results = hosts.probe(check=False, duration_s=args.duration_s)
        if link is not None:
            timeline, off = _probe_timeline(args, hosts, link)
    record = hosts.record()  # after tear-down, so that it holds both timings
    print(f"scenario {args.scenario}: {hosts.n_hosts} hosts, shaping {record['shaping']}, "
          f"data plane {record['data_plane']}, payload correction "
          f"x{record['payload_correction_factor']:.4f}")
    print(format_table(results))
    warning = host_limited_warning(results)
    if warning:
        print(warning, file=sys.stderr)
    print(f"bring-up {record['timing']['up_s']:.2f} s, tear-down "
          f"{record['timing']['down_s']:.2f} s")
    for line in timeline:
        print(line)
    if off:
        print(off, file=sys.stderr)
    if args.json:
        atomic_write_text(args.json, json.dumps(record, indent=1))
    try:
        check_links(results, args.tolerance)
    except LinkProbeError as e:
        print(e, file=sys.stderr)
        return 1
    return 1 if off else 0


def calibrate(repeats: int, state_dir: Path, rates_mbit=(10, 100, 1000),
              delays_ms=(10, 50), out=sys.stdout) -> dict:
    """Measure what this machine's emulation delivers: payload rate / configured at each
    rate, one-way delay (median RTT / 2) at each delay, the delay mechanism's ceiling
    (unshaped link through it) and bring-up/tear-down time of 4 hosts. Each figure is
    measured `repeats` times in both directions of a 2-host topology."""
    netns = launcher_factory("netns")
    base = load_scenario("100mbps")
    table: dict[str, list[float]] = {}

    def run(scenario, key, value, n_hosts=2, duration_s=1.0):
        for _ in range(repeats):
            with netns(scenario, n_hosts, state_dir=state_dir) as hosts:
                results = hosts.probe(links=[(0, 1), (1, 0)], check=False,
                                      duration_s=duration_s)
            table.setdefault(key, []).extend(value(r) for r in results)
            print(f"{key}: {[round(v, 3) for v in table[key]]}", file=out, flush=True)

    for rate in rates_mbit:
        run(with_link(base, rate_mbit=rate), f"rate {rate} Mbit/s: achieved/configured",
            lambda r, rate=rate: r.rate_mbit_achieved / rate)
    for delay in delays_ms:
        run(with_link(base, delay_ms=float(delay)), f"delay {delay} ms: one-way ms",
            lambda r: r.rtt_ms / 2, duration_s=0.5)
    run(with_link(base, rate_mbit=None, delay_ms=1.0), "delay mechanism ceiling Mbit/s",
        lambda r: r.rate_mbit_achieved)
    for _ in range(repeats):
        with netns(load_scenario("wan"), 4, state_dir=state_dir) as hosts:
            pass
        for key in ("up_s", "down_s"):
            table.setdefault(f"4 hosts (wan): {key}", []).append(hosts.record()["timing"][key])
    print("\nsummary (median [min, max]):", file=out)
    for key, values in table.items():
        print(f"  {key:45s} {statistics.median(values):9.3f} [{min(values):.3f}, "
              f"{max(values):.3f}]", file=out)
    return table


def _calibrate(args) -> int:
    calibrate(args.repeats, args.state_dir)
    return 0


def _cleanup(args) -> int:
    if args.state:
        if not args.state.is_file():
            print(f"no state file {args.state}", file=sys.stderr)
            return 2
        files = [args.state]
    elif args.state_dir:
        files = recorded_state_files(args.state_dir)
    else:
        files = all_recorded_state_files()
    states = {}
    for f in files:
        try:
            states[f] = json.loads(f.read_text())
        except FileNotFoundError:
            continue  # its run finished and removed it since the listing
    live = [f for f, state in states.items() if run_is_live(state)]
    unfinished = []
    for f in states:  # one run's teardown that cannot finish does not stop the others'
        try:
            removed = cleanup([f])
        except StateFileError as err:
            print(err, file=sys.stderr)
            return 2
        except RuntimeError as err:  # a launcher's TeardownError: a host that does not answer
            print(f"not finished: {err}", file=sys.stderr)
            unfinished.append(f)
            continue
        for line in removed:
            print(f"removed {line}")
    for f in live:
        print(f"left alone {f}: its launcher (pid {states[f]['launcher_pid']}) is running")
    print(f"cleaned {len(states) - len(live) - len(unfinished)} recorded run(s) of killed "
          f"launchers" + (f"; {len(unfinished)} not finished (above)" if unfinished else ""))
    return 1 if unfinished else 0


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"a positive number of seconds, got {text!r}")
    return value


def _hosts(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"a number of hosts >= 1, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name in ("probe", "up"):
        p = sub.add_parser(name)
        p.add_argument("scenario", help="scenario name (scenarios/NAME.yaml) or YAML path")
        p.add_argument("--hosts", type=_hosts, default=None,
                       help="number of emulated hosts (default: the scenario's layout, "
                            "whose placement's links the probe measures)")
        p.add_argument("--allow-drop", action="store_true",
                       help="run even if this host cannot emulate delay, jitter or loss")
        p.add_argument("--no-payload-correction", action="store_true",
                       help="configure tc with the scenario's rate literally")
        p.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    sub.choices["up"].add_argument(
        "--hold-first-phase", action="store_true",
        help="hold each scheduled link at its first phase, no competing flows or stragglers "
             "(default: play the scenario, printing each change, until Ctrl-C)")
    probe = sub.choices["probe"]
    probe.add_argument("--tolerance", type=float, default=0.10,
                       help="largest accepted relative error of a link (default 0.10)")
    probe.add_argument("--duration-s", type=float, default=1.0,
                       help="base bulk transfer length per link at the configured rate; "
                            "longer where slow start or the token bucket needs it "
                            "(bench.net.probe.plan_probe)")
    probe.add_argument("--json", type=Path, help="also write the launcher record here")
    probe.add_argument("--timeline", type=_seconds, default=None, metavar="SECONDS",
                       help="then start the schedules and measure each phase's rate on one "
                            "scheduled link for SECONDS (module doc)")
    probe.add_argument("--link", type=int, nargs=2, metavar=("SRC", "DST"),
                       help="--timeline: the link (default the first scheduled one)")
    probe.add_argument("--settle-s", type=float, default=1.0,
                       help="--timeline: the start of each phase left out (default 1 s)")
    cal = sub.add_parser("calibrate")
    cal.add_argument("--repeats", type=int, default=3)
    cal.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    c = sub.add_parser("cleanup")
    which = c.add_mutually_exclusive_group(required=True)
    which.add_argument("--state", type=Path, help="one state file")
    which.add_argument("--all-recorded", action="store_true",
                       help="every state file of every state dir a launcher has used, or "
                            "of --state-dir only")
    c.add_argument("--state-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.cmd in ("probe", "up"):
        try:  # the scenario, the placement and the link, checked before bring-up
            launcher, scenario, link = _launcher(args)
        except (ValueError, OSError) as err:  # ScenarioError, PlacementError; a bad path
            print(f"error: {err}", file=sys.stderr)
            return 2
        if args.cmd == "up":
            return hold_or_play(launcher, scenario, hold=args.hold_first_phase)
        return _probe(args, launcher, link)
    commands = {"cleanup": _cleanup, "calibrate": _calibrate}
    return commands[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
