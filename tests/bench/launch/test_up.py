"""`python -m bench.launch up`, pure: it plays a scenario's schedule on the schedule
runner (printing each change as it is applied, the links put back at Ctrl-C), stops at a
change that failed (exit 1), or with --hold-first-phase holds each link at its first
phase and says so; a first phase that is an outage is refused before bring-up."""

from __future__ import annotations

import _thread
import io
import signal
import threading

import pytest
from launch_helpers import FakeLauncher

from bench.launch import __main__ as launch_main
from bench.launch.up import change_line, first_phase_held, hold_or_play, plan_lines
from bench.net.scenario import load_scenario, parse_scenario


def _scenario(phases, loop=False, **extra):
    return parse_scenario({"description": "x", "layout": {"stages": 2},
                           "link": {"rate_mbit": 50, "schedule": {"loop": loop,
                                                                  "phases": phases}},
                           **extra}, "x")


class FakeHosts(FakeLauncher):
    """FakeLauncher as `up` holds it: a context manager with a state file and a record."""

    def __init__(self, scenario, fail_on: str | None = None):
        super().__init__(scenario, fail_on)
        self.state_path = "/state/fake.json"
        self.up = False

    def __enter__(self):
        self.up = True
        return self

    def __exit__(self, *exc):
        self.up = False

    def record(self):
        return {"hosts": [{"host": i, "netns": f"ns{i}", "device": "eth0",
                           "addr": f"10.0.0.{i + 1}"} for i in range(2)],
                "schedule": self.schedule_record()}


@pytest.fixture(autouse=True)
def python_sigint():
    """Ctrl-C as Python's KeyboardInterrupt: interrupt_main does nothing where SIGINT is
    ignored, as it is in a pytest-xdist worker."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def _ctrl_c_after(seconds: float) -> threading.Timer:
    timer = threading.Timer(seconds, _thread.interrupt_main)
    timer.start()
    return timer


def test_up_plays_the_schedule_printing_each_change_and_puts_the_links_back_at_ctrl_c():
    scenario = _scenario([{"duration_s": 0.2, "rate_mbit": 20},
                          {"duration_s": 0.2, "down": True},
                          {"duration_s": 5, "rate_mbit": 30, "delay_ms": 5}])
    hosts, out = FakeHosts(scenario), io.StringIO()
    timer = _ctrl_c_after(0.8)
    assert hold_or_play(hosts, scenario, out=out) == 0
    timer.join()
    lines = out.getvalue().splitlines()
    assert lines[:2] == ["host 0: ip netns exec ns0 ...  (eth0, 10.0.0.1)",
                         "host 1: ip netns exec ns1 ...  (eth0, 10.0.0.2)"]
    assert lines[2].startswith("playing the scenario: 2 scheduled link(s), 0 competing "
                               "flow(s), 0 straggler(s); the last change at 0.4 s")
    assert lines[3] == "state file /state/fake.json; Ctrl-C to tear down"
    changes = [line.split(" s  ", 1)[1] for line in lines if line.startswith("t = ")
               and " s  " in line]
    assert changes == ["link 0 -> 1: phase 0: 20 Mbit/s", "link 1 -> 0: phase 0: 20 Mbit/s",
                       "link 0 -> 1: phase 1: down (an outage)",
                       "link 1 -> 0: phase 1: down (an outage)",
                       "link 0 -> 1: phase 2: 30 Mbit/s, delay 5 ms",
                       "link 1 -> 0: phase 2: 30 Mbit/s, delay 5 ms",
                       "link 0 -> 1: back to its own values: 50 Mbit/s",
                       "link 1 -> 0: back to its own values: 50 Mbit/s"]
    assert any(line.startswith("t = 0 at unix time ") for line in lines)
    assert "tearing down" in lines and not hosts.up
    assert hosts.schedule_record()["run"]["stopped_unix"] is not None
    assert any("blackhole" in " ".join(argv) for _, argv in hosts.ran)


def test_a_change_that_fails_stops_up_with_exit_1_naming_it(capsys):
    scenario = _scenario([{"duration_s": 0.1}, {"duration_s": 0.1, "down": True},
                          {"duration_s": 1}])
    hosts, out = FakeHosts(scenario, fail_on="blackhole"), io.StringIO()
    assert hold_or_play(hosts, scenario, out=out) == 1  # no Ctrl-C needed
    assert "link 0 -> 1: phase 1: down (an outage)  FAILED: link 0 -> 1, phase 1 at 0.1 s: " \
        "CommandError" in out.getvalue()
    err = capsys.readouterr().err
    assert err.startswith("error: the schedule stopped at a change that failed: link 0 -> 1")
    assert not hosts.up


def test_hold_first_phase_plays_nothing_and_says_what_it_holds():
    scenario = _scenario([{"duration_s": 0.1, "rate_mbit": 20, "delay_ms": 3},
                          {"duration_s": 0.1, "rate_mbit": 5}])
    held = first_phase_held(scenario)
    assert held.link_spec(0, 1).rate_mbit == 20 and held.link_spec(0, 1).delay_ms == 3
    assert held.scheduled_links(2) == [] and not held.changes_during_run(2)
    hosts, out = FakeHosts(held), io.StringIO()
    timer = _ctrl_c_after(0.4)
    assert hold_or_play(hosts, scenario, hold=True, out=out) == 0
    timer.join()
    text = out.getvalue()
    assert "holding link 0 -> 1 at its schedule's first phase: 20 Mbit/s, delay 3 ms" in text
    assert "held, not played: the schedules, 0 competing flow(s), 0 straggler(s) (without " \
        "--hold-first-phase, up plays them)" in text
    assert "t = " not in text and hosts.ran == []


def test_first_phase_held_drops_flows_and_stragglers_and_refuses_an_outage_first():
    scenario = _scenario([{"duration_s": 1, "rate_mbit": 20}],
                         competing=[{"src": 0, "dst": 1, "start_s": 0, "duration_s": 1}],
                         stragglers=[{"host": 1, "factor": 2, "start_s": 0, "duration_s": 1}])
    held = first_phase_held(scenario)
    assert held.competing == () and held.stragglers == ()
    with pytest.raises(ValueError, match="--hold-first-phase: the scenario's link's first "
                                         "phase is an outage"):
        first_phase_held(_scenario([{"duration_s": 1, "down": True}, {"duration_s": 1}]))


def test_plan_lines_say_whether_the_schedule_loops():
    halving = load_scenario("dynamic-halving")
    assert "looping (laps of 80 s)" in plan_lines(halving, 2)[0]
    assert plan_lines(load_scenario("100mbps"), 2) == \
        ["no schedule, competing flow or straggler: the links hold still"]


def test_change_lines_of_flows_stragglers_and_counters():
    scenario = _scenario([{"duration_s": 1}],
                         competing=[{"src": 1, "dst": 0, "start_s": 0, "duration_s": 1}])
    assert change_line({"kind": "counter", "applied_s": 0.0}, scenario) is None
    assert change_line({"kind": "flow_start", "flow": 0, "applied_s": 1.25}, scenario) == \
        "t =     1.25 s  competing flow 0 (1 -> 0) starts"
    assert change_line({"kind": "cpu", "host": 1, "factor": 2.0, "straggler": 0,
                        "applied_s": 3.0}, scenario).endswith(
        "straggler 0: host 1 computes 2x slower")
    assert change_line({"kind": "cpu", "host": 1, "factor": None, "straggler": 0,
                        "applied_s": 4.0}, scenario).endswith("host 1 at full speed again")


def test_main_builds_the_launcher_of_the_held_scenario(monkeypatch):
    built = {}

    def factory(name):
        def make(scenario, n_hosts, **kwargs):
            built["scenario"] = scenario
            return FakeHosts(scenario)
        return make

    monkeypatch.setattr(launch_main, "launcher_factory", factory)
    timer = _ctrl_c_after(0.3)
    assert launch_main.main(["up", "dynamic-halving", "--hold-first-phase"]) == 0
    timer.join()
    assert built["scenario"].scheduled_links(2) == []
    assert built["scenario"].link_spec(0, 1).rate_mbit == 100


def test_hold_first_phase_of_an_outage_exits_2_before_bring_up(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(launch_main, "launcher_factory",
                        lambda name: pytest.fail("refused before a launcher is built"))
    path = tmp_path / "down-first.yaml"
    path.write_text("description: down first\nlayout: {stages: 2}\nlink:\n  rate_mbit: 50\n"
                    "  schedule:\n    phases:\n      - {duration_s: 1, down: true}\n"
                    "      - {duration_s: 1}\n")
    assert launch_main.main(["up", str(path), "--hold-first-phase"]) == 2
    assert capsys.readouterr().err.startswith("error: --hold-first-phase: the scenario's link")
