"""`python -m bench.launch up`, for real on network namespaces: the hosts it brings up
carry each phase of the schedule it plays (the suite's time-resolved probe, run in the
namespaces it names, between its own hosts only), the rate changes within a phase's
time of the schedule's, and Ctrl-C puts the links back and removes the namespaces; a
competing flow and a straggler start and stop, each printed; with --hold-first-phase the
link holds its first phase, and SIGTERM tears down too.

Needs root and `ip netns` (the `netns` mark; CI runs them as root, tests/conftest.py).
"""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bench.launch.process import REPO_ROOT, env_with_repo
from bench.launch.schedules import probe_timeline, schedule_windows
from bench.net.probe import PhaseWindow, check_phases, phase_rates
from bench.net.scenario import load_scenario

pytestmark = [pytest.mark.netns, pytest.mark.slow]


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class UpProcess:
    """`python -m bench.launch up ARGS...` in the background, its output read line by
    line; `spawn` and `addr` run a command in the namespaces it names (the launcher
    contract's two methods that bench.launch.schedules.probe_timeline calls)."""

    def __init__(self, *args: str):
        # Ctrl-C as a terminal gives it: a test run from a background job (nohup, `&`)
        # would otherwise pass on SIGINT ignored, and `up` would never see it
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.launch", "up", *args],
                                     cwd=REPO_ROOT, env=env_with_repo(), text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     preexec_fn=_sigint_default)
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.hosts: list[tuple[str, str]] = []  # (namespace, address) of host i

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def until(self, text: str, timeout_s: float = 90.0) -> str:
        """Read lines until one holds `text`; that line."""
        deadline = time.monotonic() + timeout_s
        while True:
            line = self._queue.get(timeout=max(0.1, deadline - time.monotonic()))
            if line is None:
                raise AssertionError(f"up exited before {text!r}: " + "\n".join(self.lines))
            self.lines.append(line)
            print(line)
            if line.startswith("host "):  # host 0: ip netns exec NS ...  (DEV, ADDR)
                self.hosts.append((line.split()[5], line.rsplit(", ", 1)[1].rstrip(")")))
            if text in line:
                return line

    def rest(self, timeout_s: float = 90.0) -> list[str]:
        """The remaining lines, once the process has exited."""
        self.proc.wait(timeout=timeout_s)
        while (line := self._queue.get(timeout=10)) is not None:
            self.lines.append(line)
            print(line)
        return self.lines

    def addr(self, i: int) -> str:
        return self.hosts[i][1]

    def spawn(self, i: int, argv: list[str], env=None, log_path=None) -> subprocess.Popen:
        with open(log_path, "ab") as log:
            return subprocess.Popen(["ip", "netns", "exec", self.hosts[i][0], *argv], env=env,
                                    stdout=log, stderr=log, start_new_session=True)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.terminate()  # `up` tears down on SIGTERM too: leave nothing up
                self.proc.wait(timeout=60)
                raise


def _assert_torn_down(up: UpProcess, returncode: int = 0) -> None:
    """`up` exited with `returncode` and none of its namespaces is left (at Ctrl-C it
    said it was tearing down)."""
    assert up.proc.returncode == returncode, up.lines
    assert returncode != 0 or "tearing down" in up.lines
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(ns in listed for ns, _ in up.hosts), listed


def _phase_table(rates) -> None:
    for r in rates:
        print(f"phase {r.index} {r.start_s:.1f}-{r.end_s:.1f} s: {r.rate_mbit_achieved:.2f} "
              f"Mbit/s (schedule {r.rate_mbit_expected}) over {r.measured_s:.1f} s")


def measure_up(scenario: str, stream_s: float, tmp_path: Path,
               settle_s: float = 1.0) -> tuple[list, list[str]]:
    """Bring `scenario` up with `up`, stream over link 0 -> 1 for `stream_s` seconds
    while it plays, Ctrl-C it; (each phase's rate, up's output). Asserts the teardown."""
    up = UpProcess(scenario, "--state-dir", str(tmp_path / "state"))
    try:
        started_unix = float(up.until("t = 0 at unix time").split()[-1])
        spec = load_scenario(scenario).link_spec(0, 1)
        top = max(p.rate_mbit or spec.rate_mbit for p in spec.schedule.phases)
        reply = probe_timeline(up, 0, 1, stream_s, tmp_path / "logs",
                               max_pacing_mbit=2 * top)
    finally:
        up.stop()
    lines = up.rest()
    _assert_torn_down(up)
    until_s = reply["t0_unix"] - started_unix + len(reply["bytes"]) * reply["bin_s"]
    rates = phase_rates(reply, started_unix, schedule_windows(spec, until_s), settle_s)
    _phase_table(rates)
    return rates, lines


@pytest.mark.timeout(240)
def test_up_plays_the_schedule_each_phase_at_its_rate(tmp_path):
    path = tmp_path / "two-phase.yaml"
    path.write_text("description: 50 then 20 Mbit/s, again\nlayout: {stages: 2}\n"
                    "link:\n  rate_mbit: 50\n  schedule:\n    loop: true\n    phases:\n"
                    "      - {duration_s: 6, rate_mbit: 50}\n"
                    "      - {duration_s: 6, rate_mbit: 20}\n")
    rates, lines = measure_up(str(path), 12.0, tmp_path)
    whole = [r for r in rates if r.measured_s >= 2.0]
    assert {r.index for r in whole} == {0, 1}, rates
    # `probe --timeline`'s default tolerance: 0.99-1.00 of each rate on a quiet machine,
    # 0.94 once at a load average of 7 on 2 cores
    check_phases(whole, tolerance=0.10)
    # each change within a phase's time of the schedule's (in fact well under a second)
    changes = [line for line in lines if "link 0 -> 1: phase" in line]
    assert "phase 0: 50 Mbit/s" in changes[0] and "phase 1: 20 Mbit/s" in changes[1]
    assert float(changes[1].split()[2]) - 6.0 < 0.5
    assert any("link 0 -> 1: back to its own values: 50 Mbit/s" in line for line in lines)


@pytest.mark.timeout(180)
def test_hold_first_phase_holds_it_and_sigterm_tears_down(tmp_path):
    path = tmp_path / "hold.yaml"
    path.write_text("description: 20 then 5 Mbit/s\nlayout: {stages: 2}\n"
                    "link:\n  rate_mbit: 50\n  schedule:\n    phases:\n"
                    "      - {duration_s: 2, rate_mbit: 20}\n"
                    "      - {duration_s: 2, rate_mbit: 5}\n")
    up = UpProcess(str(path), "--hold-first-phase", "--state-dir", str(tmp_path / "state"))
    try:
        up.until("state file ")
        reply = probe_timeline(up, 0, 1, 6.0, tmp_path / "logs", max_pacing_mbit=100)
        up.proc.send_signal(signal.SIGTERM)
        lines = up.rest()
    finally:
        up.stop()
    assert "holding link 0 -> 1 at its schedule's first phase: 20 Mbit/s" in lines
    assert not any(line.startswith("t = ") for line in lines)
    _assert_torn_down(up, 128 + signal.SIGTERM)
    rates = phase_rates(reply, reply["t0_unix"], [PhaseWindow(0, 0.0, 6.0, 20.0)])
    _phase_table(rates)
    check_phases(rates, tolerance=0.10)


@pytest.mark.timeout(180)
def test_up_plays_competing_flows_and_stragglers_printing_each(tmp_path):
    path = tmp_path / "mixed.yaml"
    path.write_text("description: a flow and a straggler\nlayout: {stages: 2}\n"
                    "link: {rate_mbit: 20}\n"
                    "competing: [{src: 0, dst: 1, start_s: 1, duration_s: 2}]\n"
                    "stragglers: [{host: 1, factor: 2, start_s: 1.5, duration_s: 1}]\n")
    up = UpProcess(str(path), "--state-dir", str(tmp_path / "state"))
    try:
        up.until("competing flow 0 (0 -> 1) stops", timeout_s=120)
    finally:
        up.stop()
    lines = up.rest()
    changes = [line.split(" s  ", 1)[1] for line in lines if line.startswith("t = ")
               and " s  " in line]
    assert changes == ["competing flow 0 (0 -> 1) starts",
                       "straggler 0: host 1 computes 2x slower",
                       "straggler 0: host 1 at full speed again",
                       "competing flow 0 (0 -> 1) stops"], lines
    _assert_torn_down(up)
