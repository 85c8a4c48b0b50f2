"""Bring-up and teardown of a launcher's hosts, shared by every launcher:

    class MyLauncher(HostsLifecycle):
        name = "mine"             # the `launcher` its state files record
        def _prepare(self): ...   # before anything exists (names, clients, checks)
        def _build(self): ...     # write the state file first, then create the hosts
        def _remove(self): ...    # remove exactly what _build created

Entering names `self.state_dir` in the registry of state dirs, first removes what
killed runs of the same launcher left there (`removed_before_start`), then starts the
run's watchdog (bench.launch.watchdog: should this process die, it tears the run down by
its state file; `self._note_log(log_path)` tells it a rank's log). While the hosts
exist, SIGTERM raises SystemExit so that `__exit__` runs; a failed bring-up is torn down
before the error goes on; teardown runs with SIGINT and SIGTERM held (a second signal
lands afterwards), then lets the watchdog go. Bring-up and tear-down times go to
`self._timing`.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

from bench.launch.state import register_state_dir, remove_killed_runs
from bench.launch.watchdog import Watchdog

__all__ = ["HostsLifecycle"]


def _raise_system_exit(signum, frame):
    raise SystemExit(128 + signum)


class HostsLifecycle:
    """Context-manager half of a launcher; subclasses give `_prepare`, `_build`,
    `_remove` and set `self._timing = {}` in their `__init__`."""

    _prev_sigterm = None
    _timing: dict[str, float]
    name: str
    state_dir: Path
    removed_before_start: tuple[str, ...] = ()
    _watchdog: Watchdog | None = None

    def _prepare(self) -> None:
        """Work before anything is created; nothing to undo if it fails."""

    def _build(self) -> None:
        raise NotImplementedError

    def _remove(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        self._prepare()
        register_state_dir(self.state_dir)
        self.removed_before_start = tuple(remove_killed_runs(self.state_dir, self.name))
        self._watchdog = Watchdog.start(self.state_dir)
        if threading.current_thread() is threading.main_thread():
            self._prev_sigterm = signal.signal(signal.SIGTERM, _raise_system_exit)
        t0 = time.perf_counter()
        try:
            self._build()
        except BaseException:
            self._teardown()
            raise
        self._timing["up_s"] = time.perf_counter() - t0
        return self

    def __exit__(self, *exc) -> None:
        self._teardown()

    def _note_log(self, log_path: Path | str | None) -> None:
        """A rank's log (None: none), where the watchdog says so if this process dies."""
        if self._watchdog is not None:
            self._watchdog.note_log(log_path)

    def _teardown(self) -> None:
        t0 = time.perf_counter()
        # no Ctrl-C or SIGTERM in the middle of removing things; they land afterwards
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            self._remove()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            if self._prev_sigterm is not None:
                signal.signal(signal.SIGTERM, self._prev_sigterm)
                self._prev_sigterm = None
            if self._watchdog is not None:
                self._watchdog.stop()
                self._watchdog = None
        self._timing["down_s"] = time.perf_counter() - t0
