"""Training one pipeline stage: the run configuration (config), the schedule, p2p
transport, the stage executor (pipeline), a stage's in-graph halves (boundary), per-rank
metrics and the worker process.

May import the rest of aqsgd (quant, compress, model, data); never imports bench.
"""
