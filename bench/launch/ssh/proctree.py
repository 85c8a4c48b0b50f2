"""The whole process tree below one process, found in /proc and stopped by identity.

    become_subreaper()                        # orphans below this process stay below it
    me = ProcessIdentity.of(os.getpid())
    tree = descendants(me.pid)                # [ProcessIdentity], parents first
    stop_tree(me, grace_s=5.0)                # SIGTERM to each, SIGKILL after grace_s

The tree, not the process group: torchrun starts each worker in a session of its own.
psutil walks the tree; each process is named by its ProcessIdentity (pid, start time,
boot) and signalled through a pidfd checked against it, so a reused pid is never
signalled. A subreaper keeps the orphans of a dead torchrun below `tied`. Runs on the
SSH hosts, which have the suite's pinned packages (psutil among them; checked by
bench.launch.ssh.checks). Why: docs/multihost.md, "Stopping a host's processes".
"""

from __future__ import annotations

import ctypes
import os
import signal
import time

import psutil

from bench.launch.process import KILL_WAIT_S, ProcessIdentity

__all__ = ["become_subreaper", "descendants", "send", "stop_tree"]

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
POLL_S = 0.05


def become_subreaper() -> None:
    """Make this process the reaper of orphans below it (Linux prctl; see module doc)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(err)}")


def descendants(root: int) -> list[ProcessIdentity]:
    """Every living process below pid `root` (not root itself), parents before
    children (psutil's walk); zombies left out (they have exited)."""
    try:
        below = psutil.Process(root).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    found = []
    for p in below:
        ident = ProcessIdentity.of(p.pid)
        # is_running after `of`: the pid still names the process psutil found (start time)
        if ident is not None and p.is_running():
            found.append(ident)
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
