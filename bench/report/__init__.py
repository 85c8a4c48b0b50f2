"""Reports made from result files only: summary numbers (summary), tables (tables),
figures (plots) and the paper figures with the published claims (paper).

May import bench.results and aqsgd; imports no launcher (bench.launch) and nothing
of bench.harness.
"""
