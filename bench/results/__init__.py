"""Result files: writing and reading a cell's metrics.csv, peers.csv and meta.json,
provenance, and the tidy loader every summary, figure and check reads. meta.json has one
reader, bench.results.record (read_record: a typed CellRecord; the keys it takes and the
errors it raises are bench.results.schema's).

May import aqsgd (its atomic write); imports nothing of bench.harness, bench.launch or
bench.report.
"""
