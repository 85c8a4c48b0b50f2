"""Fixtures of the launcher tests: a process to identify, signal and clean up after."""

import subprocess

import pytest


@pytest.fixture
def sleeper():
    """A process in its own session, stopped afterwards whatever the test did to it."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()
