"""tools/import_cycles.py, the check `make lint` runs: it finds every import circle (a
strongly connected component of the import graph) and none in this checkout."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tools" / "import_cycles.py"


def _tool():
    spec = importlib.util.spec_from_file_location("import_cycles", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_circles_are_the_components_with_a_round_trip():
    tool = _tool()
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": {"f"},
             "g": {"a", "outside"}}
    assert tool.find_circles(edges) == [["a", "b", "c"], ["d", "e"], ["f"]]
    assert tool.round_trip(edges, ["c", "a", "b"]) == ["a", "b", "c", "a"]
    assert tool.round_trip(edges, ["f"]) == ["f", "f"]
    assert tool.find_circles({"a": {"b"}, "b": set()}) == []


def test_this_checkout_has_no_import_circle():
    done = subprocess.run([sys.executable, str(SCRIPT), "aqsgd", "bench", "specfile"],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith(": 0 import circle(s)")
