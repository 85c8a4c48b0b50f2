"""The benchmarks around the library: network emulation (net), launchers (launch), the
harness that sweeps and runs cells (harness), result files (results), reports (report) and
micro-benchmarks (micro); `python -m bench` is the command line. May import aqsgd.
"""
