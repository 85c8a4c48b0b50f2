"""Plug-in files for the tests of the host checks (docs/plugins.md): a minimal activation
mode (it codes nothing) under a name of the test's own, so that tests running side by
side never share a module name.

    path = write_plain_mode(tmp_path, "sshtest_mode", rank=7.9)   # .../sshtest_mode.py
    plugin = identify_file(path)          # its Plugin, as a worker computes it
    text = sign_mode("sign")              # a coding mode's source (int8 signs), a comparison
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


SIGN_MODE = '''
import torch
from aqsgd.compress.modes.base import ActivationMode, Comparison

class Sign(ActivationMode):
    name, rank, wire_format = "{name}", 7.5, {fmt}
    codes_gradients = True
    bench_cases, smoke_case = (("fp32", 1),), ("fp32", 1)

    @classmethod
    def coded_spec(cls, cfg, q_shape):
        return [(tuple(q_shape), torch.int8)]

    def encode(self, rows, generator, m=None):
        return [torch.sign(rows).to(torch.int8)]

    def decode(self, coded, q_shape, m=None):
        return coded[0].float(){defect}

MODE = Sign
COMPARISONS = (Comparison("{name}", rank=7.5, forward="{name}", backward="{name}"),)
'''


def sign_mode(name: str, fmt: int = 70, defect: str = "") -> str:
    """The source of a plug-in whose mode and comparison are named `name` (it sends the
    signs as int8), on wire format `fmt`; `defect` is appended to decode's return value
    (e.g. '.reshape(q_shape[0], -1)': the wrong shape)."""
    return SIGN_MODE.format(name=name, fmt=fmt, defect=defect)


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
