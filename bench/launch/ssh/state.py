"""The SSH run's state file, and teardown by what it records on every host.

Before an SSH run changes anything it writes STATE_DIR/P.json (P = its prefix): the
fields every launcher's state file starts with (bench.launch.state.launcher_fields,
`"launcher": "ssh"`), then per host its hostfile entry, the folder of the host's own
record (bench/launch/ssh/hostside.py, HOST_RECORD_ROOT/P-hI) and `removal`, the tc/ip
commands removing every qdisc and device the run's shaping makes there (written before
the first is made), and `processes`: the identities of the local relays it started
(killed by bench.launch.state.cleanup). Teardown, in the launcher's `finally` or later
through `python -m bench.launch cleanup` (`teardown_state`, which bench.launch.choice
names for "ssh"), connects to each host and runs `hostside teardown` there: the host's
recorded processes killed, the recorded qdiscs removed, its record deleted. A host that
does not answer is named in the error, and the state file stays for a later cleanup.
"""

from __future__ import annotations

import json
from pathlib import Path

from aqsgd.filecache import atomic_write_text
from bench.launch.hostfile import HostEntry
from bench.launch.process import ProcessIdentity
from bench.launch.ssh.checks import hostside_argv
from bench.launch.ssh.remote import HostUnreachable, Remote, RemoteCommandError
from bench.launch.state import launcher_fields
from bench.net.executor import Argv, Executor

__all__ = ["HostRecord", "TeardownError", "teardown_hosts", "teardown_state", "write_state"]


class TeardownError(RuntimeError):
    """Hosts whose recorded names could not be removed (unreachable, a command failed)."""


HostRecord = dict  # {"entry": HostEntry.to_dict(), "record_dir": str, "removal": [argv]}


def host_record(entry: HostEntry, record_dir: str, removal: list[Argv]) -> HostRecord:
    return {"entry": entry.to_dict(), "record_dir": record_dir,
            "removal": [list(a) for a in removal]}


def write_state(path: Path, run_id: str, prefix: str, hosts: list[HostRecord],
                processes: list[ProcessIdentity]) -> None:
    """(Re)write the state file atomically: a kill at any moment leaves a whole one."""
    state = {**launcher_fields("ssh", run_id, prefix), "hosts": hosts,
             "processes": [p.to_dict() for p in processes]}
    atomic_write_text(path, json.dumps(state, indent=1))


def teardown_hosts(hosts: list[HostRecord], remote: Remote | None = None
                   ) -> tuple[list[str], list[tuple[int, str]]]:
    """Run `hostside teardown` on every recorded host (see module doc). Returns (what was
    removed, [(index in hosts, why) for each host that could not be torn down])."""
    entries = [HostEntry.from_dict(h["entry"]) for h in hosts]
    own = remote is None
    remote = remote or Remote(entries)
    removed, failed = [], []
    try:
        for i, (h, entry) in enumerate(zip(hosts, entries, strict=True)):
            argv = hostside_argv(entry, "teardown", "--dir", h["record_dir"],
                                 "--commands", json.dumps(h["removal"]))
            try:
                done = remote.run(i, argv)
            except (HostUnreachable, RemoteCommandError) as err:
                failed.append((i, str(err)))
                continue
            removed += [f"{entry.name}: {what}" for what in json.loads(done.stdout)]
    finally:
        if own:
            remote.close()
    return removed, failed


def teardown_state(state: dict, path: Path, ex: Executor) -> list[str]:
    """What a killed SSH run's state file names, removed on every host it records
    (bench.launch.state.cleanup calls this after killing the local relays; `ex` is
    unused: nothing runs on this machine). TeardownError names each host that could not
    be torn down; the file then stays."""
    removed, failed = teardown_hosts(state["hosts"])
    if failed:
        raise TeardownError(f"state file {path}: " + "; ".join(why for _, why in failed)
                            + f"; run `python -m bench.launch cleanup --state {path}` again once "
                              "the host answers")
    return removed
