"""`python -m bench chaos`: a sweep of real workers on the netns launcher, run as `bench
sweep` would run it, with faults injected at random but seeded times; then a check
that every cell is complete and correct or failed with its reason, that no finished
cell was lost or corrupted, and that nothing is left running or shaped.

    python -m bench chaos --size smoke --seed 1 --out results/chaos   # 12 cells
    make chaos

Three harness runs share a results folder on a small tmpfs: the first meets a worker
killed, a link down for longer than the cell's timeout and its own kill -9; between
runs two finished cells' files are cut short; the second meets a full results folder;
the third completes the rest. Writes OUT/chaos.md (the table) and OUT/chaos.json; exit
0 when every check holds, 1 otherwise. The faults and the guarantees:
docs/robustness.md.
"""

from __future__ import annotations

import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from bench import REPO_ROOT
from bench.harness.chaos_check import After, Event, check_sweep_after, digests, write_report
from bench.harness.chaos_faults import (
    LinkDown,
    RunWatch,
    fill_disk,
    free_disk,
    kill_worker,
    leftovers,
    wait_until_gone,
    worker_pids,
)
from bench.harness.meta import cell_dir_name
from bench.harness.modes import parse_mode
from bench.harness.preflight import load_checked_sweep
from bench.harness.run import pending_cells, run_sweep
from bench.harness.sweep import SweepSpec, Workload
from bench.launch.choice import choose_launcher
from bench.launch.process import SAFE_PATH_ENV, python_argv
from bench.results.files import ResultFileError, read_record

__all__ = ["SIZES", "ChaosSize", "register", "run_chaos"]

# After a harness is killed: its workers must be gone within this, its links restored
# within LINKS_GONE_S (issue 30's contract for every launcher).
PROCESSES_GONE_S = 10.0
LINKS_GONE_S = 30.0


@dataclass(frozen=True)
class ChaosSize:
    """The sweep the faults hit: modes x seeds cells of `steps` measured steps, 2 stages
    on 10 Mbit/s links (a rate the probe finds within its 10% on a loaded machine). A
    cell's timeout is `timeout_factor` x the wall time of a warm-up cell on this machine
    now, at least `min_timeout_s` (a loaded machine would time out healthy cells)."""

    modes: tuple[str, ...]
    seeds: int
    steps: int
    min_timeout_s: float = 30.0
    timeout_factor: float = 4.0
    tmpfs_mib: int = 64  # the results folder's size: small enough to fill in a moment

    def workload(self, timeout_s: float) -> dict:
        # dist_timeout_s: the harness's timeout, not the workers' own, ends a cell whose
        # link is down
        return {"stages": 2, "steps": self.steps, "train_samples": 64, "eval_samples": 0,
                "init_from": None, "timeout_s": timeout_s, "dist_timeout_s": 2 * timeout_s}

    def sweep_file(self, timeout_s: float) -> dict:
        return {"name": "chaos", "description": "the chaos sweep (bench.harness.chaos)",
                "scenarios": ["10mbps"], "modes": list(self.modes),
                "seeds": list(range(1, self.seeds + 1)), "workload": self.workload(timeout_s)}


SIZES = {"smoke": ChaosSize(("fp32", "aqsgd:2/4", "directq:2/4"), seeds=4, steps=2),
         "default": ChaosSize(("fp32", "aqsgd:2/4", "directq:2/4", "tahquant:2/4"),
                              seeds=6, steps=4)}


class ChaosError(RuntimeError):
    """The driver could not inject a fault (the harness ended first, a cell never
    started): the message says which and where its log is."""


@dataclass
class Harness:
    """One `python -m bench sweep` run (the harness under test), its log and start."""

    number: int
    proc: subprocess.Popen
    log: Path
    started_unix: float
    order: list[str] = field(default_factory=list)  # the cells it will run, in order

    def alive(self) -> bool:
        return self.proc.poll() is None


class Driver:
    """The faults of one chaos sweep, in order, on the clock of its start."""

    def __init__(self, out: Path, size: ChaosSize, seed: int, echo) -> None:
        self.out, self.size, self.echo = out, size, echo
        self.rng = random.Random(seed)
        self.results = out / "results"
        self.sweep_path = out / "chaos.yaml"
        self.events: list[Event] = []
        self.runs: list[Harness] = []
        self.t0 = time.monotonic()
        self.timeout_s = size.min_timeout_s  # a cell's, set from the warm-up
        self.watch = RunWatch(self.results)
        self.choice = choose_launcher("netns")

    def at(self) -> float:
        return round(time.monotonic() - self.t0, 1)

    def event(self, **kw) -> Event:
        ev = Event(at_s=self.at(), **kw)
        self.events.append(ev)
        self.echo(f"[{ev.at_s:6.1f} s] {ev.fault} (run {ev.run}, {ev.cell}): {ev.recorded}"
                  + (f"; left: {ev.left}" if ev.left else ""))
        return ev

    # ------------------------------------------------------------ harness runs
    def start(self, number: int) -> Harness:
        spec = load_checked_sweep(self.sweep_path)
        order = [cell_dir_name(c, self.choice)
                 for c in pending_cells(spec, self.results, self.choice)]
        log = self.out / f"harness-{number}.log"
        argv = python_argv(sys.executable, "-m", "bench", "sweep", str(self.sweep_path),
                           "--out", str(self.results), "--launcher", "netns", "--quiet")
        with open(log, "wb") as f:
            proc = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=f, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True,
                                    env=_helper_env())
        self.echo(f"[{self.at():6.1f} s] harness run {number} started (pid {proc.pid}): "
                  f"{len(order)} cells to run; log {log}")
        self.runs.append(Harness(number, proc, log, time.time(), order))
        return self.runs[-1]

    def workers_of(self, run: Harness, cell: str, ranks: int = 2) -> None:
        """Wait until every rank of `cell` runs in this harness run."""
        deadline = time.monotonic() + 300
        while len(worker_pids(self.results / cell, since_unix=run.started_unix)) < ranks:
            if not run.alive() or time.monotonic() > deadline:
                raise ChaosError(f"cell {cell} never ran its {ranks} workers in harness run "
                                 f"{run.number} (see {run.log})")
            time.sleep(0.1)

    def recorded(self, cell: str, run: Harness, wait_s: float) -> str:
        """What the cell's meta.json says once this run wrote it (waits up to wait_s)."""
        path = self.results / cell / "meta.json"
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if path.is_file() and path.stat().st_mtime >= run.started_unix:
                break
            if not run.alive():
                break
            time.sleep(0.1)
        try:
            record = read_record(self.results / cell)
        except ResultFileError as err:
            return f"unreadable meta.json: {err}"
        if record is None or path.stat().st_mtime < run.started_unix:
            return "nothing (no meta.json from this run)"
        reason = "" if record.failure is None else record.failure.reason
        return record.status + (f": {reason}" if reason else "")

    def workers_left(self, cell: str) -> str:
        """'N of its workers running' (the run goes on: its hosts stay up)."""
        return f"{len(worker_pids(self.results / cell))} of its workers running"

    def finish(self, run: Harness, timeout_s: float) -> int:
        try:
            return run.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            run.proc.kill()
            raise ChaosError(f"harness run {run.number} still ran after {timeout_s:.0f} s: "
                             f"killed (see {run.log})") from None

    # ------------------------------------------------------------------ faults
    def worker_kill(self, run: Harness, cell: str) -> None:
        self.workers_of(run, cell)
        time.sleep(self.rng.uniform(0.5, 2.0))
        rank = self.rng.randrange(2)
        pid = kill_worker(self.results / cell, rank)
        ev = self.event(fault=f"worker killed (kill -9 of rank {rank}, pid {pid})",
                        run=run.number, cell=cell, recorded="")
        ev.recorded = self.recorded(cell, run, wait_s=120)
        ev.left = self.workers_left(cell)

    def link_down(self, run: Harness, cell: str) -> None:
        self.workers_of(run, cell)
        time.sleep(self.rng.uniform(0.5, 2.0))
        host = self.rng.randrange(2)
        down_at = time.monotonic()
        link = LinkDown.of(self.watch, host)
        ev = self.event(fault=f"link down (ip -n {link.namespace} link set {link.device} down)",
                        run=run.number, cell=cell, recorded="")
        ev.recorded = self.recorded(cell, run, wait_s=self.timeout_s + 120)
        # down for longer than the cell's timeout (counted from its workers' start)
        time.sleep(max(0.0, down_at + self.timeout_s + 5 - time.monotonic()))
        link.restore()
        ev.down_s = round(time.monotonic() - down_at, 1)
        ev.recorded += f" (link down {ev.down_s} s, cell timeout {self.timeout_s:g} s)"
        ev.left = self.workers_left(cell) + "; the link up again (the driver)"

    def harness_kill(self, run: Harness, cell: str) -> None:
        self.workers_of(run, cell)
        time.sleep(self.rng.uniform(0.5, 2.0))
        os.kill(run.proc.pid, signal.SIGKILL)
        run.proc.wait()
        ev = self.event(fault=f"harness killed (kill -9 of pid {run.proc.pid})",
                        run=run.number, cell=cell, recorded="")
        first, late, gone = wait_until_gone(self.results, self.watch,
                                            processes_s=PROCESSES_GONE_S, links_s=LINKS_GONE_S)
        ev.recorded = self.recorded(cell, run, wait_s=0)
        ev.left = (f"at once {first.text()}; {late.text()} after {PROCESSES_GONE_S:g} s "
                   f"(processes) / {LINKS_GONE_S:g} s (links), before any cleanup")
        ev.gone = gone
        ev.left_detail = {"at_once": first.to_dict(), "at_deadline": late.to_dict()}

    def truncate(self, cells: list[str], name: str) -> str:
        cell = self.rng.choice(cells)
        path = self.results / cell / name
        size = path.stat().st_size
        cut = int(size * self.rng.uniform(0.3, 0.8))
        os.truncate(path, cut)
        self.event(fault=f"{name} truncated between runs ({size} -> {cut} bytes)",
                   run=0, cell=cell, recorded="")
        return cell

    def disk_full(self, run: Harness, cell: str) -> None:
        self.workers_of(run, cell)
        time.sleep(self.rng.uniform(0.5, 2.0))
        filled = fill_disk(self.results)
        ev = self.event(fault=f"results folder full ({filled >> 10} KiB filler on its "
                              f"{self.size.tmpfs_mib} MiB tmpfs)",
                        run=run.number, cell=cell, recorded="")
        code = self.finish(run, timeout_s=self.timeout_s + 180)
        last = [line for line in run.log.read_text(errors="replace").splitlines() if line]
        ev.recorded = (f"{self.recorded(cell, run, wait_s=0)}; harness exit {code}: "
                       f"{last[-1] if last else ''}")
        ev.left = leftovers(self.results, self.watch).text()
        free_disk(self.results)


def _helper_env() -> dict[str, str]:
    """The environment of the harness runs and cleanups it starts: this checkout on their
    path, the current folder not (Note [safe path], bench.launch.process)."""
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT), **SAFE_PATH_ENV}


def _head_commit() -> str:
    return subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"],
                          capture_output=True, text=True).stdout.strip()


def _ok_cells(results: Path, names: list[str]) -> list[str]:
    ok = []
    for name in names:
        try:
            record = read_record(results / name)
        except ResultFileError:
            continue
        if record is not None and record.ok:
            ok.append(name)
    return ok


def _play(d: Driver) -> tuple[list[Harness], dict[str, str], list[str], int, str]:
    """The three harness runs and their faults: (runs, digests of the cells finished
    before the second run, HEAD at each run, the last run's exit code, what it left)."""
    commits = [_head_commit()]
    first = d.start(1)
    order = first.order
    # a cell between each two faults of the first run: two finished cells to cut after it
    kill_at = d.rng.randint(0, 1)
    down_at = d.rng.randint(kill_at + 2, kill_at + 3)
    harness_at = d.rng.randint(down_at + 2, down_at + 3)
    d.worker_kill(first, order[kill_at])
    d.link_down(first, order[down_at])
    d.harness_kill(first, order[harness_at])
    ok = _ok_cells(d.results, order[:harness_at])
    if len(ok) < 2:
        raise ChaosError(f"{len(ok)} cell(s) finished before the harness was killed, 2 are "
                         f"cut: the others failed (see {first.log})")
    cut = [d.truncate(ok, "metrics.csv")]
    cut.append(d.truncate([n for n in ok if n not in cut], "meta.json"))
    finished = {n: digests(d.results / n) for n in _ok_cells(d.results, order) if n not in cut}
    commits.append(_head_commit())
    second = d.start(2)
    d.disk_full(second, second.order[d.rng.randint(1, 2)])
    said = second.log.read_text(errors="replace").splitlines()
    for ev in [e for e in d.events if e.run == 0]:  # the cut files: what run 2 said
        ev.recorded = next((line for line in said
                            if line.startswith(f"measure {ev.cell} again")), "nothing said")
    commits.append(_head_commit())
    third = d.start(3)
    code = d.finish(third, timeout_s=(d.timeout_s + 60) * len(third.order) + 300)
    left = leftovers(d.results, d.watch).text()
    ok = len(_ok_cells(d.results, order))
    d.event(fault="resumed sweep to its end", run=3, cell=f"{len(third.order)} cells run",
            recorded=f"harness exit {code}; {ok} of {len(order)} cells ok", left=left)
    return [first, second, third], finished, commits, code, left


def _warm_up(size: ChaosSize, out: Path, echo) -> float:
    """A cell of the sweep's workload on the local launcher, twice: the first builds what
    a fresh clone builds on first use (tokenizer, token windows, the fused kernels), the
    second's wall time is what a cell takes on this machine now. Returns that time."""
    workload = Workload(**size.workload(timeout_s=600.0))
    warm = SweepSpec("chaos-warm-up", ("loopback",), (parse_mode(size.modes[1]),), workload)
    for _ in range(2):
        outcome = run_sweep(warm, out, launcher="local", fresh=True, quiet=True,
                            echo=lambda line: None)[0]
        if outcome.status != "ok":
            raise ChaosError(f"the warm-up cell failed ({outcome.reason}): see {out}")
    echo(f"warm-up cell on the local launcher: {outcome.wall_s:.1f} s")
    return outcome.wall_s


def _release(d: Driver, results: Path, echo) -> None:
    """After the checks (or a ChaosError): the harness runs this driver started stopped,
    what their state files still name removed (`python -m bench.launch cleanup`, by
    name), the tmpfs unmounted."""
    for run in d.runs:  # alive only after a ChaosError: SIGTERM tears its hosts down
        if run.alive():
            run.proc.terminate()
            try:
                run.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                run.proc.kill()
                run.proc.wait()
    subprocess.run(python_argv(sys.executable, "-m", "bench.launch", "cleanup",
                               "--all-recorded", "--state-dir", str(results / ".launcher")),
                   cwd=REPO_ROOT, check=True, capture_output=True, env=_helper_env())
    for _ in range(20):  # a process just killed may hold a file there for a moment
        if subprocess.run(["umount", str(results)], capture_output=True).returncode == 0:
            return
        time.sleep(0.5)
    subprocess.run(["umount", "--lazy", str(results)], check=True)
    echo(f"{results}: still busy after 10 s: unmounted lazily")


def run_chaos(out: Path, size: ChaosSize, seed: int, *, strict: bool = False,
              echo=print) -> int:
    """The chaos sweep into `out` (module doc); 0 when every check held, else 1.
    `strict`: a killed harness must leave nothing running or shaped after
    PROCESSES_GONE_S / LINKS_GONE_S (without it, what it left is recorded only)."""
    results = out / "results"
    if results.is_mount():
        raise ValueError(f"--out {out}: {results} is still mounted (an earlier chaos sweep "
                         f"was killed): umount {results}")
    if results.exists():
        shutil.rmtree(results)
    results.mkdir(parents=True)
    source = f"aqsgd-chaos-{secrets.token_hex(3)}"  # the tmpfs's own name in the mount table
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size.tmpfs_mib}m", source,
                    str(results)], check=True)
    d = Driver(out, size, seed, echo)
    kept = out / "results-kept"
    try:
        cell_s = _warm_up(size, out / "warm-up", echo)
        d.timeout_s = max(size.min_timeout_s, round(size.timeout_factor * cell_s))
        d.sweep_path.write_text(yaml.safe_dump(size.sweep_file(d.timeout_s), sort_keys=False))
        d.t0 = time.monotonic()
        d.watch.start()
        runs, finished, commits, code, left = _play(d)
        after = After(spec=load_checked_sweep(d.sweep_path), results=results, choice=d.choice,
                      events=d.events, finished_before=finished, commits=commits,
                      logs=[r.log for r in runs], final_code=code, final_left=left,
                      timeout_s=d.timeout_s, strict=strict)
        problems = check_sweep_after(after)
        if kept.exists():
            shutil.rmtree(kept)
        shutil.copytree(results, kept, ignore=shutil.ignore_patterns(".launcher"))
    finally:
        d.watch.stop()
        _release(d, results, echo)
    header = (f"seed {seed}, {len(size.modes) * size.seeds} cells, cell timeout "
              f"{d.timeout_s:g} s ({size.timeout_factor:g} x the warm-up cell's); "
              f"{len(d.events)} events in {d.at():.0f} s; results kept in {kept}")
    echo(write_report(out, d.events, problems, header))
    return 0 if not problems else 1


def register(sub) -> None:
    """Add `chaos` to the subparsers `sub` of `python -m bench`."""
    p = sub.add_parser("chaos", help="a netns sweep with faults injected, then checked",
                       description="Run a sweep of real workers on the netns launcher while "
                                   "killing workers and the harness, taking a link down, "
                                   "cutting result files and filling the results folder; "
                                   "then check every cell and what was left (root).")
    p.add_argument("--size", choices=sorted(SIZES), default="smoke",
                   help="smoke: 12 cells (12 min on 2 cores at a load of 15-20); default: 24 cells "
                        "(default: smoke)")
    p.add_argument("--seed", type=int, default=1,
                   help="seed of which cells the faults hit and when (default: 1)")
    p.add_argument("--out", type=Path, default=REPO_ROOT / "results" / "chaos",
                   help="the table, logs and a copy of the results (default results/chaos)")
    p.add_argument("--strict", action="store_true",
                   help="fail when a killed harness leaves workers after 10 s or links "
                        "shaped after 30 s (default: record them only)")
    p.set_defaults(func=lambda args: run_chaos(args.out, SIZES[args.size], args.seed,
                                               strict=args.strict))
