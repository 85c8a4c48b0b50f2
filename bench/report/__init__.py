"""Reports made from files, never from live objects: summary numbers (summary), tables
and report.md (tables), link bounds (linkbound), figures (plots), a sweep's repeats as
medians with their band (repeats), cells on scheduled links in time (timeline), the
paper figures with the published claims and the model report (paper, claims), the
same figure from replayed cells beside the model's curve (paper_replay), and the
convergence report (convergence: quality over seeds in quality, the gaps' intervals and
their words in significance, gaps across depth and size and against rival modes in gaps,
time to quality in timetoquality and within one run in inrun, its figures in
convergence_plots). The files are the result files
(bench.results) and, for the model report, the model's result files bench.harness.paper
wrote, judged with bench.perfmodel's functions.

May import bench.results, bench.perfmodel, specfile (the claims file) and aqsgd; imports
no launcher (bench.launch) and nothing of bench.harness (pyproject.toml's
report-no-launch and bench-layers contracts).
"""
