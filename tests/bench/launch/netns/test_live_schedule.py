"""Links that change during a run, for real on network namespaces: a two-phase schedule
delivers each phase's rate within 5% (the time-resolved probe), an outage carries nothing
and the stream resumes after it, a delay change reaches the delay line, and the run
record keeps the schedule and when each change was applied.

Needs root and `ip netns` (the `netns` mark; CI runs them as root, tests/conftest.py).
"""

import math
import time

import pytest

from bench.launch.netns import NetnsLauncher
from bench.launch.schedules import probe_timeline, schedule_windows
from bench.net.probe import check_phases, phase_rates, resume_s
from bench.net.scenario import parse_scenario

pytestmark = [pytest.mark.netns, pytest.mark.slow]


def _scenario(phases: list[dict], rate_mbit: float = 50.0, **link) -> object:
    return parse_scenario({"description": "a link that changes", "layout": {"stages": 2},
                           "link": {"rate_mbit": rate_mbit, **link,
                                    "schedule": {"phases": phases}}}, "live-schedule")


def _print_rates(rates) -> None:
    for r in rates:
        expected = "down" if r.rate_mbit_expected is None else f"{r.rate_mbit_expected:g}"
        print(f"phase {r.index} {r.start_s:g}-{r.end_s:g} s: {r.rate_mbit_achieved:.2f} "
              f"Mbit/s (schedule {expected}) over {r.measured_s:.1f} s")


@pytest.mark.timeout(120)
def test_two_phase_schedule_delivers_each_rate_within_5pct(tmp_path):
    scenario = _scenario([{"duration_s": 5, "rate_mbit": 50}, {"duration_s": 5, "rate_mbit": 20}])
    with NetnsLauncher(scenario, 2, state_dir=tmp_path / "state") as hosts:
        hosts.start_schedule()
        reply = probe_timeline(hosts, 0, 1, 10.0, tmp_path / "logs", max_pacing_mbit=100)
        run = hosts.stop_schedule()
        record = hosts.record()
        factor = hosts.shaping.factor
    spec = scenario.link_spec(0, 1)
    rates = phase_rates(reply, run["started_unix"], schedule_windows(spec, 10.0), settle_s=1.0)
    _print_rates(rates)
    assert [r.index for r in rates] == [0, 1]
    check_phases(rates, tolerance=0.05)
    # the record: both links' schedules, every change with its planned and applied time,
    # and the links put back at the end (phase -1)
    sched = record["schedule"]
    assert [(link["src"], link["dst"]) for link in sched["links"]] == [(0, 1), (1, 0)]
    changes = sched["run"]["changes"]
    assert [(c["src"], c["dst"], c["phase"]) for c in changes] == \
        [(0, 1, 0), (1, 0, 0), (0, 1, 1), (1, 0, 1), (0, 1, -1), (1, 0, -1)]
    for c in changes:
        assert "error" not in c
        assert any("class change" in cmd for cmd in c["commands"])
    for c in changes[:4]:
        assert 0 <= c["applied_s"] - c["t_s"] < 0.5, c
    assert f"rate {math.ceil(20e6 * factor)}bit" in changes[2]["commands"][0]
    assert f"rate {math.ceil(50e6 * factor)}bit" in changes[4]["commands"][0]


@pytest.mark.timeout(120)
def test_delay_change_reaches_the_delay_line(tmp_path):
    scenario = _scenario([{"duration_s": 60, "delay_ms": 25}], delay_ms=5)
    with NetnsLauncher(scenario, 2, state_dir=tmp_path / "state") as hosts:
        before = hosts.probe(check=False)[0]
        hosts.start_schedule()
        time.sleep(0.5)
        during = hosts.probe(check=False)[0]
        run = hosts.stop_schedule()
        after = hosts.probe(check=False)[0]
    print(f"round trip: {before.rtt_ms:.1f} ms, in the 25 ms phase {during.rtt_ms:.1f} ms, "
          f"after {after.rtt_ms:.1f} ms")
    assert 9 < before.rtt_ms < 17 and 9 < after.rtt_ms < 17
    assert 49 < during.rtt_ms < 56
    assert any(cmd.startswith("delay line: link 0 -> 1 delay_ms=25")
               for c in run["changes"] for cmd in c["commands"])


@pytest.mark.timeout(120)
def test_outage_carries_nothing_and_the_stream_resumes(tmp_path):
    scenario = _scenario([{"duration_s": 3, "rate_mbit": 20}, {"duration_s": 2, "down": True},
                          {"duration_s": 5, "rate_mbit": 20}], rate_mbit=20)
    with NetnsLauncher(scenario, 2, state_dir=tmp_path / "state") as hosts:
        hosts.start_schedule()
        reply = probe_timeline(hosts, 0, 1, 10.0, tmp_path / "logs", max_pacing_mbit=40)
        run = hosts.stop_schedule()
    spec = scenario.link_spec(0, 1)
    windows = schedule_windows(spec, 10.0)
    rates = phase_rates(reply, run["started_unix"], windows, settle_s=0.2)
    _print_rates(rates)
    down = rates[1]
    assert down.rate_mbit_expected is None and down.rate_mbit_achieved < 0.01 * 20
    resumed = resume_s(reply, run["started_unix"], up_at_s=5.0, min_bytes=10_000)
    print(f"the stream resumed {resumed} s after the link came back")
    # TCP retransmits with doubling timeouts: after a 2 s outage within about 2 s more
    assert resumed is not None and resumed < 3.0
    downs = [c for c in run["changes"] if c["phase"] == 1]
    assert downs and all(any("blackhole" in cmd for cmd in c["commands"]) for c in downs)


@pytest.mark.timeout(120)
def test_the_probe_command_measures_each_phase_of_a_scenario_file(tmp_path, capsys):
    from bench.launch import __main__ as launch_main

    path = tmp_path / "two-phase.yaml"
    path.write_text("description: 50 then 20 Mbit/s\nlayout: {stages: 2}\n"
                    "link:\n  rate_mbit: 50\n  schedule:\n    phases:\n"
                    "      - {duration_s: 5, rate_mbit: 50}\n"
                    "      - {duration_s: 5, rate_mbit: 20}\n")
    code = launch_main.main(["probe", str(path), "--timeline", "10", "--tolerance", "0.05",
                             "--state-dir", str(tmp_path / "state")])
    out = capsys.readouterr().out
    print(out)
    assert code == 0
    rows = [line.split() for line in out.splitlines()
            if line.split()[:1] in (["0"], ["1"]) and len(line.split()) == 6]
    assert [(r[0], r[3]) for r in rows] == [("0", "50.00"), ("1", "20.00")]
    for r in rows:
        assert abs(float(r[5]) - 1) <= 0.05, r
