"""Commands and files on the hostfile's hosts over SSH (asyncssh), for synchronous code.

    with Remote(hostfile.hosts) as remote:
        out = remote.run(0, ["tc", "qdisc", "show", "dev", "eth0"])  # RemoteResult
        remote.run_all(1, argvs)                     # each must exit 0 (RemoteCommandError)
        remote.put(0, local_file, remote_path)       # SFTP
        remote.get_tree(0, remote_dir, local_dir)    # SFTP, every file below remote_dir
        remote.open_sftp(0)                          # NoSftp unless its sshd offers SFTP

One connection per host, opened on first use and kept; all of them driven by one event
loop in a thread of this object, so the launcher's synchronous code calls plain
methods. A command is an argv list, quoted for the remote shell by shlex.join (never a
string built by hand). Connections carry keepalives (KEEPALIVE_INTERVAL_S x
KEEPALIVE_COUNT_MAX): a host that stops answering fails every call within that time,
as HostUnreachable naming the host, instead of hanging; a host whose key is not in
known_hosts as HostKeyUnknown (a HostUnreachable).

Note [dependency warnings]: asyncssh touches cryptography's DSA names when it is
imported, and each touch warns (CryptographyDeprecationWarning, ten lines on stderr of
every process that imports it, rank logs and meta.json's failure.log_tail included).
The filters below, set before any import of asyncssh (this module is the one path to
it: relay.py imports it after this module), drop the deprecation warnings raised from
asyncssh's own modules and nothing else: they are its maintainers' to act on, not a
benchmark user's.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import threading
import warnings
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.launch.hostfile import HostEntry

__all__ = ["CONNECT_TIMEOUT_S", "HostKeyUnknown", "HostUnreachable", "NoSftp", "Remote",
           "RemoteCommandError", "RemoteResult", "connect_options", "get_tree_async"]

# Note [dependency warnings] (module doc); `module` is matched against the module that
# raised the warning (CryptographyDeprecationWarning is a UserWarning: the message says it)
warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"asyncssh(\.|$)")
warnings.filterwarnings("ignore", message=r".* is deprecated", module=r"asyncssh(\.|$)")

CONNECT_TIMEOUT_S = 15.0
KEEPALIVE_INTERVAL_S = 2.0
KEEPALIVE_COUNT_MAX = 3  # a silent host is given up after about 6 s
COMMAND_TIMEOUT_S = 120.0


class HostUnreachable(RuntimeError):
    """A host that does not answer (connect, authentication, or a lost connection)."""


class HostKeyUnknown(HostUnreachable):
    """A host whose key is not in the known_hosts file (or differs from the one there)."""


class NoSftp(RuntimeError):
    """A host whose sshd refuses the sftp subsystem."""


@dataclass(frozen=True)
class RemoteResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


class RemoteCommandError(RuntimeError):
    """A command on a host exited non-zero; names the host, the command and its stderr."""

    def __init__(self, host: str, result: RemoteResult):
        self.host, self.result = host, result
        super().__init__(f"on {host}: command failed (exit {result.returncode}): "
                         f"{shlex.join(result.argv)}\nstderr: "
                         f"{result.stderr.strip() or '(empty)'}")


def connect_options(h: HostEntry) -> dict[str, Any]:
    """asyncssh.connect's keywords for host `h`."""
    kw: dict[str, Any] = {"host": h.host, "port": h.port, "connect_timeout": CONNECT_TIMEOUT_S,
                          "keepalive_interval": KEEPALIVE_INTERVAL_S,
                          "keepalive_count_max": KEEPALIVE_COUNT_MAX}
    if h.user is not None:
        kw["username"] = h.user
    if h.identity is not None:
        kw["client_keys"] = [h.identity]
    if h.known_hosts is not None:
        kw["known_hosts"] = h.known_hosts
    return kw


def unreachable(h: HostEntry, err: BaseException) -> HostUnreachable:
    return HostUnreachable(f"host {h.name}: {type(err).__name__}: {err}".rstrip(": "))


class Remote:
    """Connections to `hosts` (host i = hosts[i]); a context manager closing them all."""

    def __init__(self, hosts: Sequence[HostEntry]):
        self.hosts = tuple(hosts)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="ssh-event-loop")
        self._thread.start()
        self._conns: dict[int, Any] = {}
        self.history: list[tuple[int, tuple[str, ...]]] = []  # (host, argv) run so far

    def __enter__(self) -> Remote:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, coro, timeout_s: float | None = None):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    async def _conn(self, i: int):
        import asyncssh

        conn = self._conns.get(i)
        if conn is None:
            h = self.hosts[i]
            try:
                conn = await asyncssh.connect(**connect_options(h))
            except asyncssh.HostKeyNotVerifiable as err:
                raise HostKeyUnknown(f"host {h.name}: {type(err).__name__}: {err}") from None
            except (OSError, asyncssh.Error, asyncio.TimeoutError) as err:
                raise unreachable(h, err) from None
            self._conns[i] = conn
        return conn

    def connect(self, i: int) -> None:
        """Open host i's connection now (HostUnreachable when it does not answer)."""
        self._call(self._conn(i))

    async def _run(self, i: int, argv: tuple[str, ...], timeout_s: float) -> RemoteResult:
        import asyncssh

        conn = await self._conn(i)
        try:
            done = await conn.run(shlex.join(argv), check=False, timeout=timeout_s)
        except asyncssh.TimeoutError as err:
            return RemoteResult(argv, -1, str(err.stdout or ""),
                                f"timed out after {timeout_s:g} s")
        except (OSError, asyncssh.Error) as err:
            self._conns.pop(i, None)
            raise unreachable(self.hosts[i], err) from None
        code = done.exit_status if done.exit_status is not None else -1
        return RemoteResult(argv, code, str(done.stdout or ""), str(done.stderr or ""))

    def run(self, i: int, argv: Sequence[str], check: bool = True,
            timeout_s: float = COMMAND_TIMEOUT_S) -> RemoteResult:
        """argv on host i; with `check`, RemoteCommandError unless it exits 0."""
        argv = tuple(argv)
        if isinstance(argv, str) or not all(isinstance(a, str) for a in argv):
            raise TypeError(f"argv must be a sequence of str, got {argv!r}")
        self.history.append((i, argv))
        result = self._call(self._run(i, argv, timeout_s))
        if check and result.returncode != 0:
            raise RemoteCommandError(self.hosts[i].name, result)
        return result

    def run_all(self, i: int, argvs: Iterable[Sequence[str]]) -> None:
        for argv in argvs:
            self.run(i, argv)

    async def _sftp(self, i: int, op: str, *args):
        import asyncssh

        conn = await self._conn(i)
        try:
            async with conn.start_sftp_client() as sftp:
                if op == "put":
                    local, remote = args
                    await sftp.makedirs(str(Path(remote).parent), exist_ok=True)
                    await sftp.put(str(local), str(remote), preserve=True)
                    return None
                remote_dir, local_dir = args
                if not await sftp.isdir(str(remote_dir)):
                    return []
                return await get_tree_async(sftp, str(remote_dir), Path(local_dir))
        except (OSError, asyncssh.Error) as err:
            if isinstance(err, asyncssh.SFTPError):
                raise RuntimeError(f"host {self.hosts[i].name}: SFTP {op}: {err}") from None
            self._conns.pop(i, None)
            raise unreachable(self.hosts[i], err) from None

    def put(self, i: int, local: Path | str, remote: str) -> None:
        """Copy one local file to `remote` on host i (its folders made as needed)."""
        self._call(self._sftp(i, "put", local, remote))

    def get_tree(self, i: int, remote_dir: str, local_dir: Path | str) -> list[Path]:
        """Copy every file below `remote_dir` on host i into local_dir (same relative
        paths); returns the local files written ([] when remote_dir does not exist)."""
        return self._call(self._sftp(i, "get", remote_dir, local_dir))

    async def _open_sftp(self, i: int) -> None:
        import asyncssh

        conn = await self._conn(i)
        try:
            async with conn.start_sftp_client():
                pass
        except asyncssh.ChannelOpenError as err:  # the session's subsystem request refused
            raise NoSftp(f"host {self.hosts[i].name}: {type(err).__name__}: {err}") from None
        except (OSError, asyncssh.Error) as err:
            self._conns.pop(i, None)
            raise unreachable(self.hosts[i], err) from None

    def open_sftp(self, i: int) -> None:
        """Open and close an SFTP session on host i: NoSftp where its sshd offers none."""
        self._call(self._open_sftp(i))

    def close(self) -> None:
        async def _close():
            for conn in self._conns.values():
                conn.close()
            for conn in self._conns.values():
                await conn.wait_closed()
            self._conns.clear()

        if self._loop.is_running():
            try:
                self._call(_close(), timeout_s=CONNECT_TIMEOUT_S)
            except TimeoutError:
                pass  # a dead host's connection: dropped with the loop
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(CONNECT_TIMEOUT_S)


async def get_tree_async(sftp, remote_dir: str, local_dir: Path,
                         skip: Collection[str] = ()) -> list[Path]:
    """Every file below remote_dir but those named in `skip`, through an open SFTP
    client, into local_dir; each written under a temporary name and renamed over its
    target, so that two hosts bringing back one file never leave it half written."""
    written = []
    for entry in await sftp.readdir(remote_dir):
        if entry.filename in (".", ".."):
            continue
        remote = f"{remote_dir}/{entry.filename}"
        local = local_dir / entry.filename
        if await sftp.isdir(remote):
            written += await get_tree_async(sftp, remote, local, skip)
        elif remote not in skip:
            local.parent.mkdir(parents=True, exist_ok=True)
            part = local.with_name(f".{local.name}.part-{os.getpid()}")
            await sftp.get(remote, str(part), preserve=True)
            os.replace(part, local)
            written.append(local)
    return written
