"""The harness command line, `python -m bench` or `bench`: each subcommand registers its
parser and handler in its own module (`register(sub)`); this module only assembles them.

    python -m bench run --scenario 100mbps                 # default grid, table, figures
    python -m bench run --scenario 100mbps --modes fp32 aqsgd:2/4 --steps 5
    python -m bench run --scenario 100mbps --dry-run       # cells, placement, time; no run
    python -m bench sweep scenarios/sweeps/paper.yaml      # resumable sweep
    python -m bench report results/100mbps                 # table + figures + report.md again
    python -m bench compare results/before results/after   # per-cell ratio; exit 1: regressed
    python -m bench paper                                  # paper-style figures with claims
    python -m bench convergence [--size smoke]             # model quality: seeds, epochs
    python -m bench regress [--update-baseline]            # CI regression check
    python -m bench docker compose --scenario 100mbps      # the equivalent compose file
    python -m bench slurm --scenario 100mbps --sweep F --iface eth0   # an sbatch script
    python -m bench model --preset gpt2-xl --stages 8 --profile a100-bf16 --scenario 100mbps-8hosts
    python -m bench profile --cells results/profile-fit     # this machine's profile
    python -m bench validate --profile cpu-2core results/paper   # predicted vs measured
    python -m bench chaos [--size smoke]                   # a netns sweep under faults, checked
    python -m bench --version                              # the suite's version and commit

Launchers (--launcher, bench.launch.choice.LAUNCHERS): auto (netns when root and
`ip netns` works, else local), netns, docker (containers, docs/docker.md), local, ssh
(real hosts: --hostfile FILE, and --no-shaping to measure the real links unshaped).

Exit codes: 0 all cells ok (regress: no regression), 1 a cell failed or a
regression was found, 2 bad input (unknown scenario, bad mode, bad file, a cell that
cannot run: every cell is checked before anything is brought up), with one or two lines
that name what was wrong, the value and how to fix it.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import subprocess
import sys
import warnings

from bench import REPO_ROOT
from bench.harness import chaos, convergence, paper, paper_replay, regress
from bench.harness.commands import compose, model, run, slurm, sweep
from bench.harness.commands.options import launcher_options
from bench.report import cli as report
from bench.report import compare, score
from bench.report.cli import EXIT_BAD_INPUT, finish_sweep

__all__ = ["main", "build_parser", "finish_sweep", "launcher_options"]

# In the order `python -m bench --help` lists them.
COMMANDS = (run, sweep, report, compare, compose, slurm, paper, paper_replay, convergence,
            regress, score, model, chaos)


class _Version(argparse.Action):
    """`--version`: the suite's version and git commit, looked up only when asked."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version())  # on stdout, as argparse's own version action prints
        parser.exit()


def version() -> str:
    """'bench 0.1.0 (commit 1a2b3c4d5e6f, modified)': the installed suite's version and
    the commit of the checkout it runs from ('unknown' outside a git checkout)."""
    try:
        number = importlib.metadata.version("aqsgd-bench")
    except importlib.metadata.PackageNotFoundError:
        number = "(not installed)"
    git = ["git", "-C", str(REPO_ROOT)]
    try:
        commit = subprocess.run([*git, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                                text=True, timeout=10).stdout.strip() or "unknown"
        dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        commit, dirty = "unknown", ""
    return f"bench {number} (commit {commit}{', modified' if dirty else ''})"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action=_Version,
                        help="print the suite's version and git commit, then exit (default: run "
                             "the subcommand)")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.register(sub)
    return parser


def _name_skipped_files_once() -> None:
    """A result file the loaders skip (ResultFileWarning) is named once, on one line of
    stderr, however many readers meet it; other warnings show as Python shows them."""
    from bench.results.files import ResultFileWarning

    shown, python_show = set(), warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if not issubclass(category, ResultFileWarning):
            python_show(message, category, filename, lineno, file, line)
        elif str(message) not in shown:
            shown.add(str(message))
            print(f"warning: {message}", file=sys.stderr)

    warnings.simplefilter("always", ResultFileWarning)
    warnings.showwarning = show


def main(argv: list[str] | None = None) -> int:
    """Parse `argv` (default sys.argv[1:]) and run the subcommand; the exit code."""
    args = build_parser().parse_args(argv)
    with warnings.catch_warnings():  # the caller's warning settings come back after
        _name_skipped_files_once()
        try:
            return args.func(args)
        # ScenarioError and SpecError are ValueErrors; OSError: a path that cannot be read
        # or written, named in the message
        except (ValueError, TypeError, OSError) as err:
            print(f"error: {err}", file=sys.stderr)
            return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
