"""The commands that read result files need no plug-in (docs/plugins.md): in a fresh
process where no plug-in is loaded nor installed, `bench report` and `bench compare` of
folders holding a plug-in's cells show their rows, and compare judges them, without
importing the plug-in. (`bench validate`, which rebuilds each cell's run config, loads
the recorded source: tests/bench/harness/test_plugins.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from report_fixtures import write_fixture_cell

from bench import REPO_ROOT

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent("""
    import sys
    from bench.__main__ import main
    codes = [main(["report", sys.argv[1]]),
             main(["compare", sys.argv[1], sys.argv[2], "--threshold", "10"])]
    from aqsgd.compress import registry
    print("codes", codes, "plugins", dict(registry.PLUGINS),
          "imported", "randproj" in sys.modules)
""")


def test_report_and_compare_show_a_plugins_cells_without_loading_it(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for root, step_time_s in ((a, 0.2), (b, 0.3)):  # B's plug-in cell 1.5x slower
        write_fixture_cell(root, mode="fp32", spec_key="k-fp32")
        write_fixture_cell(root, mode="randproj", fw=4, bw=8, spec_key="k-randproj",
                           step_time_s=step_time_s)
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(a), str(b)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin",
                               "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "codes [0, 1] plugins {} imported False"
    assert "randproj" in (a / "report.md").read_text()
    rows = json.loads((a / "summary.json").read_text())
    assert sorted(r["mode"] for r in rows) == ["fp32", "randproj"]
    assert "100mbps__randproj-fw4-bw8__s0" in done.stdout  # compare names the cell
    assert "regressed" in done.stdout
