"""`make help` lists every target of the Makefile with a one-line description."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _targets() -> list[str]:
    text = (REPO / "Makefile").read_text()
    return re.findall(r"^([a-z][a-z-]*):", text, flags=re.MULTILINE)


@pytest.mark.skipif(shutil.which("make") is None, reason="make not installed")
def test_help_describes_every_target():
    out = subprocess.run(["make", "-s", "help"], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout
    described = {}
    for line in out.splitlines():
        name, _, text = line.strip().partition(" ")
        described[name] = text.strip()
    targets = _targets()
    assert len(targets) > 10
    missing = [t for t in targets if not described.get(t)]
    assert not missing, f"targets without a help line: {missing}"
