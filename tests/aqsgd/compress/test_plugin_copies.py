"""A host's copies of plug-ins (aqsgd.compress.plugins.host_copies, copy_problems and
`python -m aqsgd.compress.plugins`): what the SSH and Docker launchers ask each host or
container before bring-up, and the refusal naming each plug-in a host lacks or has
another copy of."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from plugin_helpers import identify_file, write_plain_mode

from aqsgd.compress.plugins import Plugin, copy_problems, host_copies
from bench import REPO_ROOT


@pytest.fixture
def plugin_file(tmp_path):
    """A plug-in file and its identity; dropped from sys.modules after (host_copies
    imports it)."""
    path = write_plain_mode(tmp_path, "copytest_mode", rank=7.7)
    yield path, identify_file(path)
    sys.modules.pop("copytest_mode", None)


def test_a_hosts_copy_is_the_hash_a_worker_computes(plugin_file):
    path, here = plugin_file
    copies = host_copies([str(path)])
    assert copies == {str(path): {"sha256": here.sha256, "version": ""}}
    assert copy_problems([here], copies) == []


def test_a_missing_file_or_module_is_an_error_naming_it(tmp_path):
    gone, module = str(tmp_path / "gone_mode.py"), "no_such_plugin_module_here"
    copies = host_copies([gone, module])
    assert f"plug-in file {gone} does not exist on this host" in copies[gone]["error"]
    assert f"plug-in module {module!r} cannot be imported" in copies[module]["error"]
    wanted = [Plugin("gone_mode", gone, "", "0" * 16), Plugin(module, module, "1.0", "1" * 16)]
    problems = copy_problems(wanted, copies)
    assert problems[0].startswith("plug-in gone_mode: plug-in file ")
    assert problems[1].startswith(f"plug-in {module}: plug-in module ")


def test_another_copy_is_refused_with_both_hashes(plugin_file):
    path, here = plugin_file
    planned = Plugin(here.module, here.source, here.version, "f" * 16)
    (problem,) = copy_problems([planned], host_copies([str(path)]))
    assert problem == (f"plug-in copytest_mode: another copy of {path} (sha256 "
                       f"{here.sha256}, here {'f' * 16}); give every host the same source")
    # a source the host was never asked about is named too, not taken as present
    assert copy_problems([planned], {}) == [
        f"plug-in copytest_mode: {path} was not looked for"]


@pytest.mark.slow
def test_the_command_line_prints_each_sources_copy_as_json(plugin_file, tmp_path):
    path, here = plugin_file
    done = subprocess.run([sys.executable, "-m", "aqsgd.compress.plugins", str(path),
                           str(tmp_path / "gone.py")], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": str(REPO_ROOT),
                                                       "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    copies = json.loads(done.stdout)
    assert copies[str(path)] == {"sha256": here.sha256, "version": ""}
    assert "does not exist on this host" in copies[str(tmp_path / "gone.py")]["error"]
