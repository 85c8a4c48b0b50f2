"""The hostfile: which real machines a run uses, and how to reach them (the SSH
launcher's hosts, and the multi-host export's).

    hosts = load_hostfile("hosts.txt").hosts      # tuple[HostEntry], one per machine

The DeepSpeed / pdsh convention, one host a line (`#` starts a comment), its options as
`key=value` after the name, or YAML (a *.yaml / *.yml file: `hosts: [{host: ..., ...}]`):

    gpu-a slots=1 interface=eth0 user=root identity=~/.ssh/bench
    gpu-b slots=1 interface=eth0 user=root port=2222 identity=~/.ssh/bench

Keys (only `host` required): slots (the ranks the machine runs: the scenario's
layout.ranks_per_machine), user, port, interface, identity, known_hosts, python,
suite; their defaults: docs/multihost.md. Both forms are validated by specfile
(`HostfileEntry`): an error names the file, the field (`hosts[1].port`) and the value; a
text line that is not `key=value` is named by its line number.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench import REPO_ROOT
from specfile import SPEC_CONFIG, SpecError, raising, read_file, validate

__all__ = ["DEFAULT_INTERFACE", "HostEntry", "Hostfile", "HostfileError", "load_hostfile"]

DEFAULT_INTERFACE = "eth0"
MAX_SLOTS = 64
INT_KEYS = ("slots", "port")  # the text form's values that are integers


class HostfileError(ValueError):
    """A hostfile that cannot be read or does not validate; names file, field and value."""


@dataclass(frozen=True)
class HostEntry:
    """One real host (see module doc for each key)."""

    host: str
    slots: int = 1
    user: str | None = None
    port: int = 22
    interface: str = DEFAULT_INTERFACE
    identity: str | None = None
    known_hosts: str | None = None
    python: str = sys.executable
    suite: str = str(REPO_ROOT)

    def __post_init__(self) -> None:
        if not self.host.strip() or any(c.isspace() for c in self.host):
            raise SpecError.at("host", "a host name or address without spaces", self.host)
        if not 1 <= self.slots <= MAX_SLOTS:
            raise SpecError.at("slots", f"an integer in [1, {MAX_SLOTS}]", self.slots)
        if not 1 <= self.port <= 65535:
            raise SpecError.at("port", "a TCP port in [1, 65535]", self.port)
        if not self.interface or "/" in self.interface or len(self.interface) > 15:
            raise SpecError.at("interface", "a network device name (1-15 characters, no /)",
                               self.interface)
        for key in ("python", "suite"):
            if not Path(getattr(self, key)).is_absolute():
                raise SpecError.at(key, "an absolute path on that host", getattr(self, key))

    @property
    def name(self) -> str:
        """How logs and errors name the host: user@host:port as given."""
        who = f"{self.user}@" if self.user else ""
        return f"{who}{self.host}" + ("" if self.port == 22 else f":{self.port}")

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "slots": self.slots, "user": self.user,
                "port": self.port, "interface": self.interface, "identity": self.identity,
                "known_hosts": self.known_hosts, "python": self.python, "suite": self.suite}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HostEntry:
        return cls(**d)


@dataclass(frozen=True)
class Hostfile:
    """A whole hostfile: its hosts in order (host i of the run is hosts[i])."""

    __pydantic_config__ = SPEC_CONFIG

    hosts: tuple[HostEntry, ...]

    def __post_init__(self) -> None:
        if not self.hosts:
            raise SpecError.at("hosts", "at least one host", list(self.hosts))
        seen: dict[tuple[str, int], int] = {}
        for i, h in enumerate(self.hosts):
            key = (h.host, h.port)
            if key in seen:
                raise SpecError.at(f"hosts[{i}].host", f"a host not listed before (hosts"
                                   f"[{seen[key]}] is {h.host} port {h.port} already)",
                                   h.host)
            seen[key] = i


def _text_hosts(text: str, path: Path) -> dict:
    """The pdsh / DeepSpeed form as the YAML form's mapping (values still text, but
    `slots` and `port` as integers where they are digits, so that specfile names a bad
    one as it is written)."""
    hosts = []
    for number, line in enumerate(text.splitlines(), start=1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        entry: dict[str, Any] = {"host": words[0]}
        for word in words[1:]:
            key, eq, value = word.partition("=")
            if not eq or not key or not value:
                raise HostfileError(f"{path}: line {number}: expected key=value after the "
                                    f"host name, got {word!r}")
            if key in entry:
                raise HostfileError(f"{path}: line {number}: key {key!r} given twice")
            entry[key] = int(value) if key in INT_KEYS and value.isdigit() else value
        hosts.append(entry)
    return {"hosts": hosts}


def _expand_user(h: HostEntry) -> HostEntry:
    """`~` in a local file name (identity, known_hosts) means this user's home."""
    return replace(h, **{k: str(Path(v).expanduser()) for k in ("identity", "known_hosts")
                         if (v := getattr(h, k)) is not None})


def load_hostfile(path: str | Path) -> Hostfile:
    """Read and validate a hostfile in either form (see module doc); HostfileError names
    the file, the field and the value."""
    path = Path(path)
    if path.suffix in (".yaml", ".yml", ".json"):
        raw = read_file(path, error=HostfileError, what="hostfile")
    else:
        try:
            raw = _text_hosts(path.read_text(encoding="utf-8"), path)
        except (OSError, UnicodeDecodeError) as e:
            raise HostfileError(f"cannot read hostfile {path}: {e}") from None
    with raising(HostfileError, source=str(path)):
        hostfile = validate(Hostfile, raw)
    return Hostfile(tuple(_expand_user(h) for h in hostfile.hosts))
