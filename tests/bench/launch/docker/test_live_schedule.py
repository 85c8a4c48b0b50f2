"""Links that change during a run under the Docker launcher: the core's schedule runner
applies each phase inside the containers (`docker exec tc class change ...`), and the
time-resolved probe reads each phase within 5%; a delay schedule on the containers'
delay lines is refused before any container exists.

Needs a Docker daemon and the worker image (the `docker_daemon` mark, tests/conftest.py).
"""

import pytest

from bench.launch.schedules import probe_timeline, schedule_windows
from bench.net.probe import check_phases, phase_rates
from bench.net.scenario import parse_scenario
from bench.net.tc import ShapingError

pytestmark = [pytest.mark.docker, pytest.mark.docker_daemon, pytest.mark.slow]


def _scenario(phases, **link):
    return parse_scenario({"description": "a link that changes", "layout": {"stages": 2},
                           "link": {"rate_mbit": 50, **link, "schedule": {"phases": phases}}},
                          "live-schedule")


@pytest.mark.timeout(240)
def test_two_phase_schedule_inside_containers_delivers_each_rate_within_5pct(tmp_path):
    from bench.launch.docker import DockerLauncher

    # 6 s phases: `docker exec` takes a second or two to start the stream
    scenario = _scenario([{"duration_s": 6, "rate_mbit": 50}, {"duration_s": 6, "rate_mbit": 20}])
    with DockerLauncher(scenario, 2, state_dir=tmp_path / ".launcher") as hosts:
        hosts.start_schedule()
        reply = probe_timeline(hosts, 0, 1, 12.0, tmp_path / "logs", max_pacing_mbit=100)
        run = hosts.stop_schedule()
    rates = phase_rates(reply, run["started_unix"], schedule_windows(scenario.link_spec(0, 1),
                                                                     12.0), settle_s=1.0)
    for r in rates:
        print(f"phase {r.index}: {r.rate_mbit_achieved:.2f} Mbit/s (schedule "
              f"{r.rate_mbit_expected:g}) over {r.measured_s:.1f} s")
    assert [r.index for r in rates] == [0, 1]
    check_phases(rates, tolerance=0.05)
    assert all(cmd.startswith("tc class change") for c in run["changes"]
               for cmd in c["commands"])


@pytest.mark.timeout(120)
def test_a_delay_schedule_on_the_containers_delay_lines_is_refused(tmp_path):
    from bench.launch.docker import DockerLauncher

    scenario = _scenario([{"duration_s": 5, "delay_ms": 30}], delay_ms=10)
    hosts = DockerLauncher(scenario, 2, state_dir=tmp_path / ".launcher")
    try:
        with hosts:
            pass
    except ShapingError as err:
        assert "delay line cannot change" in str(err)
    else:  # a kernel with netem changes the delay with tc instead
        assert hosts.record()["capabilities"]["netem"]
