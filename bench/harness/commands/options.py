"""What the commands that run cells share: the launcher flags, `--modes` read as
ModeSpecs, a results folder checked, and a sweep run and reported.

    add_launch_options(parser)                # --launcher --hostfile --no-shaping ...
    add_plugin_option(parser); load_plugin_option(args)   # --plugin FILE_OR_MODULE
    run_and_finish(spec, out, args, title)    # run (resume) the cells, then the report
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from aqsgd.compress.plugins import Plugin, PluginError
from aqsgd.compress.registry import load_plugins
from bench.harness.modes import ModeSpec, first_repeat, parse_mode
from bench.harness.sweep import PluginSources, SweepSpec
from bench.report.cli import EXIT_OK, finish_sweep
from specfile import description

__all__ = ["MODE_SYNTAX", "add_launch_options", "add_plugin_option", "launcher_options",
           "load_plugin_option", "parse_modes", "results_dir", "run_and_finish"]

# A mode has one spelling on the command line, in sweep files, tables and legends; the
# directory spelling reads too (docs/results-schema.md, "Mode spellings").
MODE_SYNTAX = ("a mode reads NAME[/GRAD][:FW/BW], e.g. fp32, aqsgd:2/4, aqsgd+gc/ef21:2/4, "
               "as tables print it, or as directories name it (aqsgd-fw2-bw4); "
               "docs/results-schema.md, \"Mode spellings\"")


def parse_modes(values: list[str], flag: str = "--modes") -> tuple[ModeSpec, ...]:
    """Modes given as flag values (also comma-separated) as ModeSpecs; a ValueError
    naming the flag, the value and the syntax."""
    modes, texts = [], [m for v in values for m in v.split(",") if m.strip()]
    for text in texts:
        try:
            modes.append(parse_mode(text))
        except (ValueError, TypeError) as err:
            raise ValueError(f"{flag} {text!r}: {err}\n  {MODE_SYNTAX}") from None
    if (pair := first_repeat(modes)) is not None:  # refused, as in a sweep file
        j, k = pair
        raise ValueError(f"{flag} {texts[k]!r}: mode {modes[k]}, given already as "
                         f"{texts[j]!r}: each mode runs once (--repeats N measures it N times)")
    return tuple(modes)


def add_plugin_option(p: argparse.ArgumentParser) -> None:
    """--plugin MODULE_OR_FILE, repeatable (bench.harness.sweep.PluginSources)."""
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE_OR_FILE",
                   help=f"{description(PluginSources)}; repeat for several (default: none; "
                        f"installed packages' plug-ins load always)")


def load_plugin_option(args: argparse.Namespace) -> tuple[Plugin, ...]:
    """Load the --plugin values (before any mode is read); a ValueError naming the flag."""
    try:
        return load_plugins(args.plugin)
    except PluginError as err:
        raise ValueError(f"--plugin: {err}") from None


def add_launch_options(p: argparse.ArgumentParser) -> None:
    """The flags of `run` and `sweep` that choose and drive the launcher."""
    from bench.launch.choice import LAUNCHERS

    p.add_argument("--launcher", default="auto", choices=LAUNCHERS,
                   help="default auto: netns when root and `ip netns` works, else local "
                        "(unshaped)")
    p.add_argument("--hostfile", type=Path, default=None,
                   help="--launcher ssh: the hosts, `HOST slots=N interface=DEV ...` a line, "
                        "or YAML (bench/launch/hostfile.py; default: none)")
    p.add_argument("--no-shaping", action="store_true",
                   help="--launcher ssh: shape nothing; probe and record the real links")
    p.add_argument("--fresh", action="store_true",
                   help="rerun every cell, even those finished earlier")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--dry-run", action="store_true",
                   help="check every cell, print the cells, their placement and the time "
                        "estimate; bring nothing up, write nothing")
    p.add_argument("--check-hosts", action="store_true",
                   help="with --dry-run: also contact the launcher's hosts (ssh: the "
                        "hostfile's) and run the checks a run runs first, changing nothing")


def launcher_options(args: argparse.Namespace) -> dict:
    """The options of the launcher `--launcher` names (bench.launch.choice.choose_launcher):
    only those given, so that another launcher is not handed the ssh launcher's."""
    options = {}
    if args.hostfile is not None:
        options["hostfile"] = args.hostfile
    if args.no_shaping:
        options["shaping"] = False
    return options


def results_dir(path: Path, flag: str) -> Path:
    """`path` if it can hold results (a directory, or nothing yet); a ValueError naming
    `flag` for an existing file."""
    if path.exists() and not path.is_dir():
        raise ValueError(f"{flag} {path} is a file, not a results directory: name a "
                         f"directory (it is created if missing)")
    return path


def run_and_finish(spec: SweepSpec, out: Path | None, args: argparse.Namespace,
                   title: str) -> int:
    """Run (resume) a sweep into `out` (default results/<sweep name>), then print its
    table, figures and report; the exit code. With --dry-run: what would run, nothing
    done (bench.harness.run.dry_run)."""
    from bench import REPO_ROOT
    from bench.harness.run import dry_run, run_sweep

    out = results_dir(out or REPO_ROOT / "results" / spec.name, "--out")
    if args.check_hosts and not args.dry_run:
        raise ValueError("--check-hosts goes with --dry-run (a run checks its hosts first)")
    if args.dry_run:
        dry_run(spec, out, launcher=args.launcher, fresh=args.fresh,
                launcher_options=launcher_options(args), check_hosts=args.check_hosts)
        return EXIT_OK
    started = time.monotonic()
    run_sweep(spec, out, launcher=args.launcher, fresh=args.fresh, quiet=args.quiet,
              launcher_options=launcher_options(args))
    code = finish_sweep(out, title=title)
    print(f"wall time: {time.monotonic() - started:.1f} s")
    return code
