"""Run argv lists (never shell strings) and fail loudly on a non-zero exit.

The tc/ip builders in bench/net/tc.py return plain data; this is the only place that
executes them, so a dry run or a test can record the commands instead.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Iterable, Sequence

__all__ = ["Argv", "CommandError", "Executor", "RecordingExecutor", "format_argv"]

Argv = tuple[str, ...]


def format_argv(argv: Sequence[str]) -> str:
    """Copy-pasteable form of one command (for messages and printed plans)."""
    return shlex.join(argv)


class CommandError(RuntimeError):
    """A command exited non-zero; carries the command, exit status and stderr."""

    def __init__(self, argv: Sequence[str], returncode: int, stderr: str):
        self.argv = tuple(argv)
        self.returncode = returncode
        self.stderr = stderr.strip()
        super().__init__(f"command failed (exit {returncode}): {format_argv(argv)}\n"
                         f"stderr: {self.stderr or '(empty)'}")


class Executor:
    """Runs commands; keeps the list of commands run (for the run record)."""

    def __init__(self, timeout_s: float = 60.0):
        self.timeout_s = timeout_s
        self.history: list[Argv] = []

    def run(self, argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess:
        if isinstance(argv, str) or not all(isinstance(a, str) for a in argv):
            raise TypeError(f"argv must be a sequence of str, got {argv!r}")
        self.history.append(tuple(argv))
        try:
            proc = subprocess.run(list(argv), capture_output=True, text=True,
                                  timeout=self.timeout_s, check=False)
        except FileNotFoundError as e:
            raise CommandError(argv, 127, f"executable not found: {e.filename}") from None
        except subprocess.TimeoutExpired:
            raise CommandError(argv, -1, f"timed out after {self.timeout_s} s") from None
        if check and proc.returncode != 0:
            raise CommandError(argv, proc.returncode, proc.stderr)
        return proc

    def run_all(self, argvs: Iterable[Sequence[str]]) -> None:
        for argv in argvs:
            self.run(argv)


class RecordingExecutor(Executor):
    """Records commands without running them (dry runs, printed plans, unit tests)."""

    def run(self, argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess:
        self.history.append(tuple(argv))
        return subprocess.CompletedProcess(list(argv), 0, "", "")
