"""The probe's wire side (bench.net.probe.wire): the client's arguments are the measure
command line, and the probe command starts on the standard library alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.net.probe import main, plan_probe


def test_client_args_are_the_measure_command_line(monkeypatch):
    p = plan_probe(10.0, 20.0)
    seen = {}

    def fake_measure(addr, port, bulk_bytes, steady_from_bytes, timeout_s, max_pacing_mbit,
                     pings):
        seen.update(bulk_bytes=bulk_bytes, steady_from_bytes=steady_from_bytes,
                    timeout_s=timeout_s, max_pacing_mbit=max_pacing_mbit)
        return {}

    monkeypatch.setattr("bench.net.probe.wire.measure", fake_measure)
    main(["measure", "--addr", "198.18.0.2", "--port", "5201", *p.client_args()])
    assert seen == {"bulk_bytes": p.bulk_bytes, "steady_from_bytes": p.steady_from_bytes,
                    "timeout_s": pytest.approx(p.timeout_s, rel=1e-5),
                    "max_pacing_mbit": p.max_pacing_mbit}


# `python -m bench.net.probe --help`, then the modules it loaded, one per line
_PROBE_START = """
import runpy, sys
sys.argv = ["probe", "--help"]
try:
    runpy.run_module("bench.net.probe", run_name="__main__", alter_sys=True)
except SystemExit as stop:
    assert stop.code == 0, stop.code
print("modules:", *sorted(sys.modules), sep="\\n")
"""


def test_the_probe_command_starts_on_the_standard_library_and_its_own_package():
    # started once per link inside namespaces and containers: without site-packages (-S)
    # it must still start, and of the suite it loads only bench, bench.net and the probe
    repo = Path(__file__).resolve().parents[4]
    proc = subprocess.run([sys.executable, "-S", "-c", _PROBE_START], cwd=repo,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    help_text, _, modules = proc.stdout.partition("modules:\n")
    assert "usage: python -m bench.net.probe [-h] {serve,measure}" in help_text
    loaded = modules.splitlines()
    assert "bench.net.probe.wire" in loaded
    outside = [name for name in loaded if name.split(".")[0] not in sys.stdlib_module_names
               and name not in ("__main__", "bench", "bench.net", "bench.net.probe")
               and not name.startswith("bench.net.probe.")]
    assert outside == []
