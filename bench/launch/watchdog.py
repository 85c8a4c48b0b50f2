"""The run watchdog: a process beside the harness that, once the harness is gone (any
signal, kill -9 included), stops what the harness's launcher started and removes what it
built, by the launcher's own state file, with no cleanup command.

    dog = Watchdog.start(state_dir)     # bench.launch.lifecycle, before anything is built
    dog.note_log(log_path)              # a rank's log: it gets a line when the harness dies
    dog.stop()                          # the launcher tore down itself: the watchdog exits

    python -m bench.launch.watchdog --state-dir D --harness JSON   # what start runs

It runs in a session of its own, reads a pipe only the harness writes (EOF without
`done`: the harness died) and checks the harness's ProcessIdentity every POLL_S. Then: a
line in each rank log; each state file in D the harness wrote claimed (renamed, out of a
rerun's cleanup), its processes killed, the launcher's teardown run (bench.launch.state.
cleanup; imported, with torch, once a rank starts); a failed teardown's file gets its
name back for `make net-cleanup`. Why, per launcher: docs/watchdog.md.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.launch.process import (
    ProcessIdentity,
    env_with_repo,
    kill_identified,
    python_argv,
    spawn_group,
    stop_group,
)

__all__ = ["POLL_S", "Watchdog", "main"]

POLL_S = 0.2  # how often the watchdog checks that the harness still runs
EXIT_WAIT_S = 10.0  # for a watchdog told `done` to exit (its start on a loaded host)
CLAIMED = ".claimed"  # a claimed state file's suffix (not `aq*.json`: cleanup skips it)


class Watchdog:
    """The harness's end of one run's watchdog (module doc)."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc

    @classmethod
    def start(cls, state_dir: Path | str) -> Watchdog:
        """A watchdog for this process's launcher state files in state_dir."""
        me = ProcessIdentity.of(os.getpid())
        argv = python_argv(sys.executable, "-m", "bench.launch.watchdog", "--state-dir",
                           str(Path(state_dir).resolve()), "--harness",
                           json.dumps(me.to_dict()))
        return cls(spawn_group(argv, env_with_repo(), stdin_pipe=True))

    def _tell(self, message: dict) -> None:
        try:
            self.proc.stdin.write(json.dumps(message).encode() + b"\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            print(f"WARNING: the run's watchdog (pid {self.proc.pid}) exited with "
                  f"{self.proc.poll()}: a killed harness now leaves its hosts until `make "
                  f"net-cleanup`", file=sys.stderr, flush=True)

    def note_log(self, log_path: Path | str | None) -> None:
        """A rank log (None: nothing) that gets a line if the harness dies."""
        if log_path is not None:
            self._tell({"log": str(Path(log_path).resolve())})

    def stop(self) -> None:
        """The run ended on its own: the watchdog exits without touching anything."""
        if self.proc.poll() is None:
            self._tell({"done": True})
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass  # it has exited: nothing was left unread that matters
        try:
            self.proc.wait(timeout=EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            stop_group(self.proc, grace_s=0.0)


# -- the watchdog process ------------------------------------------------------------
def _wait_for_death(harness: ProcessIdentity, logs: list[str]) -> bool:
    """Read the harness's messages until it is gone (True) or says `done` (False)."""
    pending = b""
    stdin = sys.stdin.fileno()
    while True:
        ready, _, _ = select.select([stdin], [], [], POLL_S)
        if ready:
            chunk = os.read(stdin, 65536)
            if not chunk:  # EOF without `done`: the harness is gone, or going
                while harness.is_running():
                    time.sleep(POLL_S)
                return True
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                message = json.loads(line)
                if message.get("done"):
                    return False
                if not logs:  # a run with ranks: its teardown's imports (torch) made ready
                    threading.Thread(target=_import_teardown, daemon=True).start()
                logs.append(message["log"])
        elif not harness.is_running():
            return True


def _import_teardown() -> None:
    import bench.launch.state  # noqa: F401 - imported now, used once the harness is gone


def _say(logs: list[str], text: str) -> None:
    """One line to stderr and to every rank log."""
    line = f"[watchdog {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}] {text}\n"
    sys.stderr.write(line)
    sys.stderr.flush()
    for log in logs:
        try:
            with open(log, "a") as f:
                f.write(line)
        except OSError as err:
            sys.stderr.write(f"[watchdog] cannot write to {log}: {err}\n")


def _claim(state_dir: Path, harness: ProcessIdentity) -> list[tuple[Path, Path, dict]]:
    """(name, claimed path, state) of each state file in state_dir the harness wrote,
    renamed so that no other cleanup reads it meanwhile."""
    claimed = []
    for path in sorted(state_dir.glob("aq*.json")):
        try:
            state = json.loads(path.read_text())
            if not isinstance(state, dict) or \
                    state.get("launcher_process") != harness.to_dict():
                continue
            mine = path.with_name(path.stem + CLAIMED)
            path.rename(mine)
        except (FileNotFoundError, json.JSONDecodeError):
            continue  # removed meanwhile, or not a state file (the delay line's config)
        claimed.append((path, mine, state))
    return claimed


def tear_down(state_dir: Path, harness: ProcessIdentity, logs: list[str]) -> int:
    """What the harness's launcher in state_dir left, removed (module doc); exit status."""
    t0 = time.monotonic()
    _say(logs, f"the harness (pid {harness.pid}) is gone: stopping its workers and "
               f"removing what its launcher built")
    claimed = _claim(state_dir, harness)
    killed = kill_identified([ProcessIdentity.from_dict(p)
                              for _, _, state in claimed for p in state.get("processes", [])])
    from bench.launch.state import cleanup  # torch comes with it (module doc)

    code, removed = 0, list(killed)
    for path, mine, _ in claimed:
        try:
            removed += [*cleanup([mine]), f"state file {path.name}"]
        except (ValueError, RuntimeError, OSError) as err:  # the file kept for net-cleanup
            mine.rename(path)
            _say(logs, f"teardown of {path} failed ({type(err).__name__}: {err}); the file "
                       f"stays for `make net-cleanup`")
            code = 1
    _say(logs, f"done in {time.monotonic() - t0:.1f} s: {len(removed)} removed"
               + (f" ({'; '.join(removed)})" if removed else ""))
    return code


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.launch.watchdog",
                                description=__doc__.split("\n")[0])
    p.add_argument("--state-dir", type=Path, required=True,
                   help="where the harness's launcher writes its state files")
    p.add_argument("--harness", required=True,
                   help="JSON: the harness's ProcessIdentity (pid, start_ticks, boot_id)")
    args = p.parse_args(argv)
    harness = ProcessIdentity.from_dict(json.loads(args.harness))
    logs: list[str] = []
    if not _wait_for_death(harness, logs):
        os._exit(0)  # not a normal exit: the import thread may be in the middle of torch
    return tear_down(args.state_dir, harness, logs)


if __name__ == "__main__":
    sys.exit(main())
