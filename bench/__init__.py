"""The benchmarks around the library: network emulation (net), launchers (launch), the
harness that sweeps and runs cells (harness), result files (results), reports (report),
the performance model (perfmodel) and micro-benchmarks (micro); `python -m bench` is the
command line. May import aqsgd and specfile.
"""

from pathlib import Path

# The checkout this package runs from: scenarios/, results/ and helper processes'
# PYTHONPATH are found from here.
REPO_ROOT = Path(__file__).resolve().parent.parent
