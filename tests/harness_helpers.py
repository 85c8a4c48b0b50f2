"""Helpers for the harness and worker tests: a stand-in worker, synthetic result
cells, and real workers started rank by rank.

The stand-in worker (`FAKE_WORKER`) is a test double for `python -m
aqsgd.train.worker` used only to test the harness's own logic (resume, failure
handling, collection) quickly; the real worker runs in the end-to-end tests.
It reads the RunConfig the harness wrote and emits records in the worker's
JSONL schema (aqsgd.train.metrics), with byte counts that depend on the
forward/backward bit widths, and fails on purpose when the config asks
(`train.fail_at_step`, `train.fail_rank`, the real worker's test hooks, or
the environment variable FAKE_FAIL_MODE naming a forward compression mode).

`run_ranks` starts the real worker once per rank with explicit `--rank` flags on the
local launcher, the way the harness does, and returns every rank's exit status (the
worker's own failure handling shows there, which torchrun's `--local` would mask by
stopping the other ranks itself).
"""

from __future__ import annotations

import json
import secrets
import sys
from pathlib import Path

import pandas as pd

from bench.harness.cells import run_config
from bench.harness.meta import cell_dir_name, meta_head, scenario_key
from bench.harness.run import collect_metrics, run_sweep
from bench.harness.sweep import CellSpec, SweepSpec, Workload, parse_mode
from bench.launch.choice import LauncherChoice, choose_launcher
from bench.launch.local import LocalLauncher
from bench.launch.netns import NetnsLauncher
from bench.launch.process import free_port, wait_for_workers
from bench.net.placement import place
from bench.net.probe import ProbeRecord
from bench.net.scenario import load_scenario, with_link
from bench.results.files import write_json

FAKE_WORKER = r'''
import argparse, json, os, sys, time
import yaml

p = argparse.ArgumentParser()
for name in ("--config", "--rank", "--world-size", "--master-addr", "--master-port"):
    p.add_argument(name, required=True)
a = p.parse_args()
cfg = yaml.safe_load(open(a.config))
rank = int(a.rank)
stages = cfg["pipeline"]["stages"]
stage, replica = rank % stages, rank // stages
t = cfg["train"]
print(f"fake worker rank {rank} stage {stage} starting", flush=True)
out = os.path.join(cfg["output"]["dir"], "metrics")
os.makedirs(out, exist_ok=True)
mb = cfg["pipeline"]["micro_batch_size"] * cfg["pipeline"]["num_micro_batches"]
steps_per_epoch = max(1, cfg["data"]["max_samples"] // (mb * cfg["pipeline"]["replicas"]))
act = 4 * mb * 64 * 128
with open(os.path.join(out, f"rank{rank}.jsonl"), "w") as f:
    for step in range(t["total_steps"]):
        epoch = step // steps_per_epoch
        failing_mode = os.environ.get("FAKE_FAIL_MODE") == cfg["forward"]["mode"]
        if (t.get("fail_at_step") == step or failing_mode and step == 1) and \
                t.get("fail_rank", 0) == rank:
            print("fake worker: injected failure", file=sys.stderr, flush=True)
            sys.exit(3)
        fw = cfg["forward"]
        warm = epoch < fw["warmup_epochs"]
        bits = 32 if fw["mode"] == "none" or warm else fw["bits"]
        sent = {"activation": act * bits // 32 if stage < stages - 1 else 0,
                "gradient": act * bits // 32 if stage > 0 else 0, "dp": 0}
        warmup = epoch < max(fw["warmup_epochs"], cfg["backward"]["warmup_epochs"])
        rec = {"kind": "train", "step": step, "epoch": epoch, "warmup": warmup,
               "rank": rank, "stage": stage,
               "replica": replica, "loss": 5.0 - 0.1 * step if stage == stages - 1 else None,
               "step_time_s": 0.01 + sum(sent.values()) / 1e8, "compute_s": 0.01,
               "comm_wait_s": sum(sent.values()) / 1e8, "compress_s": 0.0, "samples": mb,
               "tokens": mb * 64, "lr": t["lr"], "bytes_sent": sent,
               "bytes_recv": {"activation": 0, "gradient": 0, "dp": 0},
               "bytes_by_peer": {str(rank + 1 if stage == 0 else rank - 1):
                                 {"sent": sum(sent.values()), "recv": 0}},
               "peak_rss_bytes": 300_000_000}
        f.write(json.dumps(rec) + "\n")
print("fake worker done", flush=True)
'''


def fake_worker_cmd(tmp_path: Path) -> tuple[str, ...]:
    script = tmp_path / "fake_worker.py"
    script.write_text(FAKE_WORKER)
    return (sys.executable, str(script))


def rank_records(rank: int, stage: int, stages: int, steps: int, warmup_steps: int,
                 act_bytes: int, step_time_s: float, loss0: float = 5.0,
                 replica: int = 0, samples: int = 64) -> list[dict]:
    """Worker-schema train records of one rank (activation bytes per step given)."""
    recs = []
    for step in range(steps):
        sent = {"activation": act_bytes if stage < stages - 1 else 0,
                "gradient": act_bytes if stage > 0 else 0, "dp": 0}
        recs.append({
            "kind": "train", "step": step, "epoch": 0 if step < warmup_steps else 1,
            "warmup": step < warmup_steps, "rank": rank, "stage": stage, "replica": replica,
            "loss": loss0 - 0.1 * step if stage == stages - 1 else None,
            "step_time_s": step_time_s, "compute_s": 0.1, "comm_wait_s": step_time_s - 0.1,
            "compress_s": 0.0, "samples": samples, "tokens": samples * 64, "lr": 1e-4,
            "bytes_sent": sent, "bytes_recv": {"activation": 0, "gradient": 0, "dp": 0},
            "bytes_by_peer": {str(1 - rank): {"sent": sum(sent.values()), "recv": 0}},
            "peak_rss_bytes": 300_000_000,
        })
    return recs


def write_cell(sweep_dir: Path, cell: CellSpec, *, rate_mbit: float | None,
               act_bytes: int, step_time_s: float, loss0: float = 5.0,
               launcher: str = "netns", sweep: str = "synthetic",
               achieved_mbit: float | None = None, ceiling_mbit: float | None = None) -> Path:
    """A finished cell directory written by the harness's own writers from
    synthetic worker JSONL (2 stages, 1 replica). The probed link achieved
    `achieved_mbit` (default: rate_mbit); with `ceiling_mbit` it is host-limited. Its
    directory carries the launcher's tag (bench.harness.meta.cell_dir_name); its identity
    is that of a run of the cell on `launcher` at commit 'abc' on this machine."""
    factories = {"netns": NetnsLauncher, "local": LocalLauncher}
    choice = LauncherChoice(launcher, "test", factory=factories[launcher])
    cell_dir = sweep_dir / cell_dir_name(cell, choice)
    w = cell.workload
    for rank in range(cell.world_size):
        path = cell_dir / "metrics" / f"rank{rank}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        recs = rank_records(rank, rank % w.stages, w.stages, w.total_steps, w.warmup_steps,
                            act_bytes, step_time_s, loss0, replica=rank // w.stages)
        path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert collect_metrics(cell, cell_dir) is None
    scn = with_link(load_scenario("100mbps"), rate_mbit=rate_mbit, delay_ms=0.0)
    achieved = (rate_mbit or 1000.0) if achieved_mbit is None else achieved_mbit
    probe = [ProbeRecord(src=0, dst=1, rate_mbit_configured=rate_mbit,
                         rate_mbit_achieved=achieved, rate_mbit_first_to_last=achieved,
                         rate_mbit_ceiling=ceiling_mbit, host_limited=ceiling_mbit is not None,
                         rtt_ms=0.1, rtt_ms_min=0.1, rtt_ms_configured=0.0,
                         probe_bytes=1 << 20)]
    prov = {"git": {"commit": "abc", "dirty": False}, "versions": {},
            "hardware": {"cpu_model": "test cpu", "cpu_cores": 2, "memory_gib": 24.0,
                         "gpus": [], "hostname": "test", "os": "Linux"}}
    placement = place(scn, w.stages, w.replicas)
    meta = meta_head(cell, sweep, choice, scn, probe, prov, placement,
                     mechanisms=choice.factory.mechanisms if launcher == "local" else
                     {"rate": "htb" if rate_mbit else "none", "delay": "none"})
    meta["identity"]["scenario_key"] = scenario_key(load_scenario(cell.scenario))
    meta["run_config"] = run_config(cell, cell_dir).to_dict()  # as run_cell records it
    write_json(cell_dir / "meta.json", {**meta, "status": "ok", "wall_s": 1.0})
    return cell_dir


def run_ranks(config_path: Path, world_size: int, log_dir: Path, grace_s: float,
              timeout_s: float = 600.0) -> list[int]:
    """Run `python -m aqsgd.train.worker --config CONFIG --rank R ...` for every rank on
    the local launcher, rank R's output in log_dir/rank{R}.log; wait as the harness does
    (bench.launch.process.wait_for_workers: once a rank fails, the others get `grace_s`
    before they are stopped) and return every rank's exit status."""
    log_dir.mkdir(parents=True, exist_ok=True)
    factory = choose_launcher("local").factory
    with factory(load_scenario("loopback"), world_size, run_id=secrets.token_hex(3),
                 state_dir=log_dir / ".launcher") as hosts:
        port = free_port()
        procs = [hosts.spawn(r, [sys.executable, "-m", "aqsgd.train.worker",
                                 "--config", str(config_path), "--rank", str(r),
                                 "--world-size", str(world_size),
                                 "--master-addr", hosts.addr(0), "--master-port", str(port)],
                             None, log_dir / f"rank{r}.log")
                 for r in range(world_size)]
        wait_for_workers(procs, timeout_s, grace_s)
        return [p.returncode for p in procs]


# 2 stages of the tiny preset; one warm-up step (64 samples), then 2 measured steps.
# Random init: a fresh clone has no cached starting checkpoint (minutes to build).
SMOKE = Workload(steps=2, train_samples=64, timeout_s=150, dist_timeout_s=60, init_from=None)


def smoke_sweep(tmp_path, launcher: str, workload: Workload = SMOKE, scenario="100mbps"):
    """One aqsgd 2/4 smoke cell of the real worker on `launcher`: (results dir, outcomes)."""
    spec = SweepSpec("smoke", (scenario,), (parse_mode("aqsgd:2/4"),), workload)
    out = tmp_path / "results"
    outcomes = run_sweep(spec, out, launcher=launcher, quiet=True, echo=lambda s: None)
    return out, outcomes


def two_launchers_in_one_dir(tmp_path, first: str, second: str) -> pd.DataFrame:
    """The smoke cell on `first`, then the same sweep into the same directory on
    `second`: the second run measures its own cell (never reuses the first's), the
    first's files stay as they were, and the sweep's summary and table name both
    launchers with their mechanisms; returns the summary."""
    from bench.report.summary import summarize
    from bench.report.tables import _rows

    out, outcomes = smoke_sweep(tmp_path, first)
    assert [o.status for o in outcomes] == ["ok"]
    check_smoke_cell(out, first)
    kept = out / outcomes[0].name
    before = {p.name: p.stat().st_mtime_ns for p in kept.rglob("*") if p.is_file()}
    out, outcomes = smoke_sweep(tmp_path, second)
    assert [o.status for o in outcomes] == ["ok"], outcomes  # measured, not "skipped"
    check_smoke_cell(out, second)
    assert {p.name: p.stat().st_mtime_ns for p in kept.rglob("*") if p.is_file()} == before
    listed = json.loads((out / "sweep.json").read_text())["cells"]
    assert sorted(listed) == sorted([kept.name, outcomes[0].name])
    summary = summarize([out])
    labels = dict(zip(summary["launcher"], summary["launcher_label"], strict=True))
    assert set(labels) == {first, second}, labels
    headers, rows = _rows(summary)
    shown = {r[headers.index("launcher")] for r in rows}
    assert shown == set(labels.values())
    # like against like: no speed-up of one launcher's cell over the other's
    assert summary["speedup_vs_fp32"].isna().all()
    return summary


def check_smoke_cell(out, launcher: str):
    """The smoke cell finished on `launcher` with its warm-up and coded steps; its meta.
    Its directory carries the launcher's tag (none on netns, bench.harness.meta)."""
    cell = out / ("100mbps__aqsgd-fw2-bw4" + ("" if launcher == "netns" else f"__{launcher}"))
    meta = json.loads((cell / "meta.json").read_text())
    assert meta["status"] == "ok", meta.get("failure")
    assert meta["cell"]["launcher"] == launcher
    assert meta["provenance"]["git"]["commit"] and meta["probe"]
    assert meta["run_config"]["forward"]["bits"] == 2
    frame = pd.read_csv(cell / "metrics.csv")
    train = frame[frame["kind"] == "train"]
    assert sorted(train["rank"].unique()) == [0, 1] and len(train) == 2 * 3
    # warm-up sends fp32; the measured steps send 2-bit deltas forward, 4-bit gradients back
    stage0 = train[train["stage"] == 0].set_index("step")["bytes_sent_activation"]
    assert stage0.loc[0] > 8 * stage0.loc[2] > 0
    assert train["warmup"].tolist().count(True) == 2
    return meta
