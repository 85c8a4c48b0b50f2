"""The SSH launcher's checks, before anything on any host is changed.

    facts = gather_facts(remote, needs_netem=False, plugins=plugins)   # one per host
    check_hosts(remote.hosts, facts, shaping=True, gpus=None, plugins=plugins)
    found = check_machines(remote, needs_netem=False, shaping=True, gpus=None,
                           results_dir=out)           # both, and shares_folder(remote, out)

Each host must answer (SSH, key auth, its host key known here), run the suite's checkout
where the hostfile says (`hostside facts` there, with its `python=`), have the interface
(with an IPv4 address, and no root qdisc of someone else's on it when it is to be
shaped), the same Python version and the same versions of the suite's pinned packages
as this machine, the same commit of the suite, root and tc when it is to be shaped, GPUs
for its ranks when the run uses GPUs, the same copy of every plug-in the cells run
(`python -m aqsgd.compress.plugins` there: the file at the same absolute path, or the
module installed, with the same source hash), and an SFTP session when it does not share
the results folder (the cells' files travel over it); and, once the killed runs
recorded in the state dir are removed (just before shaping), no root qdisc on the
interface but the kernel's default (`check_interfaces_free`). Wording: messages.py.
Check and refuse, not install (why: docs/multihost.md, step 2). Every failing host is
named in one HostCheckError (a ValueError: bad input, exit 2) with its reasons.
`shares_folder`: the hosts that see the results folder as this machine's files
(docs/multihost.md, "Shared file systems").
"""

from __future__ import annotations

import json
import platform
import secrets
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tomllib

from aqsgd.filecache import atomic_write_text
from bench import REPO_ROOT
from bench.launch.hostfile import HostEntry
from bench.launch.process import python_argv
from bench.launch.ssh import messages
from bench.launch.ssh.remote import HostKeyUnknown, HostUnreachable, NoSftp, Remote

if TYPE_CHECKING:
    from aqsgd.compress.plugins import Plugin

__all__ = ["CheckedHosts", "HostCheckError", "HostFacts", "check_hosts",
           "check_interfaces_free", "check_machines", "gather_facts", "host_env",
           "hostside_argv", "local_commit", "pinned_packages", "shares_folder"]

RANKS_PER_HOST = 1  # host i of the scenario runs rank i (bench.net.placement)


class HostCheckError(ValueError):
    """One or more hosts cannot run the sweep; the message names each with its reasons."""


@dataclass(frozen=True)
class HostFacts:
    """What `hostside facts` and `git rev-parse` said on one host (None: it did not
    answer; `error` says why)."""

    facts: dict[str, Any] | None
    commit: str | None
    error: str | None = None
    # its copy of each plug-in, by source (aqsgd.compress.plugins.host_copies)
    plugins: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def addr(self) -> str:
        return self.facts["interface"]["addr"]

    @property
    def mtu(self) -> int:
        return self.facts["interface"]["mtu"]

    def to_dict(self) -> dict:
        return {"facts": self.facts, "commit": self.commit, "error": self.error,
                "plugins": self.plugins}


def pinned_packages() -> list[str]:
    """The names of the suite's pinned dependencies (pyproject.toml)."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    return [dep.split("==")[0].strip() for dep in project["dependencies"]]


def local_commit() -> str | None:
    done = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"],
                          capture_output=True, text=True, check=False)
    return done.stdout.strip() or None


def _local_versions(names: list[str]) -> dict[str, str | None]:
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def host_env(h: HostEntry) -> list[str]:
    """`env` running a command in the suite's checkout on h, importing that checkout."""
    return ["env", "-C", h.suite, f"PYTHONPATH={h.suite}"]


def hostside_argv(h: HostEntry, *args: str) -> list[str]:
    """`python -P -m bench.launch.ssh.hostside ARGS` on h, in its checkout of the suite."""
    return [*host_env(h), *python_argv(h.python, "-m", "bench.launch.ssh.hostside", *args)]


def gather_facts(remote: Remote, needs_netem: bool, plugins: Sequence[Plugin] = ()
                 ) -> list[HostFacts]:
    """HostFacts of every host of `remote`, one after the other; with `plugins`, each
    host's copy of them too."""
    out = []
    for i, h in enumerate(remote.hosts):
        try:
            remote.connect(i)
        except HostKeyUnknown as err:
            out.append(HostFacts(None, None, messages.unknown_host_key(h, str(err))))
            continue
        except HostUnreachable as err:
            out.append(HostFacts(None, None, f"does not answer over SSH ({err})"))
            continue
        args = ["facts", "--interface", h.interface, "--packages", *pinned_packages()]
        done = remote.run(i, hostside_argv(h, *args, *(["--netem"] if needs_netem else [])),
                          check=False)
        if done.returncode != 0:
            out.append(HostFacts(None, None, _why_no_facts(remote, i, h, done.returncode,
                                                           done.stderr or done.stdout)))
            continue
        commit = remote.run(i, ["git", "-C", h.suite, "rev-parse", "HEAD"], check=False)
        out.append(HostFacts(json.loads(done.stdout), commit.stdout.strip() or None,
                             plugins=_plugin_copies(remote, i, h, plugins)))
    return out


def _why_no_facts(remote: Remote, i: int, h: HostEntry, code: int, said: str) -> str:
    """Why `hostside facts` failed on host i: its `python=` does not run, is another
    Python (too old for -P, say), or runs but cannot run the suite's checkout."""
    bare = remote.run(i, [*host_env(h), h.python, "-c", messages.PYTHON_VERSION], check=False)
    return messages.no_facts(h, code, said, bare.returncode, bare.stdout.strip()
                             or bare.stderr, _python_version())


def _plugin_copies(remote: Remote, i: int, h: HostEntry, plugins: Sequence[Plugin]
                   ) -> dict[str, dict[str, str]]:
    """Host i's copy of each plug-in, loaded by its checkout's Python as a worker would."""
    if not plugins:
        return {}
    sources = [p.source for p in plugins]
    done = remote.run(i, [*host_env(h), *python_argv(h.python, "-m", "aqsgd.compress.plugins",
                                                     *sources)], check=False)
    if done.returncode != 0:
        why = (f"loading them failed (exit {done.returncode}): "
               f"{done.stderr.strip()[-500:] or done.stdout.strip()[-500:]}")
        return {source: {"error": why} for source in sources}
    return json.loads(done.stdout)


def _reasons(h: HostEntry, f: HostFacts, here: dict[str, Any], *, shaping: bool,
             use_gpus: bool, plugins: Sequence[Plugin]) -> list[str]:
    if f.facts is None:
        return [f.error or "no facts"]
    d, why = f.facts, []
    dev = d["interface"]
    if not dev["exists"]:
        why.append(f"has no interface {h.interface}")
    elif dev["addr"] is None:
        why.append(f"interface {h.interface} has no IPv4 address")
    if d["python"] != here["python"]:
        why.append(messages.python_differs(h, d["python"], here["python"]))
    why += messages.packages_differ(d["packages"], here["packages"])
    if f.commit != here["commit"]:
        why.append(f"suite commit {f.commit} at {h.suite}, here {here['commit']}")
    if shaping:
        if not d["root"]:
            why.append("not root (shaping runs tc)")
        if not d["tc"]:
            why.append("no tc (iproute2)")
    if use_gpus and d["gpus"] < RANKS_PER_HOST:
        why.append(f"{d['gpus']} GPUs for {RANKS_PER_HOST} rank(s)")
    if plugins:  # imported here: aqsgd imports torch, which state.py's teardown never needs
        from aqsgd.compress.plugins import copy_problems

        why += copy_problems(plugins, f.plugins)
    return why


def _foreign(root_qdisc: str | None) -> bool:
    # "qdisc KIND HANDLE root ...": the kernel's own default has handle 0:
    return bool(root_qdisc) and root_qdisc.split()[2:3] != ["0:"]


def check_interfaces_free(remote: Remote) -> None:
    """Raise HostCheckError naming every host whose interface has a root qdisc that is
    not the kernel's default: the launcher never replaces one. Run when the killed runs
    of this state dir have been removed (bench.launch.lifecycle), just before shaping."""
    problems = []
    for i, h in enumerate(remote.hosts):
        root = remote.run(i, ["tc", "qdisc", "show", "dev", h.interface, "root"]).stdout
        if _foreign(root.strip()):
            problems.append(f"{h.name}: {h.interface} already has a root qdisc of its own "
                            f"({root.strip()}); the launcher never replaces one")
    if problems:
        raise HostCheckError("ssh launcher: hosts that cannot be shaped:\n  "
                             + "\n  ".join(problems))


def check_hosts(hosts: tuple[HostEntry, ...], facts: list[HostFacts], *, shaping: bool,
                gpus: bool | None, plugins: Sequence[Plugin] = (),
                more: Sequence[list[str]] = ()) -> bool:
    """Raise HostCheckError naming every host that cannot take part (see module doc).
    `gpus`: True: every host needs a GPU per rank; False: none are used; None: GPUs when
    every host has them (all or none: ranks on CPU and on GPU would mix gloo and NCCL).
    `plugins`: the plug-ins the cells run (facts from gather_facts with the same).
    `more`: further reasons per host, found otherwise (check_machines's SFTP session).
    Returns whether the ranks use GPUs."""
    names = pinned_packages()
    here = {"python": _python_version(), "packages": _local_versions(names),
            "commit": local_commit()}
    counts = [f.facts["gpus"] for f in facts if f.facts is not None]
    use_gpus = bool(gpus) if gpus is not None else bool(counts) and min(counts) > 0
    more = list(more) or [[] for _ in hosts]
    problems = [f"{h.name}: {'; '.join(why)}"
                for h, f, extra in zip(hosts, facts, more, strict=True)
                if (why := _reasons(h, f, here, shaping=shaping, use_gpus=use_gpus,
                                    plugins=plugins) + extra)]
    if gpus is None and counts and 0 < max(counts) and min(counts) == 0:
        problems.append(f"GPUs differ between hosts ({counts}): every rank must run on the "
                        f"same kind of device")
    if problems:
        raise HostCheckError("ssh launcher: hosts that cannot run this sweep (nothing was "
                             "changed on any host):\n  " + "\n  ".join(problems))
    return use_gpus


def shares_folder(remote: Remote, folder: Path, ask: Sequence[bool] | None = None
                  ) -> list[bool]:
    """Whether each host of `remote` sees `folder` (or, before it exists, its nearest
    existing parent) as the same files as this machine: a marker file with a random
    token written here and read back at the same path over SSH (why a token and not
    device and inode: docs/multihost.md, "Shared file systems"). The marker is removed
    afterwards; a host that cannot read it does not share, nor one not in `ask` (None:
    every host; False: one that did not answer, not contacted)."""
    ask = [True] * len(remote.hosts) if ask is None else list(ask)
    anchor = next(p for p in (folder.resolve(), *folder.resolve().parents) if p.is_dir())
    token = secrets.token_hex(16)
    marker = anchor / f".aqsgd-fs-check-{token[:12]}"
    atomic_write_text(marker, token)
    try:
        return [asked and remote.run(i, ["cat", "--", str(marker)], check=False
                                     ).stdout.strip() == token
                for i, asked in enumerate(ask)]
    finally:
        marker.unlink(missing_ok=True)


@dataclass(frozen=True)
class CheckedHosts:
    """What the checks found on a hostfile's first machines, in hostfile order: their
    facts, whether the ranks use GPUs, and whether each sees the results folder as this
    machine's files (then nothing is copied to or from it)."""

    facts: tuple[HostFacts, ...]
    use_gpus: bool
    shares_results: tuple[bool, ...]


def check_machines(remote: Remote, *, needs_netem: bool, shaping: bool, gpus: bool | None,
                   results_dir: Path | None, plugins: Sequence[Plugin] = ()) -> CheckedHosts:
    """Every host of `remote` checked (gather_facts, check_hosts: HostCheckError naming
    each that fails), and whether it shares `results_dir` (None: nothing is mirrored); a
    host that does not must open an SFTP session."""
    facts = gather_facts(remote, needs_netem=needs_netem, plugins=plugins)
    answered = [f.facts is not None for f in facts]
    shared = ([False] * len(remote.hosts) if results_dir is None
              else shares_folder(remote, results_dir, answered))
    sftp = [[] if not ok or results_dir is None or same else _sftp_reasons(remote, i)
            for i, (ok, same) in enumerate(zip(answered, shared, strict=True))]
    use_gpus = check_hosts(remote.hosts, facts, shaping=shaping, gpus=gpus, plugins=plugins,
                           more=sftp)
    return CheckedHosts(tuple(facts), use_gpus, tuple(shared))


def _sftp_reasons(remote: Remote, i: int) -> list[str]:
    """[] when host i opens an SFTP session, else why not."""
    try:
        remote.open_sftp(i)
    except NoSftp as err:
        return [messages.no_sftp(str(err))]
    return []


def _python_version() -> str:
    return platform.python_version()
