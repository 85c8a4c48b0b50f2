"""The performance model: one optimizer step of a pipeline (GPipe or 1F1B, stages x
replicas on a scenario's links) predicted from a hardware profile, validated against the
measured cells, projected to GPT2-XL on GPUs, and the what-if command.

- `profile`: the profile file (profiles/*.yaml, read through specfile): per-stage compute
  (measured, or from an achieved FLOP rate), compression cost per element, the runtime's
  per-message cost and its measured compute/communication overlap;
- `measure`: `python -m bench profile` writes this machine's CPU profile;
- `workload`: what one step does (compute per stage, every message's bytes from the
  compressors' own size rule, the data-parallel exchange) from a `RunConfig` and a
  `Placement`;
- `sim`: the discrete-event simulation of one step over the schedule's action lists;
- `predict`: step time, throughput, bytes, bottleneck, the communication-bound rate;
- `validate`: predicted against measured step time per cell, table and figure;
- `project`: GPT2-XL (and a larger model) against bandwidth, beside the paper's claims.

May import `aqsgd`, `bench.micro` (its timing), `bench.net`, `bench.results` and
`specfile`; `bench.report`, `bench.harness` and `bench.__main__` import it.
"""
