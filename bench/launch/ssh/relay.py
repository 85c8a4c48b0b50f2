"""One command on one host, as a local process: what SshLauncher.spawn returns.

    python -m bench.launch.ssh.relay --host JSON --label h1 [--raw] \
        [--put LOCAL REMOTE]... [--get REMOTE LOCAL]... -- ARGV...

The harness supervises workers as local processes (subprocess.Popen: poll, SIGTERM to
the group, exit status), so the SSH launcher starts this relay locally per remote
command. It connects to the host (asyncssh, keepalives as bench/launch/ssh/remote.py),
copies each `--put` file there (SFTP, under a temporary name renamed over the target:
a reader there never sees it half written), runs ARGV (the launcher wraps it in
`hostside tied`, so that it stops when this channel closes), streams its output line by
line with the prefix `[LABEL] ` (`--raw`: as it comes, for the probe's JSON), and exits
with its exit status, after copying each `--get` folder back but for the files it put
(SFTP; also after a failure, so the logs and metrics of a failed rank are there to
read). A host sharing this machine's results folder gets neither (docs/multihost.md).

SIGTERM (the harness stopping the rank) closes the command's input: `tied` stops the
command's process group on the host, and its exit status comes back here. A host that
stops answering (connection lost, keepalives unanswered) ends the relay with exit
status HOST_LOST and a last line naming the host, so the harness's supervision sees a
failed rank at once instead of a hang.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import shlex
import signal
import sys
from pathlib import Path

from bench.launch.hostfile import HostEntry
from bench.launch.process import python_argv
from bench.launch.ssh.remote import connect_options, get_tree_async

__all__ = ["HOST_LOST", "main", "relay_argv"]

HOST_LOST = 255  # what `ssh` itself exits with when the connection fails
STOP_WAIT_S = 15.0  # after SIGTERM, how long the host has to report the exit status


def relay_argv(python: str, host: HostEntry, label: str, argv: list[str], *, raw: bool = False,
               put: list[tuple[str, str]] = (), get: list[tuple[str, str]] = ()) -> list[str]:
    """The local command line running argv on `host` through this module."""
    out = python_argv(python, "-m", "bench.launch.ssh.relay", "--host",
                      json.dumps(host.to_dict()), "--label", label)
    if raw:
        out.append("--raw")
    for a, b in put:
        out += ["--put", a, b]
    for a, b in get:
        out += ["--get", a, b]
    return [*out, "--", *argv]


def _say(label: str, text: str) -> None:
    sys.stdout.write(f"[{label}] {text}\n")
    sys.stdout.flush()


async def _put_whole(sftp, local: str, remote: str) -> None:
    """local copied to `remote` under a temporary name, then renamed over it (POSIX
    rename, OpenSSH's extension): hosts that share a folder among themselves and put
    the same file at once never truncate it under a reader."""
    await sftp.makedirs(str(Path(remote).parent), exist_ok=True)
    part = f"{remote}.part-{secrets.token_hex(4)}"
    await sftp.put(local, part, preserve=True)
    await sftp.posix_rename(part, remote)


async def _pump(stream, out, prefix: str) -> None:
    async for line in stream:
        if not line:
            continue
        out.write(prefix + line if line.endswith("\n") else f"{prefix}{line}\n")
        out.flush()


async def _relay(args: argparse.Namespace) -> int:
    import asyncssh

    host = HostEntry.from_dict(json.loads(args.host))
    label = args.label
    prefix = "" if args.raw else f"[{label}] "
    try:
        conn = await asyncssh.connect(**connect_options(host))
    except (OSError, asyncssh.Error, asyncio.TimeoutError) as err:
        _say(label, f"host {host.name} unreachable: {type(err).__name__}: {err}")
        return HOST_LOST
    try:
        async with conn:
            if args.put:
                async with conn.start_sftp_client() as sftp:
                    for local, remote in args.put:
                        await _put_whole(sftp, local, remote)
            proc = await conn.create_process(shlex.join(args.argv), encoding="utf-8",
                                             errors="replace")
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(signal.SIGTERM, proc.stdin.write_eof)
            loop.add_signal_handler(signal.SIGINT, proc.stdin.write_eof)
            await asyncio.gather(_pump(proc.stdout, sys.stdout, prefix),
                                 _pump(proc.stderr, sys.stderr if args.raw else sys.stdout,
                                       prefix))
            await proc.wait()
            code = proc.exit_status
            if code is None or code < 0:  # killed by a signal on the host, or no status
                sig = proc.exit_signal[0] if proc.exit_signal else None
                code = 128 + signal.Signals[f"SIG{sig}"].value if sig else HOST_LOST
            if args.get:
                async with conn.start_sftp_client() as sftp:
                    for remote, local in args.get:
                        if await sftp.isdir(remote):
                            await get_tree_async(sftp, remote, Path(local),
                                                 skip={r for _, r in args.put})
            return code
    except (OSError, asyncssh.Error) as err:
        _say(label, f"host {host.name} dropped: {type(err).__name__}: {err}")
        return HOST_LOST


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.launch.ssh.relay",
                                description=__doc__.split("\n")[0])
    p.add_argument("--host", required=True, help="JSON: the hostfile entry")
    p.add_argument("--label", required=True, help="the prefix of every output line")
    p.add_argument("--raw", action="store_true", help="no prefix; stderr to stderr")
    p.add_argument("--put", nargs=2, action="append", default=[], metavar=("LOCAL", "REMOTE"))
    p.add_argument("--get", nargs=2, action="append", default=[], metavar=("REMOTE", "LOCAL"))
    p.add_argument("argv", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    args.argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not args.argv:
        p.error("no command after --")
    return args


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(_relay(_parse(argv)))


if __name__ == "__main__":
    sys.exit(main())
