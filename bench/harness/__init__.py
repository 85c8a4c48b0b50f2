"""The harness: sweeps of cells (sweep; what each cell trains: workload), one RunConfig
per cell (cells), every cell checked before anything is brought up (preflight), running
and supervising them on a launcher's hosts (run, checkpoint, meta, progress; outages: the
timeouts and record of cells on links that change; estimate, memory: the time and memory
stated before the first cell), the CI regression check (regress),
the paper sweep (paper), and the subcommands of `python -m bench` that build cells
(commands/: run, sweep, docker compose, slurm, model).

May import bench.report, bench.launch, bench.perfmodel (the paper's model results),
bench.results, bench.net, specfile and aqsgd.
"""
