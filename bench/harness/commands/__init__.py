"""The harness's subcommands of `python -m bench`, one module each: `run`, `sweep`,
`docker compose` (compose), `slurm`, and `model`, `profile`, `validate` (model: the
performance model's commands, given the harness's run configs). Each module's
`register(sub)` adds its parser to the subparsers `sub` and sets its handler
(`set_defaults(func=...)`); bench.__main__ assembles them with report, paper,
convergence and regress. options holds what run and sweep share (launcher flags, mode
parsing, running a sweep and printing its report).
"""
