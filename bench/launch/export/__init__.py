"""Exports: what it takes to run a scenario elsewhere, as commands or files, with nothing
executed here. multihost.py prints, per real host, the tc commands of the host shaping
plan (bench.net.shaping) on its interface and the torchrun line of its worker. May import
the core of bench/launch and bench.net; no launcher (an export of one launcher's run,
such as Docker's compose file, lives with that launcher).
"""
