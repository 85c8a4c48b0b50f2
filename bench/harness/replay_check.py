"""Replay against real compute where both run (issue 38, item 6), as a benchmark that
prints its figures: 2 stages of the tiny preset on 2 cores, one rank a core, through
network namespaces at 10 and 100 Mbit/s, fp32 and aqsgd:2/4.

    python -m bench.harness.replay_check          # make replay-check; root (netns)

The profile is measured here first (the cut's two stages, one thread each,
bench.perfmodel.measure.time_stage); each scenario's real cells and then its replayed
cells run back to back, so both see the same load. The target: a replayed cell's median
step time within TOLERANCE (5%) of the real one's; the exit status is 1 when a cell
misses it. A timed comparison on a shared machine is a measurement, not a test: it
prints the table and the load it ran under, and docs/replay.md holds the figures.

Beside it, two diagnostics: a profile of the same cut in wall-clock time, measured just
before the scenario's real cells (what a stage takes under the machine's present load,
`wall`), and each real cell replayed from its own compute: the profile's times scaled per
stage to the median compute the real cell's rank recorded a step (`in_situ`). The latter
separates the mechanism (does replay give the step time of the compute it is given?)
from the profile (was the real cell's compute the compute measured alone?), which on a
shared machine it is not.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.perfmodel.measure import time_stage
from bench.perfmodel.profile import ComputeProfile, Profile, load_profile, write_profile

__all__ = ["TOLERANCE", "compare", "in_situ", "main"]

SCENARIOS = ("10mbps", "100mbps")
MODES = ("fp32", "aqsgd:2/4")
TOLERANCE = 0.05
PRESET, STAGES, MICRO_BATCH, MICRO_BATCHES = "tiny", 2, 16, 4


def measure_cut(path: Path, repeats: int = 20, clock: str = "cpu") -> Path:
    """A profile of this machine holding the cut's stage costs only, on `clock`."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread per rank, as the cells run
    try:
        costs = tuple(time_stage(PRESET, STAGES, s, MICRO_BATCH, repeats, clock)
                      for s in range(STAGES))
    finally:
        torch.set_num_threads(threads)
    profile = Profile(name=path.stem, device=f"this machine ({os.cpu_count()} cores)",
                      source=f"bench.harness.replay_check: time_stage of the "
                             f"cut, {clock} clock, one thread",
                      date=datetime.date.today().isoformat(), kind="measured",
                      cores=os.cpu_count(), compute=ComputeProfile(stages=costs))
    return write_profile(profile, path)


def run_cells(out: Path, scenario: str, compute: str, modes=MODES) -> dict[str, dict]:
    """`bench run` of `modes` on `scenario` (no unshaped reference cell); each mode's
    summary row."""
    argv = [sys.executable, "-m", "bench", "run", "--scenario", scenario, "--modes", *modes,
            "--launcher", "netns", "--preset", PRESET, "--stages", str(STAGES),
            "--micro-batch-size", str(MICRO_BATCH), "--num-micro-batches", str(MICRO_BATCHES),
            "--init-from", "none",
            "--reference", "none", "--compute", compute, "--out", str(out), "--quiet"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"bench run on {scenario} ({compute}) failed:\n"
                           f"{done.stdout[-2000:]}{done.stderr[-3000:]}")
    rows = json.loads((out / "summary.json").read_text())
    return {r["mode_spec"]: r for r in rows if r["scenario"] == scenario}


def step_compute_s(cell_dir: Path, rank: int) -> float:
    """Median compute seconds of the measured steps of one rank of a cell."""
    lines = (cell_dir / "metrics" / f"rank{rank}.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    return statistics.median(r["compute_s"] for r in records
                             if r["kind"] == "train" and not r["warmup"])


def in_situ(profile: Path, cell_dir: Path, out: Path) -> Path:
    """`profile` with each stage's times scaled to the compute the real cell recorded."""
    base = load_profile(profile)
    costs = []
    for cost in base.compute.stages:
        alone = MICRO_BATCHES * (cost.forward_s + cost.backward_s) + cost.optimizer_s
        k = step_compute_s(cell_dir, cost.stage) / alone
        costs.append(dataclasses.replace(cost, forward_s=cost.forward_s * k,
                                         backward_s=cost.backward_s * k,
                                         optimizer_s=cost.optimizer_s * k))
    compute = dataclasses.replace(base.compute, stages=tuple(costs))
    return write_profile(base.replace(name=out.stem, compute=compute), out)


def compare(tmp: Path) -> list[dict]:
    """One paired round: per scenario, the real cells, the replayed ones, then each real
    cell replayed from its own compute."""
    profile = measure_cut(tmp / "cpu-here.yaml")
    rows = []
    for scenario in SCENARIOS:
        load = os.getloadavg()[0]
        wall = measure_cut(tmp / f"wall-{scenario}.yaml", clock="wall")
        real = run_cells(tmp / f"real-{scenario}", scenario, "real")
        replayed = run_cells(tmp / f"replay-{scenario}", scenario, f"replay:{profile}")
        walled = run_cells(tmp / f"walled-{scenario}", scenario, f"replay:{wall}")
        for mode in MODES:
            tag = f"{scenario}-{mode.replace(':', '').replace('/', '')}"
            cell_dir = tmp / f"real-{scenario}" / real[mode]["cell"]
            own = in_situ(profile, cell_dir, tmp / f"insitu-{tag}.yaml")
            insitu = run_cells(tmp / f"insitu-{tag}", scenario, f"replay:{own}", (mode,))
            r, p, w, i = (x[mode]["step_time_s"] for x in (real, replayed, walled, insitu))
            rows.append({"scenario": scenario, "mode": mode, "real_s": r, "replayed_s": p,
                         "error": p / r - 1, "wall_s": w, "wall_error": w / r - 1,
                         "in_situ_s": i, "in_situ_error": i / r - 1, "load_1min": load})
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run one paired round in a temporary folder; print each cell; 1 when a replayed
    cell's step time is off the real one's by more than TOLERANCE."""
    del argv
    with tempfile.TemporaryDirectory(prefix="aqsgd-replay-check-") as tmp:
        rows = compare(Path(tmp))
    for r in rows:
        print(f"{r['scenario']:>8} {r['mode']:>10}  real {r['real_s']:.3f} s  replayed "
              f"{r['replayed_s']:.3f} s {r['error']:+.1%}  wall-clock profile "
              f"{r['wall_s']:.3f} s {r['wall_error']:+.1%}  in situ {r['in_situ_s']:.3f} s "
              f"{r['in_situ_error']:+.1%}  (load {r['load_1min']:.2f})")
    worst = max(rows, key=lambda r: abs(r["error"]))
    print(f"worst: {worst['scenario']} {worst['mode']} {worst['error']:+.1%} "
          f"(target within {TOLERANCE:.0%})")
    return 0 if abs(worst["error"]) <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
