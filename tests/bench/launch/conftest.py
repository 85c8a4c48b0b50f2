"""Fixtures of the launcher tests: a process to identify, signal and clean up after; a
results folder whose recorded runs are torn down afterwards."""

import subprocess

import pytest

from bench.launch.state import cleanup, recorded_state_files


@pytest.fixture
def sleeper():
    """A process in its own session, stopped afterwards whatever the test did to it."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def results(tmp_path):
    """The sweep's directory; whatever a failing test left there is removed afterwards."""
    out = tmp_path / "results"
    yield out
    cleanup(recorded_state_files(out / ".launcher"))
