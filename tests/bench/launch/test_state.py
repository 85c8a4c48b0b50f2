"""State files without namespaces (bench.launch.state): live and killed runs, the registry
of state dirs, and what cleanup kills and keeps (ip/tc commands only recorded)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from launch_helpers import exited

from bench.launch.process import ProcessIdentity
from bench.launch.state import (
    StateFileError,
    cleanup,
    launcher_fields,
    register_state_dir,
    registered_state_dirs,
    remove_killed_runs,
    run_is_live,
)
from bench.net.executor import RecordingExecutor


def _exited_identity() -> ProcessIdentity:
    """The identity of a process that has exited (and been reaped)."""
    proc = subprocess.Popen(["sleep", "60"])
    ident = ProcessIdentity.of(proc.pid)
    proc.kill()
    proc.wait()
    return ident


def _state(path: Path, launcher_process: ProcessIdentity | None, **names) -> Path:
    state = {"launcher": "netns", "prefix": path.stem, "run_id": "t",
             "namespaces": [], "devices": [], "processes": [], "cgroups": [], **names}
    if launcher_process is not None:
        state |= {"launcher_pid": launcher_process.pid,
                  "launcher_process": launcher_process.to_dict()}
    path.write_text(json.dumps(state))
    return path


def test_a_run_is_live_while_its_launcher_runs(sleeper):
    assert run_is_live(launcher_fields("netns", "r", "aqabcde"))
    assert run_is_live({"launcher_process": ProcessIdentity.of(sleeper.pid).to_dict()})
    assert not run_is_live({"launcher_process": _exited_identity().to_dict()})
    # a file with the pid only: live while that pid exists, never removed by guess
    assert run_is_live({"launcher_pid": sleeper.pid})
    assert not run_is_live({})


def test_registry_names_each_state_dir_once_and_drops_deleted_ones(tmp_path):
    registry, a, b = tmp_path / "registry", tmp_path / "a" / ".launcher", tmp_path / "b"
    register_state_dir(a, registry)
    register_state_dir(a, registry)
    register_state_dir(b, registry)
    assert a.is_dir() and len(list(registry.iterdir())) == 2
    assert set(registered_state_dirs(registry)) == {a.resolve(), b.resolve()}
    b.rmdir()
    assert registered_state_dirs(registry) == [a.resolve()]
    assert len(list(registry.iterdir())) == 1


def test_cleanup_removes_a_killed_run_and_keeps_a_live_one(tmp_path, sleeper):
    worker = ProcessIdentity.of(sleeper.pid)
    killed = _state(tmp_path / "aqdead1.json", _exited_identity(),
                    processes=[worker.to_dict()], namespaces=["aqdead1-h0"])
    (tmp_path / "aqdead1-delayline.json").write_text("{}")
    live = _state(tmp_path / "aqlive1.json", ProcessIdentity.of(os.getpid()),
                  processes=[worker.to_dict()])
    ex = RecordingExecutor()
    assert cleanup([live], ex) == [] and live.exists() and not exited(sleeper, 0.3)
    assert cleanup([killed], ex) == [f"process {sleeper.pid}"]
    assert exited(sleeper)
    assert not killed.exists() and not (tmp_path / "aqdead1-delayline.json").exists()
    assert ("ip", "netns", "list") in ex.history  # names are looked up, never guessed


def test_a_launcher_removes_only_killed_runs_of_its_own_kind(tmp_path, monkeypatch):
    netns = _state(tmp_path / "aqnet01.json", _exited_identity())
    docker = _state(tmp_path / "aqd0001.json", _exited_identity(), launcher="docker")
    monkeypatch.setattr("bench.launch.docker.state.teardown_docker",
                        lambda state: pytest.fail("a netns launcher touched a Docker run"))
    assert remove_killed_runs(tmp_path, "netns", RecordingExecutor()) == []
    assert not netns.exists() and docker.exists()


def test_cleanup_of_a_file_that_vanished_is_a_no_op(tmp_path):
    ex = RecordingExecutor()
    assert cleanup([tmp_path / "aqgone1.json"], ex) == [] and ex.history == []


def test_a_state_file_naming_an_unknown_launcher_is_refused_naming_file_and_value(
        tmp_path, sleeper):
    worker = ProcessIdentity.of(sleeper.pid)
    odd = _state(tmp_path / "aqodd01.json", _exited_identity(), launcher="kubernetes",
                 processes=[worker.to_dict()])
    ex = RecordingExecutor()
    with pytest.raises(StateFileError, match=re.escape(f"{odd}: launcher: expected one of "
                                                       f"docker, local, netns, ssh, got "
                                                       f"'kubernetes'")):
        cleanup([odd], ex)
    # refused before anything was touched
    assert odd.exists() and not exited(sleeper, 0.3) and ex.history == []
    unnamed = _state(tmp_path / "aqodd02.json", _exited_identity())
    state = json.loads(unnamed.read_text())
    del state["launcher"]
    unnamed.write_text(json.dumps(state))
    with pytest.raises(StateFileError, match="launcher: expected one of .*, got None"):
        cleanup([unnamed], ex)
