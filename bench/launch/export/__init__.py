"""Exports: what it takes to run a scenario elsewhere, as commands or files, with nothing
executed here. multihost.py prints, per real host, the tc commands of the host shaping
plan (bench.net.shaping) on its interface and the torchrun line of its worker. slurm.py
writes the sbatch script running one scenario of a sweep on a Slurm cluster, and
slurm_job.py is what that job runs on the nodes (its addresses, the same host plan held
while it runs, each cell's result files). May import the core of bench/launch, bench.net
and bench.results (the job's result files); no launcher (an export of one launcher's
run, such as Docker's compose file, lives with that launcher).
"""
