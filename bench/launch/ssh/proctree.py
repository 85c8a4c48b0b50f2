"""The whole process tree below one process, found in /proc and stopped by identity.

    become_subreaper()                        # orphans below this process stay below it
    me = ProcessIdentity.of(os.getpid())
    tree = descendants(me.pid)                # [ProcessIdentity], parents first
    stop_tree(me, grace_s=5.0)                # SIGTERM to each, SIGKILL after grace_s

Why not the process group: torchrun starts each worker in a session of its own
(torch.distributed.elastic's SubprocessHandler, `start_new_session=True`), so a signal
to torchrun's group misses the workers, and a torchrun killed before it stops them
leaves them running, reparented to init. Here the tree is read from every process's
parent in /proc/PID/stat, each process named by its ProcessIdentity (pid, start time,
boot), and signalled through a pidfd opened and checked against that identity: a pid the
kernel has since given to another process is never signalled. A subreaper
(PR_SET_CHILD_SUBREAPER) keeps the orphans of a dead torchrun below `tied`, so a later
walk still finds them.

Standard library and bench.launch.process only (what runs on each host stays light;
psutil is not in the suite's pinned environment, and every host must match it).
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from pathlib import Path

from bench.launch.process import BOOT_ID, KILL_WAIT_S, ProcessIdentity

__all__ = ["become_subreaper", "descendants", "send", "stop_tree"]

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
POLL_S = 0.05


def become_subreaper() -> None:
    """Make this process the reaper of orphans below it (Linux prctl; see module doc)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(err)}")


def _stat(pid: int) -> tuple[int, int, str] | None:
    """(parent pid, start ticks, state) of pid; None when it is gone."""
    try:
        # the command name in parentheses may hold spaces: fields follow the last ')'
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    return int(fields[1]), int(fields[19]), fields[0]


def descendants(root: int) -> list[ProcessIdentity]:
    """Every living process below pid `root` (not root itself), parents before
    children; zombies left out (they have exited)."""
    boot = BOOT_ID.read_text().strip()
    children: dict[int, list[tuple[int, int, str]]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            st = _stat(int(entry.name))
            if st is not None:
                children.setdefault(st[0], []).append((int(entry.name), st[1], st[2]))
    found, todo = [], [root]
    while todo:
        for pid, ticks, state in children.get(todo.pop(0), []):
            todo.append(pid)
            if state != "Z":
                found.append(ProcessIdentity(pid, ticks, boot))
    return found


def send(ident: ProcessIdentity, sig: signal.Signals) -> bool:
    """Signal the process `ident` names, only if that very process still runs; whether
    it was signalled. The pidfd pins the process while its identity is checked."""
    try:
        fd = os.pidfd_open(ident.pid)
    except ProcessLookupError:
        return False
    try:
        if not ident.is_running():
            return False  # the pid is another process's now, or a zombie's
        signal.pidfd_send_signal(fd, sig)
        return True
    except ProcessLookupError:
        return False
    finally:
        os.close(fd)


def stop_tree(root: ProcessIdentity, grace_s: float, *, include_root: bool = False
              ) -> list[ProcessIdentity]:
    """Stop every process below `root` (and root with `include_root`), while root is
    the process it names (a pid reused since is nobody's root here): SIGTERM to each,
    up to grace_s for all to exit (the tree read again meanwhile, for what they start),
    then SIGKILL to those left, then up to KILL_WAIT_S for them to go. Children before
    their parent, so that none is orphaned before it is known. Returns the processes it
    signalled."""
    known: dict[ProcessIdentity, None] = {}

    def refresh() -> list[ProcessIdentity]:
        if root.is_running():
            for ident in descendants(root.pid):
                known.setdefault(ident)
        tree = [*reversed(known), *([root] if include_root else [])]
        return [i for i in tree if i.is_running()]

    signalled = [i for i in refresh() if send(i, signal.SIGTERM)]
    deadline = time.monotonic() + grace_s
    while (alive := refresh()) and time.monotonic() < deadline:
        for ident in alive:
            if ident not in signalled and send(ident, signal.SIGTERM):
                signalled.append(ident)  # started after the first round
        time.sleep(POLL_S)
    for ident in alive:
        if send(ident, signal.SIGKILL) and ident not in signalled:
            signalled.append(ident)
    deadline = time.monotonic() + KILL_WAIT_S
    while any(i.is_running() for i in alive) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    return signalled
