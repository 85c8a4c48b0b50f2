"""The run watchdog (bench.launch.watchdog): a run that ends on its own lets it go having
touched nothing; a harness killed with SIGKILL leaves, with no cleanup command, no
process of its run after 10 s and nothing it built after 30 s (a launcher with `sleep`
ranks; a real `python -m bench run` cell on the local and the netns launcher), and each
rank log says that the harness is gone; a teardown that fails leaves the state file
under its own name, for `make net-cleanup`. SSH: ssh/test_ssh_watchdog.py; Docker:
docker/test_watchdog.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from kill_helpers import (
    REPO,
    WATCHDOG,
    WORKERS_S,
    check_kill,
    cmdline,
    naming,
    seconds_until,
    sigkill,
    start_harness,
    state_files,
    training,
    wait_for,
    watchdogs,
)
from launch_helpers import alive, leftovers

from bench.launch.process import ProcessIdentity
from bench.launch.watchdog import Watchdog

IMPORT_S = 120.0  # torch imported on a 2-core machine that other test runs load
WAIT_S = 150.0  # bring-up, probe and two workers importing torch on a loaded 2-core host
# the driver: a local launcher whose 2 ranks sleep, killed once they run
SLEEPERS = """\
import sys, time
from pathlib import Path
from bench.launch.local import LocalLauncher
out = Path(sys.argv[1])
with LocalLauncher(n_hosts=2, state_dir=out / ".launcher", warn=None) as hosts:
    for i in range(2):
        hosts.spawn(i, ["sleep", "600"], None, out / f"rank{i}.log")
    print("ready", flush=True)
    time.sleep(600)
"""


def _harness_gone_line(pid: int) -> str:
    return f"the harness (pid {pid}) is gone"


def test_a_run_that_ends_on_its_own_lets_its_watchdog_go_untouched(tmp_path):
    log = tmp_path / "rank0.log"
    log.write_text("")
    dog = Watchdog.start(tmp_path / "state")
    dog.note_log(log)
    assert alive(dog.proc.pid) and WATCHDOG in cmdline(dog.proc.pid)
    dog.stop()
    assert dog.proc.returncode == 0
    assert log.read_text() == ""


@pytest.mark.slow
def test_a_killed_harness_leaves_no_rank_and_no_state_file(tmp_path):
    out = tmp_path / "results"
    harness = subprocess.Popen([sys.executable, "-c", SLEEPERS, str(out)], cwd=REPO,
                               stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert harness.stdout.readline() == b"ready\n"
        ranks = [p["pid"] for s in state_files(out) for p in s["processes"]]
        assert len(ranks) == 2 and all(alive(p) for p in ranks)
    finally:
        killed_at = sigkill(harness)
    ranks_s = seconds_until(lambda: [p for p in ranks if alive(p)], killed_at, WORKERS_S)
    # the teardown's imports (torch) began with the first rank, moments before the kill:
    # on a loaded machine they alone can take longer than BUILT_S (a real cell's
    # bring-up gives them that time: the tests below)
    all_s = seconds_until(lambda: naming(str(out)) + list((out / ".launcher").iterdir()),
                          killed_at, IMPORT_S)
    for i in range(2):
        assert _harness_gone_line(harness.pid) in (out / f"rank{i}.log").read_text()
    print(f"\nsleeping ranks gone {ranks_s:.1f} s after the kill, the state file "
          f"and the watchdog {all_s:.1f} s")


# the driver: a harness whose state file names a launcher no teardown knows
UNKNOWN_LAUNCHER = """\
import json, sys, time
from pathlib import Path
from bench.launch.state import launcher_fields
from bench.launch.watchdog import Watchdog
state_dir = Path(sys.argv[1])
state_dir.mkdir(parents=True)
dog = Watchdog.start(state_dir)
dog.note_log(state_dir.parent / "rank0.log")
(state_dir / "aqbad00.json").write_text(json.dumps(launcher_fields("bogus", "r", "aqbad00")))
print("ready", flush=True)
time.sleep(600)
"""


@pytest.mark.slow
def test_a_teardown_that_fails_gives_the_state_file_back_for_net_cleanup(tmp_path):
    harness = subprocess.Popen([sys.executable, "-c", UNKNOWN_LAUNCHER, str(tmp_path / "s")],
                               cwd=REPO, stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert harness.stdout.readline() == b"ready\n"
        (dog,) = watchdogs(tmp_path / "s")
    finally:
        killed_at = sigkill(harness)
    seconds_until(lambda: [dog] if alive(dog) else [], killed_at, IMPORT_S)
    assert [f.name for f in (tmp_path / "s").iterdir()] == ["aqbad00.json"]
    log = (tmp_path / "rank0.log").read_text()
    assert _harness_gone_line(harness.pid) in log
    assert "teardown of " in log and "aqbad00.json failed (StateFileError" in log
    assert "the file stays for `make net-cleanup`" in log


def _kill_mid_cell(out: Path, log: Path, launcher: str) -> None:
    """Kill -9 the harness of a training cell; check_kill's bounds and times."""
    harness = start_harness(out, log, launcher)
    try:
        state = wait_for("two training workers", lambda: training(out), harness, log, WAIT_S)
    finally:
        killed_at = sigkill(harness)

    def processes() -> list:
        recorded = [p["pid"] for p in state["processes"]
                    if ProcessIdentity.from_dict(p).is_running()]
        return recorded + [p for p in naming(str(out)) if WATCHDOG not in cmdline(p)]

    check_kill(launcher, harness, killed_at, out, processes,
               lambda: leftovers(state["prefix"]) + naming(str(out))
               + list((out / ".launcher").iterdir()))


@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(400)
def test_a_harness_killed_mid_cell_on_local_leaves_nothing(results, tmp_path):
    _kill_mid_cell(results, tmp_path / "harness.log", "local")


@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.netns
@pytest.mark.timeout(400)
def test_a_harness_killed_mid_cell_on_netns_leaves_nothing(results, tmp_path):
    _kill_mid_cell(results, tmp_path / "harness.log", "netns")
