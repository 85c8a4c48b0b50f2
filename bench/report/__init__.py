"""Reports made from result files only: summary numbers (summary), tables (tables),
figures (plots), the paper figures with the published claims (paper, claims), and the
convergence report (convergence: quality over seeds in quality, time to quality in
timetoquality, its figures in convergence_plots).

May import bench.results and aqsgd; imports no launcher (bench.launch) and nothing
of bench.harness.
"""
