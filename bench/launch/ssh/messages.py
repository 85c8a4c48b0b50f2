"""How the SSH launcher's checks word what they found wrong with a host: one reason each,
read after `HOST: ` in the list of hosts that cannot run a sweep (checks.py), saying
what was expected, what the host has and how to fix it.

    messages.unknown_host_key(h, "host root@10.0.0.2: HostKeyNotVerifiable: ...")
    messages.no_facts(h, 1, stderr, bare_code, bare_out, "3.11.7")   # why `facts` failed
    messages.packages_differ({"torch": None}, {"torch": "2.13.0"})   # ["without torch ..."]

Pure functions of what the checks gathered; nothing here contacts a host.
"""

from __future__ import annotations

from collections.abc import Mapping

from bench.launch.hostfile import HostEntry

__all__ = ["DEFAULT_KNOWN_HOSTS", "PYTHON_VERSION", "last_line", "no_facts", "no_sftp",
           "packages_differ", "python_differs", "unknown_host_key"]

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"  # where asyncssh looks without known_hosts=
# run on a host as `PYTHON -c PYTHON_VERSION`, without -P: any Python answers it
PYTHON_VERSION = "import platform; print(platform.python_version())"


def last_line(text: str) -> str:
    """The last non-empty line of text (a traceback's exception), or '(no output)'."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def unknown_host_key(h: HostEntry, err: str) -> str:
    """A host whose key the known_hosts file lacks (or has another of)."""
    known = h.known_hosts or DEFAULT_KNOWN_HOSTS
    port = [] if h.port == 22 else ["-p", str(h.port)]
    scan = " ".join(["ssh-keyscan", *port, h.host])
    return (f"its host key is not in {known} or differs from the one there ({err}); once its "
            f"fingerprint is checked, add it (`{scan} >> {known}`), or name the file that "
            f"has it with known_hosts= in the hostfile")


def python_differs(h: HostEntry, theirs: str, here: str) -> str:
    return f"Python {theirs} at python={h.python}, here {here}"


def no_facts(h: HostEntry, code: int, said: str, bare_code: int, bare_out: str,
             here: str) -> str:
    """Why `hostside facts` exited `code` (its output `said`), from what the host's
    `python=` said when asked its version alone (`bare_code`, `bare_out`): it does not
    run, it is another Python (one before 3.11 rejects -P), or the suite fails in it."""
    if bare_code != 0:
        return (f"python={h.python} does not run there (exit {bare_code}: "
                f"{last_line(bare_out)}); give python= the interpreter of the suite's "
                f"virtual environment on that host")
    if bare_out.strip() != here:
        return python_differs(h, bare_out.strip(), here)
    return (f"the suite at {h.suite} does not run with python={h.python} (exit {code}: "
            f"{last_line(said)}); check suite= and python= in the hostfile")


def packages_differ(theirs: Mapping[str, str | None], here: Mapping[str, str | None]
                    ) -> list[str]:
    """One reason for the pinned packages the host lacks, one per package of another
    version (`NAME THEIRS, here OURS`)."""
    missing = [name for name, version in here.items()
               if version is not None and theirs.get(name) is None]
    other = [f"{name} {theirs.get(name)}, here {version}" for name, version in here.items()
             if name not in missing and theirs.get(name) != version]
    if missing:
        other.insert(0, f"without {', '.join(missing)} (pinned here: python= may name an "
                        f"interpreter without the suite's packages)")
    return other


def no_sftp(err: str) -> str:
    """A host that does not share the results folder and whose sshd refuses SFTP."""
    return (f"its sshd offers no sftp subsystem ({err}), which hosts without the shared "
            f"results folder need; add \"Subsystem sftp internal-sftp\" to its sshd_config")
