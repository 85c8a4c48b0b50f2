"""`python -m bench model`, `profile` and `validate`: the performance model's commands
(bench.perfmodel.cli), registered here because `model` needs the run config each mode
gets, built as the harness builds a cell's (bench.harness.paper.model_configs).

    python -m bench model --preset gpt2-xl --stages 8 --profile a100-bf16 --scenario 100mbps-8hosts
    python -m bench profile --cells results/profile-fit
    python -m bench validate --profile cpu-2core results/paper
    python -m bench profile --plugin examples/plugins/randproj.py   # times its modes too

Each takes `--plugin` (bench.harness.commands.options): a plug-in's modes are modelled,
profiled and validated like the built-ins (docs/plugins.md).
"""

from __future__ import annotations

import argparse

from bench.harness.commands.options import add_plugin_option, load_plugin_option, parse_modes

__all__ = ["register"]


def register(sub) -> None:
    """Add `model`, `profile` and `validate` to the subparsers `sub` of `python -m bench`."""
    from bench.harness.paper import model_configs
    from bench.perfmodel import cli

    model = sub.add_parser("model", help="what-if: predicted throughput, bytes, bottleneck "
                                         "per mode (docs/performance-model.md)")
    cli.add_model_arguments(model, model_configs)
    run_model = model.get_default("func")

    def checked(args: argparse.Namespace) -> int:  # --modes read as `bench run` reads them
        parse_modes(args.modes)
        return run_model(args)

    model.set_defaults(func=checked)
    profile = sub.add_parser("profile",
                             help="measure this machine's profile for the performance model")
    cli.add_profile_arguments(profile)
    validate = sub.add_parser(
        "validate", help="the performance model's predicted against measured step times")
    cli.add_validate_arguments(validate)
    for parser in (model, profile, validate):
        add_plugin_option(parser)
        parser.set_defaults(func=_after_plugins(parser.get_default("func")))


def _after_plugins(func):
    """`func(args)` once the --plugin values are loaded."""
    def run(args: argparse.Namespace) -> int:
        load_plugin_option(args)
        return func(args)
    return run
