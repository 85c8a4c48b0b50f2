"""What the SSH launcher runs on each host, through the suite's own checkout there.

    python -m bench.launch.ssh.hostside facts --interface eth0 --packages torch numpy
    python -m bench.launch.ssh.hostside record --dir D --state JSON   # before changing anything
    python -m bench.launch.ssh.hostside tied --dir D -- ARGV...       # ARGV, tied to stdin
    python -m bench.launch.ssh.hostside teardown --dir D [--commands JSON]

`facts` prints one JSON object (interpreter and package versions, the interface's IPv4
address, MTU and root qdisc, root, tc, netem, GPUs). The host keeps its own record of a
run in D = HOST_RECORD_ROOT/PREFIX-hI: `state.json` (the removal commands) and one file
in `procs/` per running `tied`. `tied` starts ARGV and stops its whole process tree
(proctree.py) when its standard input closes; `teardown` stops the recorded trees, runs
the removal commands (each once; one already gone is skipped), deletes D and prints what
it removed as JSON. Why the tree: docs/multihost.md. Imports the standard library,
psutil (through proctree, for `tied` and `teardown` only) and bench.launch.process:
`facts` runs under any Python 3.11, so that a host's wrong `python=` is named by the
checks (its version, its packages) instead of failing on an import.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
from importlib import metadata
from pathlib import Path

from bench.launch.process import STOP_GRACE_S, TEARDOWN_GRACE_S, ProcessIdentity

__all__ = ["HOST_RECORD_ROOT", "facts", "main", "teardown"]

HOST_RECORD_ROOT = Path("/run/aqsgd-bench/ssh")
GONE = ("No such file or directory", "Cannot find device", "Invalid handle",
        "Cannot delete qdisc with handle of zero")


def _root_qdisc(dev: str) -> str | None:
    out = subprocess.run(["tc", "qdisc", "show", "dev", dev, "root"], capture_output=True,
                         text=True, check=False).stdout.strip()
    return out or None


def _netem() -> bool:
    """A netem qdisc in a throw-away network namespace (nothing of the host touched)."""
    if shutil.which("unshare") is None or shutil.which("tc") is None:
        return False
    done = subprocess.run(["unshare", "--net", "sh", "-c",
                           "ip link set lo up && tc qdisc add dev lo root netem delay 1ms"],
                          capture_output=True, check=False)
    return done.returncode == 0


def _gpus() -> int:
    if shutil.which("nvidia-smi") is None:
        return 0
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
    return sum(line.startswith("GPU ") for line in out.stdout.splitlines())


def facts(interface: str, packages: list[str], want_netem: bool) -> dict:
    """This host as the launcher's checks see it (see module doc)."""
    versions = {}
    for name in packages:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    sysfs = Path("/sys/class/net") / interface
    dev: dict = {"exists": sysfs.exists()}
    if dev["exists"]:
        out = subprocess.run(["ip", "-4", "-o", "addr", "show", "dev", interface],
                             capture_output=True, text=True, check=False).stdout.split()
        dev["addr"] = out[out.index("inet") + 1].split("/")[0] if "inet" in out else None
        dev["mtu"] = int((sysfs / "mtu").read_text())
        dev["root_qdisc"] = _root_qdisc(interface) if shutil.which("tc") else None
    return {"python": platform.python_version(), "machine": platform.machine(),
            "executable": sys.executable, "packages": versions, "interface": dev,
            "root": os.geteuid() == 0, "tc": shutil.which("tc") is not None,
            "netem": _netem() if want_netem else None, "gpus": _gpus(),
            "hostname": platform.node()}


def _record(directory: Path, state: dict) -> None:
    (directory / "procs").mkdir(parents=True, exist_ok=True)
    tmp = directory / "state.json.tmp"
    tmp.write_text(json.dumps(state, indent=1))
    tmp.replace(directory / "state.json")


def tied(directory: Path, argv: list[str]) -> None:
    """Run argv (see module doc), then exit this process with its exit status (128 + N
    for a signal N)."""
    from bench.launch.ssh.proctree import become_subreaper, stop_tree  # psutil: module doc

    become_subreaper()  # orphans below stay below: the tree stays whole (module doc)
    me = ProcessIdentity.of(os.getpid())
    mark = directory / "procs" / f"{me.pid}.json"
    mark.parent.mkdir(parents=True, exist_ok=True)
    mark.write_text(json.dumps(me.to_dict()))  # before the child: a kill finds it
    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)

    def watch_stdin() -> None:
        while sys.stdin.buffer.read(4096):
            pass
        stop_tree(me, STOP_GRACE_S)  # the channel closed: stop the command, all of it

    threading.Thread(target=watch_stdin, daemon=True).start()
    code = child.wait()
    stop_tree(me, TEARDOWN_GRACE_S)  # what ARGV left running below (or the watch stops)
    mark.unlink(missing_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    # not a normal exit: the stdin thread blocks in a read that interpreter shutdown
    # would wait for (CPython aborts on that lock)
    os._exit(128 - code if code < 0 else code)


def teardown(directory: Path, commands: list[list[str]]) -> list[str]:
    """What D records (see module doc), removed; returns what was removed."""
    from bench.launch.ssh.proctree import stop_tree  # psutil: module doc

    removed = []
    procs = sorted((directory / "procs").glob("*.json")) if directory.is_dir() else []
    for p in procs:
        ident = ProcessIdentity.from_dict(json.loads(p.read_text()))
        removed += [f"process {i.pid}"
                    for i in stop_tree(ident, grace_s=0.0, include_root=True)]
    state_file = directory / "state.json"
    recorded = json.loads(state_file.read_text())["removal"] if state_file.exists() else []
    for argv in dict.fromkeys(tuple(a) for a in [*recorded, *commands]):
        done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
        if done.returncode == 0:
            removed.append(" ".join(argv))
        elif not any(g in done.stderr for g in GONE):
            raise RuntimeError(f"{' '.join(argv)} failed (exit {done.returncode}): "
                               f"{done.stderr.strip()}")
    if directory.is_dir():
        shutil.rmtree(directory)
        removed.append(f"record {directory}")
    return removed


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.launch.ssh.hostside",
                                description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    f = sub.add_parser("facts")
    f.add_argument("--interface", required=True)
    f.add_argument("--packages", nargs="*", default=[])
    f.add_argument("--netem", action="store_true", help="also try a netem qdisc")
    r = sub.add_parser("record")
    r.add_argument("--dir", type=Path, required=True)
    r.add_argument("--state", required=True, help="JSON: the run's record on this host")
    t = sub.add_parser("tied")
    t.add_argument("--dir", type=Path, required=True)
    t.add_argument("argv", nargs=argparse.REMAINDER)
    d = sub.add_parser("teardown")
    d.add_argument("--dir", type=Path, required=True)
    d.add_argument("--commands", default="[]", help="JSON: more removal commands")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.command == "facts":
        print(json.dumps(facts(args.interface, args.packages, args.netem)))
    elif args.command == "record":
        _record(args.dir, json.loads(args.state))
    elif args.command == "tied":
        command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
        tied(args.dir, command)
    else:
        print(json.dumps(teardown(args.dir, json.loads(args.commands))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
