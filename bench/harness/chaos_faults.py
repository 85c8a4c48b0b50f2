"""The chaos sweep's hands and eyes: the faults it injects into a running sweep, and what
it finds left of a run (bench.harness.chaos drives them).

    watch = RunWatch(results); watch.start()   # every state file the sweep's launchers write
    kill_worker(results / cell, rank=1)         # kill -9 of that rank's worker
    down = LinkDown.of(watch, host=1)           # `ip -n P-h1 link set Ph1 down`
    down.restore()                              # ... and up again
    fill_disk(results); free_disk(results)      # a full results folder (a tmpfs)
    left = leftovers(results, watch)            # Leftovers(processes, namespaces, qdiscs)

Everything is found by the names the run itself recorded (its state files under
RESULTS/.launcher, the cell's config path on a worker's command line), never by pattern.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench.launch.netns.names import TopologyNames
from bench.launch.process import ProcessIdentity

__all__ = ["FILLER", "LinkDown", "Leftovers", "RunWatch", "fill_disk", "free_disk",
           "kill_worker", "leftovers", "worker_pids"]

FILLER = ".chaos-filler"  # the file that fills the results folder
# qdiscs a device has without anyone shaping it
_DEFAULT_QDISCS = {"noqueue", "pfifo_fast", "fq_codel", "mq", "noop", "pfifo", "fq"}


class RunWatch:
    """Remembers every state file the sweep's launchers write under RESULTS/.launcher
    (polled on a thread; a launcher removes its file at teardown, and a killed one's is
    removed by the next run's bring-up), so that what a run named can be checked after."""

    def __init__(self, results: Path, period_s: float = 0.2) -> None:
        self.state_dir = results / ".launcher"
        self.period_s = period_s
        self.states: dict[str, dict] = {}  # prefix -> its last readable state file
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def start(self) -> RunWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def scan(self) -> None:
        for path in sorted(self.state_dir.glob("*.json")) if self.state_dir.is_dir() else []:
            try:
                state = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue  # being replaced, or gone: the next scan reads it
            if isinstance(state, dict) and "prefix" in state and "namespaces" in state:
                self.states[state["prefix"]] = state

    def _poll(self) -> None:
        while not self._stop.wait(self.period_s):
            self.scan()

    def newest(self) -> dict:
        """The state file of the run started last (its launcher_process start time)."""
        self.scan()
        if not self.states:
            raise RuntimeError(f"{self.state_dir}: no netns state file seen yet")
        return max(self.states.values(), key=lambda s: s["created_utc"])


def worker_pids(cell_dir: Path, rank: int | None = None, since_unix: float = 0.0) -> list[int]:
    """Pids of the workers of the cell in `cell_dir` (their --config is its config.yaml),
    of one rank or of all, started at or after `since_unix`."""
    config = str(cell_dir / "config.yaml")
    pids = []
    for proc in psutil.process_iter(["pid", "cmdline", "create_time"]):
        argv = proc.info["cmdline"] or []
        if config not in argv or "aqsgd.train.worker" not in argv or \
                proc.info["create_time"] < since_unix:
            continue
        if rank is None or argv[argv.index("--rank") + 1] == str(rank):
            pids.append(proc.info["pid"])
    return pids


def kill_worker(cell_dir: Path, rank: int) -> int:
    """kill -9 of the worker of `rank` of the cell in `cell_dir`; its pid."""
    pids = worker_pids(cell_dir, rank)
    if len(pids) != 1:
        raise RuntimeError(f"{cell_dir}: expected one worker of rank {rank}, found {pids}")
    os.kill(pids[0], signal.SIGKILL)
    return pids[0]


def _ip(*argv: str) -> str:
    return subprocess.run(["ip", *argv], check=True, capture_output=True, text=True).stdout


@dataclass(frozen=True)
class LinkDown:
    """Host `host`'s veth, set down inside its own namespace (the run's names)."""

    namespace: str
    device: str

    @classmethod
    def of(cls, watch: RunWatch, host: int) -> LinkDown:
        state = watch.newest()
        names = TopologyNames(state["prefix"], len(state["namespaces"]) - 2)
        link = cls(names.host_ns(host), names.host_veth(host))
        if [link.namespace, link.device] not in state["devices"]:
            raise RuntimeError(f"{watch.state_dir}: run {state['prefix']} records no device "
                               f"{link.device} in {link.namespace}")
        _ip("-n", link.namespace, "link", "set", link.device, "down")
        return link

    def restore(self) -> None:
        """Up again, unless its namespace is gone (the run tore it down)."""
        if self.namespace in _ip("netns", "list").split():
            _ip("-n", self.namespace, "link", "set", self.device, "up")


def fill_disk(results: Path) -> int:
    """Fill the file system of `results` with RESULTS/FILLER until it is full; bytes
    written."""
    written = 0
    with open(results / FILLER, "wb", buffering=0) as f:
        for size in (1 << 20, 4096):  # whole MiB, then the last pages
            block = b"\0" * size
            while True:
                try:
                    written += f.write(block)
                except OSError as err:
                    if err.errno != errno.ENOSPC:
                        raise
                    break
    return written


def free_disk(results: Path) -> None:
    (results / FILLER).unlink(missing_ok=True)


@dataclass
class Leftovers:
    """What is left of a sweep's runs: processes (its workers, the processes its state
    files record), namespaces its state files name, non-default qdiscs on their devices."""

    processes: list[str] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    qdiscs: list[str] = field(default_factory=list)

    @property
    def none(self) -> bool:
        return not (self.processes or self.namespaces or self.qdiscs)

    def text(self) -> str:
        return (f"{len(self.processes)} processes, {len(self.namespaces)} namespaces, "
                f"{len(self.qdiscs)} qdiscs")

    def to_dict(self) -> dict:
        return {"processes": self.processes, "namespaces": self.namespaces,
                "qdiscs": self.qdiscs}


def _qdiscs(namespace: str, device: str) -> list[str]:
    shown = subprocess.run(["tc", "-n", namespace, "qdisc", "show", "dev", device],
                           capture_output=True, text=True)
    if shown.returncode != 0:
        return []  # the device is gone, and its qdiscs with it
    return [f"{namespace}/{device}: {line.strip()}" for line in shown.stdout.splitlines()
            if line.split()[1:2] and line.split()[1] not in _DEFAULT_QDISCS]


def leftovers(results: Path, watch: RunWatch) -> Leftovers:
    """What of the sweep writing `results` still runs or is shaped now (module doc)."""
    watch.scan()
    prefix = str(results) + os.sep
    found = Leftovers()
    for proc in psutil.process_iter(["pid", "cmdline"]):
        argv = proc.info["cmdline"] or []
        if "aqsgd.train.worker" in argv and any(a.startswith(prefix) for a in argv):
            found.processes.append(f"pid {proc.info['pid']}: {' '.join(argv)[:120]}")
    for state in watch.states.values():
        for p in state.get("processes", []):  # absent before the first start
            ident = ProcessIdentity.from_dict(p)
            text = f"pid {ident.pid} (recorded by {state['prefix']})"
            if ident.is_running() and not any(t.startswith(f"pid {ident.pid}:")
                                               for t in found.processes):
                found.processes.append(text)
    present = set(_ip("netns", "list").split())
    for state in watch.states.values():
        alive = [ns for ns in state["namespaces"] if ns in present]
        found.namespaces += alive
        for ns, dev in state["devices"]:
            if ns in alive:
                found.qdiscs += _qdiscs(ns, dev)
    return found


def wait_until_gone(results: Path, watch: RunWatch, *, processes_s: float,
                    links_s: float) -> tuple[Leftovers, Leftovers, dict]:
    """Watch a killed run's remains without cleaning anything: (what was there at once,
    what was still there at the deadlines: processes at `processes_s`, namespaces and
    qdiscs at `links_s`, {"processes_s"/"links_s": seconds until none, or None})."""
    start = time.monotonic()
    first = leftovers(results, watch)
    gone: dict[str, float | None] = {"processes_s": None, "links_s": None}
    last = first
    while True:
        elapsed = time.monotonic() - start
        last = leftovers(results, watch)
        if not last.processes and gone["processes_s"] is None:
            gone["processes_s"] = round(elapsed, 1)
        if not (last.namespaces or last.qdiscs) and gone["links_s"] is None:
            gone["links_s"] = round(elapsed, 1)
        if (gone["processes_s"] is not None or elapsed >= processes_s) and \
                (gone["links_s"] is not None or elapsed >= links_s):
            break
        time.sleep(0.5)
    at_deadline = Leftovers(processes=[] if gone["processes_s"] is not None else last.processes,
                            namespaces=[] if gone["links_s"] is not None else last.namespaces,
                            qdiscs=[] if gone["links_s"] is not None else last.qdiscs)
    return first, at_deadline, gone
