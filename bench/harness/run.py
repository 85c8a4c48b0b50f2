"""Run cells: bring up a scenario's hosts, spawn one worker per rank, wait, and turn
the workers' JSONL into result files.

    python -m bench run --scenario 100mbps            # the default grid
    python -m bench sweep scenarios/sweeps/paper.yaml
    python -m bench sweep scenarios/sweeps/paper.yaml --dry-run   # cells, placement, time

One cell's life, bring-up to meta.json: `run_cell`; a sweep's, scenario by scenario under
its lock: `run_sweep`; what would run and how long it would take: `dry_run`,
`pending_cells`, `estimate_line`. How hosts, schedules and host-limited links are handled
while cells run: docs/architecture/harness.md, "Running cells".
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from bench import REPO_ROOT
from bench.harness.cells import run_config, write_run_config
from bench.harness.estimate import estimate_line
from bench.harness.lock import raise_if_full, sweep_lock
from bench.harness.memory import memory_line
from bench.harness.meta import cell_dir_name, expected_identity, meta_head
from bench.harness.outages import cell_timeout_s, outage_note, outages_applied, schedule_block
from bench.harness.outages import survivable as survivable_config
from bench.harness.prebuild import prepare_builds
from bench.harness.preflight import SweepPlan, check_sweep, on_hosts, refuse_unsupported
from bench.harness.progress import Progress
from bench.harness.sweep import CellSpec, SweepSpec
from bench.launch.base import Launcher
from bench.launch.choice import LauncherChoice, choose_launcher
from bench.launch.process import free_port, stop_all, wait_for_workers
from bench.launch.schedules import ScheduleFailed
from bench.net.placement import Placement
from bench.net.probe import ProbeRecord, format_table, host_limited_warning
from bench.net.scenario import NetworkScenario, load_scenario
from bench.report.tables import text_table
from bench.results.files import (
    ResultFileError,
    SchemaError,
    file_digests,
    last_error,
    log_tail,
    metrics_frame,
    provenance,
    read_record,
    reuse_refusal,
    write_csv,
    write_json,
)

__all__ = ["REPO_ROOT", "WORKER_CMD", "CellOutcome", "collect_metrics", "dry_run",
           "pending_cells", "refusals", "run_cell",
           "run_sweep", "sweep_listing"]

LOG_TAIL_LINES = 40
WORKER_CMD = (sys.executable, "-m", "aqsgd.train.worker")


@dataclass
class CellOutcome:
    name: str
    status: str  # ok | failed | skipped
    wall_s: float = 0.0
    reason: str = ""


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


# ------------------------------------------------------------ running a cell
def run_cell(cell: CellSpec, hosts: Launcher, cell_dir: Path, *, sweep: str,
             choice: LauncherChoice, scenario: NetworkScenario, probe: list[ProbeRecord],
             prov: dict, placement: Placement,
             worker_cmd: tuple[str, ...] = WORKER_CMD) -> CellOutcome:
    """Run one cell on brought-up hosts and write its result files
    (meta.json last, whatever happened)."""
    if cell_dir.exists():
        shutil.rmtree(cell_dir)  # an unfinished earlier attempt of this cell
    (cell_dir / "logs").mkdir(parents=True)
    started = time.time()
    meta = {
        **meta_head(cell, sweep, choice, scenario, probe, prov, placement,
                    mechanisms=hosts.mechanisms),
        "scenario": scenario.to_dict(),
        "launcher": {"choice": choice.name, "reason": choice.reason, **hosts.record()},
        "started_at": _now(),
    }
    failure = None
    procs: list[subprocess.Popen] = []
    config = None
    try:
        # a scenario with outages: a process-group timeout that survives them
        config = survivable_config(run_config(cell, cell_dir), scenario, hosts.n_hosts)
        meta["run_config"] = config.to_dict()
        config_path = write_run_config(config, cell_dir / "config.yaml")
        port = free_port()
        hosts.start_schedule()  # t = 0 of every link's schedule: the workers start now
        for rank in range(cell.world_size):  # rank r on the host its placement names
            host = placement.host_of(rank)
            argv = [*worker_cmd, "--config", str(config_path),
                    "--rank", str(rank), "--world-size", str(cell.world_size),
                    "--master-addr", str(hosts.addr(placement.host_of(0))),
                    "--master-port", str(port)]
            # TORCH_CPP_LOG_LEVEL: c10d's C++ warnings (in namespaces without name resolution,
            # "hostname of the client socket cannot be retrieved" on every rank) would head
            # each rank log; its errors still print. One set by the user wins.
            env = {"TORCH_CPP_LOG_LEVEL": "ERROR", **os.environ, "PYTHONPATH": str(REPO_ROOT),
                   "WORLD_SIZE": str(cell.world_size), **hosts.worker_env(host)}
            procs.append(hosts.spawn(host, argv, env, cell_dir / "logs" / f"rank{rank}.log"))
        failure = wait_for_workers(procs, cell_timeout_s(cell.workload.timeout_s, scenario,
                                                         hosts.n_hosts))
    except Exception as err:  # recorded in meta.json; the sweep goes on
        failure = {"rank": None, "returncode": None,
                   "reason": f"{type(err).__name__}: {err}"}
    finally:
        stop_all(procs)
        schedule_run, schedule_failed = _stop_schedule(hosts)
    if failure is None and schedule_failed:
        failure = {"rank": None, "returncode": None, "reason": schedule_failed}
    if failure is None:
        failure = collect_metrics(cell, cell_dir)
    if failure is None:  # meta.json vouches for them: a cut file is never counted done
        meta["files"] = file_digests(cell_dir)
    if failure is not None and failure["rank"] is not None and failure["returncode"]:
        # the worker's own last error line: the exception's message, its mode and plug-in
        error = last_error(log_tail(cell_dir / "logs" / f"rank{failure['rank']}.log",
                                    LOG_TAIL_LINES))
        failure["reason"] += f": {error}" if error else ""
    if failure is not None and config is not None:
        failure["reason"] += outage_note(outages_applied(schedule_run), config.dist.timeout_s)
    if failure is not None and failure["rank"] is not None:
        failure["log_tail"] = log_tail(cell_dir / "logs" / f"rank{failure['rank']}.log",
                                       LOG_TAIL_LINES)
        # every other rank that failed too (often in reaction to the first)
        failure["other_ranks"] = {
            str(r): {"returncode": p.returncode,
                     "log_tail": log_tail(cell_dir / "logs" / f"rank{r}.log", 20)}
            for r, p in enumerate(procs) if r != failure["rank"] and p.returncode != 0}
    wall_s = time.time() - started
    # again: the launcher's record now holds this cell's schedule run
    meta["launcher"] = {"choice": choice.name, "reason": choice.reason, **hosts.record()}
    if config is not None:
        block = schedule_block(config, scenario, hosts.n_hosts, schedule_run,
                               [cell_dir / "metrics" / f"rank{r}.jsonl"
                                for r in range(cell.world_size)])
        if block is not None:
            meta["schedule"] = block
    status = "ok" if failure is None else "failed"
    meta.update(status=status, failure=failure, wall_s=round(wall_s, 3), finished_at=_now())
    write_json(cell_dir / "meta.json", meta)
    return CellOutcome(cell_dir.name, status, wall_s,
                       "" if failure is None else failure["reason"])


def _stop_schedule(hosts: Launcher) -> tuple[dict | None, str]:
    """Stop the links' schedule: (its run record, '' or why a change failed)."""
    try:
        return hosts.stop_schedule(), ""
    except ScheduleFailed as err:
        return hosts.record().get("schedule", {}).get("run"), f"link schedule: {err}"


def collect_metrics(cell: CellSpec, cell_dir: Path) -> dict | None:
    """JSONL of every rank -> metrics.csv + peers.csv; a failure record if
    a rank left no metrics."""
    paths = [cell_dir / "metrics" / f"rank{r}.jsonl" for r in range(cell.world_size)]
    missing = [r for r, p in enumerate(paths) if not p.is_file()]
    if missing:
        return {"rank": missing[0], "returncode": 0,
                "reason": f"rank(s) {missing} exited 0 but wrote no metrics file"}
    metrics, peers = metrics_frame(paths, cell.name)
    write_csv(cell_dir / "peers.csv", peers)
    write_csv(cell_dir / "metrics.csv", metrics)
    return None


# -------------------------------------------------------------------- sweeps
def _fail_group(cells: list[CellSpec], sweep_dir: Path, sweep: str, choice: LauncherChoice,
                reason: str, prov: dict, placements: dict[str, Placement],
                scenario: NetworkScenario) -> list[CellOutcome]:
    """Record every cell of a scenario whose hosts never came up as failed (their
    `cell` block says nothing of the link: no rate, not shaped, shaping unknown)."""
    outcomes = []
    for cell in cells:
        cell_dir = sweep_dir / cell_dir_name(cell, choice)
        if cell_dir.exists():
            shutil.rmtree(cell_dir)
        write_json(cell_dir / "meta.json", {
            **meta_head(cell, sweep, choice, None, [], prov, placements[cell.name],
                        loaded=scenario),
            "status": "failed", "wall_s": 0.0,
            "failure": {"rank": None, "returncode": None, "reason": reason},
        })
        outcomes.append(CellOutcome(cell_dir.name, "failed", 0.0, reason))
    return outcomes


def _scenarios(spec: SweepSpec) -> dict[str, NetworkScenario]:
    return {name: load_scenario(name) for name in dict.fromkeys(c.scenario for c in spec.cells())}


def refusals(spec: SweepSpec, sweep_dir: Path, choice: LauncherChoice, *,
             git_commit: str | None = None,
             scenarios: dict[str, NetworkScenario] | None = None) -> dict[str, str]:
    """Per cell name of `spec`: '' when its finished result in `sweep_dir` may be reused
    by a run on `choice` at `git_commit` (default: this checkout's), else why not
    (bench.results.files.reuse_refusal; Note [cell identity], bench.harness.meta)."""
    commit = provenance(REPO_ROOT)["git"]["commit"] if git_commit is None else git_commit
    scenarios = _scenarios(spec) if scenarios is None else scenarios
    return {c.name: reuse_refusal(sweep_dir / cell_dir_name(c, choice),
                                  expected_identity(c, scenarios[c.scenario], choice, commit))
            for c in spec.cells()}


def pending_cells(spec: SweepSpec, sweep_dir: Path, choice: LauncherChoice, *,
                  fresh: bool = False, git_commit: str | None = None,
                  scenarios: dict[str, NetworkScenario] | None = None) -> list[CellSpec]:
    """The cells of `spec` that a run on `choice` into `sweep_dir` would run: all with
    `fresh`, else those without a finished result of the same identity (refusals)."""
    if fresh:
        return list(spec.cells())
    why = refusals(spec, sweep_dir, choice, git_commit=git_commit, scenarios=scenarios)
    return [c for c in spec.cells() if why[c.name]]


def schedule_line(cells: list[CellSpec]) -> str:
    """'schedule: gpipe, 4 micro-batches of 16 a step and replica' for the cells about to
    run on one placement, each distinct schedule and micro-batching once."""
    shown = dict.fromkeys(f"{c.workload.schedule}, {c.workload.num_micro_batches} "
                          f"micro-batches of {c.workload.micro_batch_size}" for c in cells)
    return f"schedule: {'; '.join(shown)} a step and replica"


def _cell_rows(spec: SweepSpec, cells: tuple[CellSpec, ...], choice: LauncherChoice,
               why: dict[str, str] | None) -> list[list[str]]:
    """Dry-run rows; `why` None: --fresh, every cell runs."""
    rows = []
    for c in cells:
        w = c.workload
        status = "run" if why is None or why[c.name] else "skip: " + _REUSED
        if why is not None and why[c.name] not in ("", "not measured yet"):
            status += f" (measured again: {why[c.name]})"
        rows.append([cell_dir_name(c, choice), c.scenario_name, str(c.mode),
                     f"{w.stages} x {w.replicas}", w.schedule, w.model or w.preset,
                     f"{w.total_steps} ({w.warmup_steps})",
                     f"{spec.timing.cell_s(c):.0f}" if spec.timing else "-", status])
    return rows


_REUSED = "finished earlier by this commit on this launcher and machine"


def dry_run(spec: SweepSpec, sweep_dir: Path, *, launcher: str = "auto", fresh: bool = False,
            echo: Callable[[str], None] = print, launcher_options: dict | None = None,
            check_hosts: bool = False) -> SweepPlan:
    """What run_sweep would do, with nothing done: the launcher it would choose, every
    cell (to run, or finished earlier), each placement the cells use and the time
    estimate. Checks what run_sweep checks (bad input raises the same); brings up no
    host, builds no checkpoint and writes no file (`sweep_dir` only read); `check_hosts`:
    the launcher's hosts checked as run_sweep checks them (preflight.on_hosts)."""
    plan = check_sweep(spec)
    choice = choose_launcher(launcher, plan.plugins, **(launcher_options or {}))
    refuse_unsupported(spec, plan, choice.name)
    plan, choice, checked = on_hosts(plan, choice, sweep_dir, contact=check_hosts)
    why = None if fresh else refusals(spec, sweep_dir, choice, scenarios=plan.scenarios)
    todo = [c for c in plan.cells if why is None or why[c.name]]
    echo(f"dry run of sweep {spec.name} into {sweep_dir}: nothing is brought up, "
         f"nothing is written")
    echo("\n".join([f"{'' if choice.shaped else 'WARNING: '}launcher {choice.name}: "
                    f"{choice.reason}", *checked]))
    echo(text_table(["cell", "scenario", "mode", "stages x replicas", "schedule", "preset",
                     "steps (warm-up)", "est. s", "status"],
                    _cell_rows(spec, plan.cells, choice, why)))
    shown = set()
    for cell in plan.cells:
        layout = (cell.scenario, cell.workload.stages, cell.workload.replicas)
        if layout not in shown:
            shown.add(layout)
            echo(plan.placements[cell.name].table())
    echo(estimate_line(spec, todo, sweep_dir, choice))
    echo(memory_line(spec, todo, choice))  # raises MemoryRefusal when it would not fit
    return plan


def sweep_listing(spec: SweepSpec, cells: list[CellSpec], sweep_dir: Path,
                  choice: LauncherChoice) -> dict:
    """sweep.json of a run on `choice`: the spec, and `cells`, the directories the
    readers take (bench.results.files.find_cells): this run's cells, and those of the
    same cells that another launcher measured into `sweep_dir` before (listed by the
    previous sweep.json, of the same spec key), so that a sweep's report shows every
    launcher's rows. A cell the spec no longer has, or has with another spec, is dropped."""
    mine = [cell_dir_name(c, choice) for c in cells]
    try:
        previous = json.loads((sweep_dir / "sweep.json").read_text(encoding="utf-8"))
        listed = [n for n in previous["cells"] if isinstance(n, str)]
    except (OSError, ValueError, KeyError, TypeError):
        listed = []  # none yet, or unreadable: only this run's cells
    keys = {c.name: c.key for c in cells}
    others = []
    for name in listed:
        try:
            record = read_record(sweep_dir / name)
        except ResultFileError as err:  # another schema: dropped; unreadable: kept, named
            if name not in mine and not isinstance(err, SchemaError):
                others.append(name)
            continue
        spec_name = None if record is None else record.cell.spec_name
        if name not in mine and spec_name in keys and record.spec_key == keys[spec_name]:
            others.append(name)
    return {"spec": dataclasses.asdict(spec), "cells": mine + others}


def run_sweep(spec: SweepSpec, sweep_dir: Path, *, launcher: str = "auto",
              fresh: bool = False, quiet: bool = False,
              echo: Callable[[str], None] = print,
              worker_cmd: tuple[str, ...] = WORKER_CMD,
              launcher_options: dict | None = None) -> list[CellOutcome]:
    """Run every unfinished cell of `spec` into `sweep_dir`; returns one
    outcome per cell (skipped ones included). Never raises for a cell that
    fails; raises for bad input (bench.harness.preflight.check_sweep: an unknown
    scenario, a cell that does not fit its hosts or its preset, ...) before anything
    runs. States the estimated time (estimate_line) before the first cell; the progress
    bar counts estimated seconds. `launcher_options`: the launcher's own (ssh: hostfile,
    shaping), for choose_launcher. The results directory is locked while the sweep runs
    (bench.harness.lock: a second sweep into it raises SweepLocked, a ValueError naming
    the holder)."""
    plan = check_sweep(spec)
    cells, scenarios, placements = list(plan.cells), plan.scenarios, plan.placements
    choice = choose_launcher(launcher, plan.plugins, **(launcher_options or {}))
    refuse_unsupported(spec, plan, choice.name)
    plan, choice, checked = on_hosts(plan, choice, sweep_dir)  # once, before anything
    placements = plan.placements
    tone = "" if choice.shaped else "WARNING: "
    echo("\n".join([f"{tone}launcher {choice.name}: {choice.reason}", *checked]))
    with sweep_lock(sweep_dir, echo):
        return _run_locked(spec, cells, scenarios, placements, sweep_dir, choice,
                           fresh=fresh, quiet=quiet, echo=echo, worker_cmd=worker_cmd)


def _run_locked(spec: SweepSpec, cells: list[CellSpec], scenarios: dict[str, NetworkScenario],
                placements: dict[str, Placement], sweep_dir: Path, choice: LauncherChoice, *,
                fresh: bool, quiet: bool, echo: Callable[[str], None],
                worker_cmd: tuple[str, ...]) -> list[CellOutcome]:
    """run_sweep's work, with the results directory locked."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    write_json(sweep_dir / "sweep.json", sweep_listing(spec, cells, sweep_dir, choice))
    prov = provenance(REPO_ROOT)
    why = refusals(spec, sweep_dir, choice, git_commit=prov["git"]["commit"],
                   scenarios=scenarios)
    todo = [c for c in cells if fresh or why[c.name]]
    outcomes = [CellOutcome(cell_dir_name(c, choice), "skipped", reason="finished earlier")
                for c in cells if c not in todo]
    for o in outcomes:
        echo(f"skip {o.name} ({_REUSED})")
    for c in todo:
        if why[c.name] not in ("", "not measured yet"):
            echo(f"measure {cell_dir_name(c, choice)} again: {why[c.name]}")
    echo(estimate_line(spec, todo, sweep_dir, choice))
    echo(memory_line(spec, todo, choice))  # raises MemoryRefusal when it would not fit
    builds = prepare_builds(todo, REPO_ROOT, echo)  # nothing is built inside a cell
    if builds:
        write_json(sweep_dir / "builds.json", [b.to_dict() for b in builds])
    weights = {c.name: spec.timing.cell_s(c) if spec.timing else 1.0 for c in todo}
    with Progress(sum(weights.values()), quiet) as bar:
        for name, group in itertools.groupby(todo, key=lambda c: c.scenario):
            outcomes.extend(_run_group(scenarios[name], list(group), sweep_dir, spec.name,
                                       choice, prov, bar, weights, placements, echo,
                                       worker_cmd))
    return outcomes


def _run_group(scenario: NetworkScenario, group: list[CellSpec], sweep_dir: Path, sweep: str,
               choice: LauncherChoice, prov: dict, bar: Progress, weights: dict[str, float],
               placements: dict[str, Placement], echo: Callable[[str], None],
               worker_cmd: tuple[str, ...]) -> list[CellOutcome]:
    """Bring up the hosts of one scenario once, probe exactly the links its cells'
    placements use, run its cells."""
    outcomes: list[CellOutcome] = []
    name = group[0].scenario
    n_hosts = max(c.world_size for c in group)
    widest = placements[max(group, key=lambda c: c.world_size).name]
    links = list(dict.fromkeys(link for c in group for link in placements[c.name].probe_links()))
    try:
        bar.describe(f"{name}: bringing up {n_hosts} hosts")
        with choice.factory(scenario, n_hosts, run_id=secrets.token_hex(3),
                            state_dir=sweep_dir / ".launcher") as hosts:
            echo(widest.table())
            echo(schedule_line(group))
            probe = hosts.probe(links=links)
            echo(f"link probe, scenario {name} (the links the placement uses):\n"
                 f"{format_table(probe)}")
            warning = host_limited_warning(probe)
            if warning:
                echo(f"{name}: {warning}")
            for cell in group:
                bar.describe(cell.name)
                outcome = run_cell(cell, hosts, sweep_dir / cell_dir_name(cell, choice),
                                   sweep=sweep,
                                   choice=choice, scenario=scenario, probe=probe,
                                   prov=prov, placement=placements[cell.name],
                                   worker_cmd=worker_cmd)
                outcomes.append(outcome)
                echo(f"{outcome.status:6s} {outcome.name} ({outcome.wall_s:.1f} s)"
                     + (f": {outcome.reason}" if outcome.reason else ""))
                bar.advance(cell.name, weights[cell.name])
    except Exception as err:  # hosts or probe failed: the group fails, the sweep goes on
        raise_if_full(err)  # nothing can be recorded: sweep_lock stops the sweep
        done = {o.name for o in outcomes}
        rest = [c for c in group if cell_dir_name(c, choice) not in done]
        reason = f"scenario {name}: {type(err).__name__}: {err}"
        echo(f"failed {name}: {reason}")
        outcomes.extend(_fail_group(rest, sweep_dir, sweep, choice, reason, prov, placements,
                                    scenario))
        for cell in rest:
            bar.advance(cell.name, weights[cell.name])
    return outcomes
