"""The performance model: one optimizer step of a pipeline (GPipe or 1F1B, stages x
replicas on a scenario's links) predicted from a hardware profile, validated against the
measured cells, projected to GPT2-XL on GPUs, and the what-if command.

Modules: `profile` (the profile file), `replay` (a profile's times of a replayed cell's
cut, measured or derived from its FLOP rate), `measure` (this machine's CPU profile),
`workload` (what one step does, from a `RunConfig` and a `Placement`), `sim` (the
discrete-event step), `predict`, `validate`, `project`, `whatif` and `cli` (the
commands). docs/performance-model.md has the model; docs/architecture/harness.md its calls.

May import `aqsgd`, `bench.micro` (its timing), `bench.net`, `bench.results` and
`specfile`; `bench.report`, `bench.harness` and `bench.__main__` import it.
"""
