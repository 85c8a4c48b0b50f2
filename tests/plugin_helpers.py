"""Plug-in files for the tests of the host checks (docs/plugins.md): a minimal activation
mode (it codes nothing) under a name of the test's own, so that tests running side by
side never share a module name.

    path = write_plain_mode(tmp_path, "sshtest_mode", rank=7.9)   # .../sshtest_mode.py
    plugin = identify_file(path)          # its Plugin, as a worker computes it
"""

from __future__ import annotations

import sys
from pathlib import Path

from aqsgd.compress.plugins import Plugin, identify, import_source

MODE = '''
from aqsgd.compress.modes.base import ActivationMode

class Plain(ActivationMode):
    name, rank, wire_format = "{stem}", {rank}, None
    bench_cases, smoke_case = (("fp32", 1),), ("fp32", 1)

MODE = Plain
'''


def write_plain_mode(folder: Path, stem: str, rank: float) -> Path:
    """FOLDER/STEM.py declaring a mode named STEM of that rank; its path."""
    path = folder / f"{stem}.py"
    path.write_text(MODE.format(stem=stem, rank=rank))
    return path


def identify_file(path: Path) -> Plugin:
    """The identity of the plug-in file `path`, imported and then dropped from sys.modules
    (nothing is registered)."""
    try:
        return identify(*import_source(str(path)))
    finally:
        sys.modules.pop(path.stem, None)
