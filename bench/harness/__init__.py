"""The harness: sweeps of cells (sweep), one RunConfig per cell (cells), every cell
checked before anything is brought up (preflight), running and supervising them on a
launcher's hosts (run, checkpoint, meta, progress; outages: the timeouts and record of
cells on links that change), the CI
regression check (regress) and the paper sweep (paper).

May import bench.report, bench.launch, bench.perfmodel (the paper's model results),
bench.results, bench.net, specfile and aqsgd.
"""
