"""Result files: writing and reading a cell's metrics.csv, peers.csv and meta.json,
provenance, and the tidy loader every summary, figure and check reads.

May import aqsgd (its atomic write); imports nothing of bench.harness, bench.launch or
bench.report.
"""
