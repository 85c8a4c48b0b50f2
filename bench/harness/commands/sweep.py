"""`python -m bench sweep FILE`: run (resume) the cells of a sweep file, then its report.

    python -m bench sweep scenarios/sweeps/paper.yaml [--out DIR] [--launcher ...]
    python -m bench sweep FILE --plugin my_mode.py     # plug-ins beside the file's `plugins:`
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.harness.commands.options import (
    MODE_SYNTAX,
    add_launch_options,
    add_plugin_option,
    load_plugin_option,
    run_and_finish,
)

__all__ = ["register"]


def register(sub) -> None:
    """Add `sweep` to the subparsers `sub` of `python -m bench`."""
    sweep = sub.add_parser("sweep", help="scenarios x modes from a sweep file",
                           description="Run (resume) the cells of a sweep file. Its `modes:` "
                                       "read as --modes of `run` does: " + MODE_SYNTAX + ".")
    sweep.add_argument("file", type=Path)
    sweep.add_argument("--out", type=Path, help="default results/<sweep name>")
    add_launch_options(sweep)
    add_plugin_option(sweep)
    sweep.set_defaults(func=run_sweep_file)


def run_sweep_file(args: argparse.Namespace) -> int:
    from bench.harness.preflight import load_checked_sweep

    load_plugin_option(args)
    spec = load_checked_sweep(args.file)  # every cell checked; errors name file and field
    return run_and_finish(spec, args.out, args, title=f"Sweep {spec.name}")
