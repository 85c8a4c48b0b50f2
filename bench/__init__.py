"""The benchmarks around the library: network emulation (net), launchers (launch), the
harness that sweeps and runs cells (harness), result files (results), reports (report),
the performance model (perfmodel) and micro-benchmarks (micro); `python -m bench` is the
command line. May import aqsgd and specfile.
"""

from pathlib import Path

# The checkout this package runs from: results/ and helper processes' PYTHONPATH are
# found from here.
REPO_ROOT = Path(__file__).resolve().parent.parent
# The shipped scenario and sweep files and the performance model's profiles: package data
# (bench/scenarios and bench/profiles link to the checkout's scenarios/ and profiles/, and
# a wheel holds them as files there), resolved, so a checkout names them as before
SCENARIO_DIR = (Path(__file__).parent / "scenarios").resolve()
PROFILE_DIR = (Path(__file__).parent / "profiles").resolve()
