"""Run cells: resolve scenarios, pick a launcher, spawn one worker per rank,
wait, and turn the workers' JSONL into result files.

    python -m bench run --scenario 100mbps            # the default grid
    python -m bench sweep scenarios/sweeps/paper.yaml

Hosts are brought up once per scenario (all cells of that scenario share
them; the probe runs once), then each cell writes its RunConfig, starts
`python -m aqsgd.train.worker` on host i for rank i, waits with a timeout and
collects. A cell whose workers fail is recorded as failed (with the failing
rank's log tail) and the sweep goes on; the caller turns failures into a
non-zero exit code.

Launchers: `netns` (network namespaces with shaped links, needs root) and
`local` (unshaped processes on loopback); `auto` picks netns where it works. A
Docker launcher (one container per host) is future work: it is not offered.

A link that the probe finds host-limited (bench.net.probe.rate_verdict: the
machine cannot carry the scenario's rate even unshaped) does not stop the
scenario; a loud warning is printed and every cell of it records
`host_limited` and the lowest achieved rate in meta.json's `cell` block, which
the table, the report and the figures label.
"""

from __future__ import annotations

import dataclasses
import itertools
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

import yaml

from aqsgd.filecache import atomic_write_text
from bench.harness.sweep import CellSpec, SweepSpec
from bench.launch.choice import LauncherChoice, choose_launcher
from bench.launch.process import free_port, stop_all, wait_for_workers
from bench.net.probe import format_table, host_limited_warning
from bench.results.files import (
    SCHEMA_VERSION,
    is_finished,
    log_tail,
    metrics_frame,
    provenance,
    write_csv,
    write_json,
)

__all__ = [
    "REPO_ROOT",
    "SCENARIO_DIR",
    "UnknownScenarioError",
    "CellOutcome",
    "available_scenarios",
    "resolve_scenario",
    "scenario_record",
    "prepare_checkpoints",
    "build_run_config",
    "cell_identity",
    "collect_metrics",
    "write_run_config",
    "run_cell",
    "run_sweep",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
SCENARIO_DIR = REPO_ROOT / "scenarios"
LOG_TAIL_LINES = 40
WORKER_CMD = (sys.executable, "-m", "aqsgd.train.worker")


class UnknownScenarioError(ValueError):
    """A scenario name that matches no file in scenarios/."""


# ------------------------------------------------------------------ scenarios
def available_scenarios(scenario_dir: Path = SCENARIO_DIR) -> list[str]:
    from bench.net.scenario import available_scenarios as names  # owned by issue #5

    return names(Path(scenario_dir))


def resolve_scenario(name: str, scenario_dir: Path = SCENARIO_DIR):
    """`name` (a scenario name or a path to a scenario file) -> NetworkScenario.

    An unknown name raises UnknownScenarioError listing the available ones; a
    malformed file raises the scenario loader's own error (file, field, value).
    """
    from bench.net.scenario import load_scenario

    path = Path(name)
    known = available_scenarios(scenario_dir)
    if not (path.suffix in (".yaml", ".yml") and path.is_file()) and name not in known:
        raise UnknownScenarioError(
            f"unknown scenario {name!r}; available: {', '.join(known) or '(none)'} "
            f"(files in {scenario_dir})")
    return load_scenario(name, Path(scenario_dir))


def scenario_record(scenario) -> dict:
    """The scenario as plain data for meta.json (NetworkScenario.to_dict)."""
    return scenario.to_dict()


def _link_property(record: dict, key: str) -> float | None:
    """The scenario's default link value for `key` (rate_mbit, delay_ms);
    None when unset (rate_mbit None = an unshaped link)."""
    value = (record.get("link") or {}).get(key)
    return float(value) if value is not None else None


# ------------------------------------------------------------- worker config
def build_run_config(cell: CellSpec, output_dir: Path) -> dict:
    """The RunConfig tree (aqsgd/config.py) of one cell, as plain data."""
    w, m = cell.workload, cell.mode
    if m.name == "fp32":
        forward = {"mode": "none", "dtype": "fp32"}
        backward = {"mode": "none", "dtype": "fp32"}
    else:
        forward = {"mode": "aqsgd" if m.name.startswith("aqsgd") else "directq",
                   "bits": m.fw_bits, "warmup_epochs": w.warmup_epochs}
        backward = {"mode": "directq", "bits": m.bw_bits, "warmup_epochs": w.warmup_epochs}
    # QuantizedAdam averages exactly (and warms Adam up) for `freeze_after_steps`:
    # start compressing where the activation warm-up ends.
    grad = ({"mode": m.grad_mode, "bits": m.grad_bits,
             "freeze_after_steps": max(1, w.warmup_steps), "seed": w.seed}
            if m.compresses_dp else {"mode": "fp32"})
    config = {
        "model": {"preset": w.preset},
        "pipeline": {"stages": w.stages, "replicas": w.replicas,
                     "micro_batch_size": w.micro_batch_size,
                     "num_micro_batches": w.num_micro_batches, "schedule": "gpipe"},
        "forward": forward,
        "backward": backward,
        "grad": grad,
        "train": {"steps": w.total_steps, "lr": w.lr, "seed": w.seed, "threads": w.threads,
                  "eval_every": 0, "eval_batches": w.eval_batches, "init_from": w.init_from},
        # every evaluation micro-batch needs a full window of held-out samples
        "data": {"max_samples": w.train_samples,
                 "eval_samples": max(w.eval_samples, w.eval_batches * w.micro_batch_size)},
        "dist": {"timeout_s": w.dist_timeout_s},
        "output": {"dir": str(output_dir), "trace": False},
    }
    for path, value in w.overrides.items():
        section, key = path.split(".")
        config.setdefault(section, {})[key] = value
    return config


def write_run_config(config: dict, path: Path) -> Path:
    """Validate through aqsgd.train.config (errors name the key path), then write
    the YAML file that every rank of the cell reads."""
    from aqsgd.train.config import config_from_dict

    config_from_dict(config)
    return atomic_write_text(path, yaml.safe_dump(config, sort_keys=False))


def prepare_checkpoints(cells: list[CellSpec], echo: Callable[[str], None]) -> None:
    """Build (or find cached) the starting checkpoint of every preset the cells
    fine-tune from, once, before any worker starts: a worker building it
    itself would hold up its peers past their rendezvous timeout."""
    presets = sorted({c.workload.preset for c in cells if c.workload.init_from == "pretrained"})
    for preset in presets:
        echo(f"starting checkpoint for preset {preset} (built once, then cached in .cache/)")
        done = subprocess.run([sys.executable, "-m", "aqsgd.model.pretrain", "--preset", preset],
                              cwd=REPO_ROOT, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
            raise RuntimeError(f"building the starting checkpoint of preset {preset} "
                               f"failed (exit {done.returncode}):\n{tail}")
        lines = [line for line in done.stdout.splitlines() if "starting checkpoint" in line]
        echo(lines[-1] if lines else f"starting checkpoint for preset {preset} ready")


# ------------------------------------------------------------ running a cell
@dataclass
class CellOutcome:
    name: str
    status: str  # ok | failed | skipped
    wall_s: float = 0.0
    reason: str = ""


def cell_identity(cell: CellSpec, sweep: str, choice: LauncherChoice, scn_record: dict,
                  probe: list | None = None) -> dict:
    """meta.json's `cell` block: what the cell is, in flat columns for the loader.
    From the link probe: `host_limited` (a probed link could not reach its rate on
    this host) and `rate_mbit_achieved` (the lowest achieved rate of a shaped link)."""
    m = cell.mode
    shaped_links = [r for r in probe or [] if r.get("rate_mbit_configured") is not None]
    return {
        "name": cell.name, "sweep": sweep, "scenario": cell.scenario_name, "mode": m.name,
        "label": m.label, "fw_bits": m.fw_bits, "bw_bits": m.bw_bits,
        "grad_mode": m.grad_mode if m.compresses_dp else "fp32",
        "preset": cell.workload.preset, "stages": cell.workload.stages,
        "replicas": cell.workload.replicas, "launcher": choice.name,
        "shaped": choice.shaped and _link_property(scn_record, "rate_mbit") is not None,
        "rate_mbit": _link_property(scn_record, "rate_mbit"),
        "delay_ms": _link_property(scn_record, "delay_ms"),
        "host_limited": any(bool(r.get("host_limited")) for r in shaped_links),
        "rate_mbit_achieved": min((r["rate_mbit_achieved"] for r in shaped_links),
                                  default=None),
    }


def _meta_head(cell: CellSpec, sweep: str, choice: LauncherChoice, scn_record: dict,
               probe: list | None, prov: dict) -> dict:
    """The keys every meta.json starts with, whatever became of the cell."""
    return {"schema_version": SCHEMA_VERSION,
            "cell": cell_identity(cell, sweep, choice, scn_record, probe),
            "spec": cell.to_dict(), "spec_key": cell.key, "seed": cell.workload.seed,
            "provenance": prov}


def run_cell(cell: CellSpec, hosts, cell_dir: Path, *, sweep: str, choice: LauncherChoice,
             scn_record: dict, probe: list, prov: dict,
             worker_cmd: tuple[str, ...] = WORKER_CMD) -> CellOutcome:
    """Run one cell on brought-up hosts and write its result files
    (meta.json last, whatever happened)."""
    if cell_dir.exists():
        shutil.rmtree(cell_dir)  # an unfinished earlier attempt of this cell
    (cell_dir / "logs").mkdir(parents=True)
    started = time.time()
    meta = {
        **_meta_head(cell, sweep, choice, scn_record, probe, prov),
        "scenario": scn_record, "launcher": {"choice": choice.name, "reason": choice.reason,
                                             **_safe_record(hosts)},
        "probe": probe,
        "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    failure = None
    procs: list[subprocess.Popen] = []
    try:
        config = build_run_config(cell, cell_dir)
        meta["run_config"] = config
        config_path = write_run_config(config, cell_dir / "config.yaml")
        port = free_port()
        for rank in range(cell.world_size):
            argv = [*worker_cmd, "--config", str(config_path),
                    "--rank", str(rank), "--world-size", str(cell.world_size),
                    "--master-addr", str(hosts.addr(0)), "--master-port", str(port)]
            env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **hosts.worker_env(rank)}
            procs.append(hosts.spawn(rank, argv, env, cell_dir / "logs" / f"rank{rank}.log"))
        failure = wait_for_workers(procs, cell.workload.timeout_s)
    except Exception as err:  # recorded in meta.json; the sweep goes on
        failure = {"rank": None, "returncode": None,
                   "reason": f"{type(err).__name__}: {err}"}
    finally:
        stop_all(procs)
    if failure is None:
        failure = collect_metrics(cell, cell_dir)
    if failure is not None and failure.get("rank") is not None:
        failure["log_tail"] = log_tail(cell_dir / "logs" / f"rank{failure['rank']}.log",
                                       LOG_TAIL_LINES)
        # every other rank that failed too (often in reaction to the first)
        failure["other_ranks"] = {
            str(r): {"returncode": p.returncode,
                     "log_tail": log_tail(cell_dir / "logs" / f"rank{r}.log", 20)}
            for r, p in enumerate(procs) if r != failure["rank"] and p.returncode != 0}
    wall_s = time.time() - started
    meta.update(status="ok" if failure is None else "failed", failure=failure,
                wall_s=round(wall_s, 3),
                finished_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    write_json(cell_dir / "meta.json", meta)
    return CellOutcome(cell.name, meta["status"], wall_s,
                       "" if failure is None else failure["reason"])


def _safe_record(hosts) -> dict:
    record = hosts.record()
    return record if isinstance(record, dict) else {"record": record}


def collect_metrics(cell: CellSpec, cell_dir: Path) -> dict | None:
    """JSONL of every rank -> metrics.csv + peers.csv; a failure record if
    a rank left no metrics."""
    paths = [cell_dir / "metrics" / f"rank{r}.jsonl" for r in range(cell.world_size)]
    missing = [r for r, p in enumerate(paths) if not p.is_file()]
    if missing:
        return {"rank": missing[0], "returncode": 0,
                "reason": f"rank(s) {missing} exited 0 but wrote no metrics file"}
    metrics, peers = metrics_frame(paths, cell.name, cell.workload.warmup_epochs)
    write_csv(cell_dir / "peers.csv", peers)
    write_csv(cell_dir / "metrics.csv", metrics)
    return None


# -------------------------------------------------------------------- sweeps
def _fail_group(cells: list[CellSpec], sweep_dir: Path, sweep: str, choice: LauncherChoice,
                reason: str, prov: dict) -> list[CellOutcome]:
    """Record every cell of a scenario whose hosts never came up as failed."""
    outcomes = []
    for cell in cells:
        cell_dir = sweep_dir / cell.name
        if cell_dir.exists():
            shutil.rmtree(cell_dir)
        write_json(cell_dir / "meta.json", {
            **_meta_head(cell, sweep, choice, {}, None, prov), "status": "failed",
            "failure": {"rank": None, "returncode": None, "reason": reason},
        })
        outcomes.append(CellOutcome(cell.name, "failed", 0.0, reason))
    return outcomes


class _Progress:
    """A rich progress bar over the cells to run (done/total, elapsed, ETA)."""

    def __init__(self, total: int, quiet: bool):
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn()]
        self._bar = Progress(*columns, disable=quiet)
        self._task = self._bar.add_task("sweep", total=total)

    def __enter__(self) -> _Progress:
        self._bar.start()
        return self

    def __exit__(self, *exc) -> None:
        self._bar.stop()

    def describe(self, label: str) -> None:
        self._bar.update(self._task, description=label)

    def advance(self, label: str) -> None:
        self._bar.update(self._task, advance=1, description=label)


def run_sweep(spec: SweepSpec, sweep_dir: Path, *, launcher: str = "auto",
              fresh: bool = False, quiet: bool = False,
              echo: Callable[[str], None] = print,
              worker_cmd: tuple[str, ...] = WORKER_CMD) -> list[CellOutcome]:
    """Run every unfinished cell of `spec` into `sweep_dir`; returns one
    outcome per cell (skipped ones included). Never raises for a cell that
    fails; raises for bad input before anything runs."""
    cells = spec.cells()
    for scenario in dict.fromkeys(c.scenario for c in cells):
        resolve_scenario(scenario)  # unknown names fail before any cell runs
    choice = choose_launcher(launcher)
    tone = "" if choice.shaped else "WARNING: "
    echo(f"{tone}launcher {choice.name}: {choice.reason}")
    sweep_dir.mkdir(parents=True, exist_ok=True)
    write_json(sweep_dir / "sweep.json", {"spec": dataclasses.asdict(spec),
                                          "cells": [c.name for c in cells]})
    prov = provenance(REPO_ROOT)
    commit = prov["git"]["commit"]
    todo = [c for c in cells
            if fresh or not is_finished(sweep_dir / c.name, c.key, git_commit=commit)]
    outcomes = [CellOutcome(c.name, "skipped", reason="finished earlier")
                for c in cells if c not in todo]
    for o in outcomes:
        echo(f"skip {o.name} (finished earlier by this commit)")
    prepare_checkpoints(todo, echo)
    with _Progress(len(todo), quiet) as bar:
        for scenario, group_iter in itertools.groupby(todo, key=lambda c: c.scenario):
            group = list(group_iter)
            outcomes.extend(_run_group(scenario, group, sweep_dir, spec.name, choice, prov,
                                       bar, echo, worker_cmd))
    return outcomes


def _run_group(scenario: str, group: list[CellSpec], sweep_dir: Path, sweep: str,
               choice: LauncherChoice, prov: dict, bar: _Progress,
               echo: Callable[[str], None], worker_cmd: tuple[str, ...]) -> list[CellOutcome]:
    """Bring up the hosts of one scenario once, probe, run its cells."""
    outcomes: list[CellOutcome] = []
    n_hosts = max(c.world_size for c in group)
    run_id = secrets.token_hex(3)
    try:
        scn = resolve_scenario(scenario)
        scn_record = scenario_record(scn)
        bar.describe(f"{scenario}: bringing up {n_hosts} hosts")
        with choice.factory(scn, n_hosts, run_id=run_id,
                            state_dir=sweep_dir / ".launcher") as hosts:
            probe = hosts.probe()
            echo(f"link probe, scenario {scenario}:\n{format_table(probe)}")
            warning = host_limited_warning(probe)
            if warning:
                echo(f"{scenario}: {warning}")
            for cell in group:
                bar.describe(f"{cell.name}")
                outcome = run_cell(cell, hosts, sweep_dir / cell.name, sweep=sweep,
                                   choice=choice, scn_record=scn_record, probe=probe,
                                   prov=prov, worker_cmd=worker_cmd)
                outcomes.append(outcome)
                echo(f"{outcome.status:6s} {cell.name} ({outcome.wall_s:.1f} s)"
                     + (f": {outcome.reason}" if outcome.reason else ""))
                bar.advance(cell.name)
    except Exception as err:  # hosts or probe failed: the group fails, the sweep goes on
        done = {o.name for o in outcomes}
        rest = [c for c in group if c.name not in done]
        reason = f"scenario {scenario}: {type(err).__name__}: {err}"
        echo(f"failed {scenario}: {reason}")
        outcomes.extend(_fail_group(rest, sweep_dir, sweep, choice, reason, prov))
        for cell in rest:
            bar.advance(cell.name)
    return outcomes
