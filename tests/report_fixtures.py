"""Hand-made result cells for the report tests, written to the documented schema
(docs/results-schema.md) by the result writers of bench.results.files, without the
harness: the reports are tested against the files, and every number in a fixture is
chosen so the expected figure can be worked out by hand.

    write_fixture_cell(tmp_path, mode="aqsgd", fw=2, bw=4, seed=1, eval_losses=[4, 3, 2.5])

Train records: `(epochs) * steps_per_epoch` steps per rank, the first `warmup_epochs *
steps_per_epoch` flagged warm-up and taking `warmup_step_time_s`, the rest
`step_time_s`. Eval records: one before training and one after every epoch (`step` =
optimizer steps done), from every rank, `eval_loss` on the last stage only.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.net.placement import place
from bench.net.scenario import load_scenario
from bench.results.files import SCHEMA_VERSION, metrics_frame, write_csv, write_json
from bench.results.record import CellRecord, parse_record

__all__ = ["fixture_label", "fixture_meta", "fixture_record", "launcher_block", "outage_block",
           "scheduled_link", "write_fixture_cell"]


def _placement(scenario: str, stages: int, replicas: int) -> dict:
    """meta.json's placement block of a cell of that layout (the 4-host 100mbps file's
    hosts, under the fixture's scenario name)."""
    return {**place(load_scenario("100mbps"), stages, replicas).to_dict(), "scenario": scenario}


def fixture_label(mode: str, fw: int | None, bw: int | None, grad_mode: str) -> str:
    """The harness's label: 'fp32', 'bf16', 'aqsgd-fw2-bw4', 'aqsgd+gc-ef21-fw2-bw4'."""
    if fw is None:  # a mode without bit widths (fp32, bf16, fp16)
        return mode
    gc = f"-{grad_mode}" if mode == "aqsgd+gc" else ""
    return f"{mode}{gc}-fw{fw}-bw{bw}"


_PEAK_RSS = 300_000_000  # bytes; each rank's record adds its rank


def _records(rank: int, *, stages: int, replicas: int, epochs: int, steps_per_epoch: int,
             warmup_epochs: int, step_time_s: float, warmup_step_time_s: float,
             act_bytes: int, samples: int, train_loss0: float,
             eval_losses: list[float] | None) -> list[dict]:
    stage, replica = rank % stages, rank // stages
    last = stage == stages - 1
    recs = []
    for i, loss in enumerate(eval_losses or []):
        recs.append({"kind": "eval", "step": i * steps_per_epoch, "epoch": i, "warmup": False,
                     "rank": rank, "stage": stage, "replica": replica,
                     "eval_loss": loss if last else None, "samples": 128, "tokens": 128 * 64,
                     "eval_time_s": 0.5, "peak_rss_bytes": _PEAK_RSS + rank})
    for step in range(epochs * steps_per_epoch):
        warm = step < warmup_epochs * steps_per_epoch
        sent = {"activation": act_bytes if not last else 0,
                "gradient": act_bytes if stage > 0 else 0, "dp": 0}
        t = warmup_step_time_s if warm else step_time_s
        recs.append({
            "kind": "train", "step": step, "epoch": step // steps_per_epoch, "warmup": warm,
            "rank": rank, "stage": stage, "replica": replica,
            "loss": train_loss0 - 0.1 * step if last else None,
            "step_time_s": t, "compute_s": 0.1, "comm_wait_s": t - 0.1, "compress_s": 0.0,
            "samples": samples, "tokens": samples * 64, "lr": 1e-4,
            "bytes_sent": sent, "bytes_recv": {"activation": 0, "gradient": 0, "dp": 0},
            "bytes_by_peer": {}, "peak_rss_bytes": _PEAK_RSS + rank})
    return recs


def fixture_meta(*, mode: str = "fp32", fw: int | None = None, bw: int | None = None,
                 grad_mode: str = "fp32", scenario: str = "100mbps",
                 rate_mbit: float | None = 100.0, shaped: bool = True, launcher: str = "netns",
                 sweep: str = "synthetic", stages: int = 2, replicas: int = 1, seed: int = 0,
                 variant: str = "", preset: str = "tiny", repeat: int = 0,
                 dropout: float = 0.1, dropout_masks: str = "random", epochs: int = 3,
                 steps_per_epoch: int = 2, warmup_epochs: int = 1, eval_windows: int = 128,
                 status: str = "ok", achieved_mbit: float | None = None,
                 ceiling_mbit: float | None = None, spec_key: str = "key",
                 shaping: str | None = None) -> dict:
    """The meta.json of a fixture cell (write_fixture_cell's), every schema-5 key there
    but `files` (the writer adds it) and the blocks of scheduled links."""
    label = fixture_label(mode, fw, bw, grad_mode)
    spec_name = f"{scenario}__{label}" + (f"-dp{replicas}" if replicas > 1 else "") + \
        f"__s{seed}" + (f"__{variant}" if variant else "") + \
        (f"__r{repeat + 1}" if repeat else "")
    name = spec_name if launcher == "netns" else f"{spec_name}__{launcher}"
    is_shaped = shaped and rate_mbit is not None
    shaping = ("htb" if is_shaped else "none") if shaping is None else shaping
    achieved = (rate_mbit or 1000.0) if achieved_mbit is None else achieved_mbit
    cell = {"name": name, "spec_name": spec_name, "sweep": sweep, "scenario": scenario,
            "mode": mode, "label": label,
            "fw_bits": fw, "bw_bits": bw, "grad_mode": grad_mode, "preset": preset,
            "stages": stages, "replicas": replicas, "launcher": launcher,
            "shaped": is_shaped, "shaping": shaping, "rate_mbit": rate_mbit,
            "delay_ms": 0.0, "host_limited": ceiling_mbit is not None,
            "rate_mbit_achieved": achieved if rate_mbit is not None else None,
            "seed": seed, "variant": variant, "repeat": repeat, "dropout": dropout,
            "dropout_masks": dropout_masks, "epochs": epochs,
            "steps_per_epoch": steps_per_epoch, "warmup_epochs": warmup_epochs,
            "eval_windows": eval_windows}
    probe = [{"src": 0, "dst": 1, "rate_mbit_configured": rate_mbit,
              "rate_mbit_achieved": achieved, "rate_mbit_first_to_last": achieved,
              "rate_mbit_ceiling": ceiling_mbit, "host_limited": ceiling_mbit is not None,
              "rtt_ms": 0.1, "rtt_ms_min": 0.1, "rtt_ms_configured": 0.0,
              "probe_bytes": 1 << 20}]
    prov = {"git": {"commit": "abc", "dirty": False}, "versions": {},
            "hardware": {"cpu_model": "test cpu", "cpu_cores": 2, "memory_gib": 24.0,
                         "gpus": [], "hostname": "test", "os": "Linux"}}
    return {
        "schema_version": SCHEMA_VERSION, "cell": cell, "spec": {}, "spec_key": spec_key,
        "identity": {"spec_key": spec_key, "scenario_key": "scenario", "git_commit": "abc",
                     "launcher": {"launcher": launcher, "shaped": is_shaped, "options": {}},
                     "machine": {"hostname": "test", "kernel": "6"},
                     "mechanisms": {"rate": shaping}},
        "seed": seed, "placement": _placement(scenario, stages, replicas),
        "scenario": {"description": f"fixture {scenario}", "layout": {"stages": stages,
                                                                       "replicas": replicas},
                     "link": {"rate_mbit": rate_mbit, "delay_ms": 0.0}},
        "launcher": {"choice": launcher, "reason": "fixture", "schedule": None},
        "run_config": {"pipeline": {"stages": stages, "replicas": replicas,
                                    "micro_batch_size": 16, "num_micro_batches": 4,
                                    "schedule": "gpipe"}},
        "probe": probe, "provenance": prov, "status": status,
        "failure": None if status == "ok" else {"rank": None, "returncode": None,
                                                "reason": "fixture failure"},
        "wall_s": 1.0}


def write_fixture_cell(root: Path, *, stages: int = 2, replicas: int = 1, epochs: int = 3,
                       steps_per_epoch: int = 2, warmup_epochs: int = 1,
                       step_time_s: float = 0.2, warmup_step_time_s: float | None = None,
                       act_bytes: int = 1000, samples: int = 64, train_loss0: float = 5.0,
                       eval_losses: list[float] | None = None, **identity) -> Path:
    """One finished cell under `root`; returns its directory. `identity`: fixture_meta's
    keywords (mode, fw, bw, scenario, rate_mbit, launcher, status, ...). A launcher other
    than netns tags the name (bench.harness.meta.cell_dir_name); `shaping` defaults to the
    mechanisms a shaped netns cell records ('htb'), 'none' unshaped."""
    meta = fixture_meta(stages=stages, replicas=replicas, epochs=epochs,
                        steps_per_epoch=steps_per_epoch, warmup_epochs=warmup_epochs,
                        **identity)
    name = meta["cell"]["name"]
    cell_dir = root / name
    metrics = cell_dir / "metrics"
    metrics.mkdir(parents=True, exist_ok=True)
    for rank in range(stages * replicas):
        recs = _records(rank, stages=stages, replicas=replicas, epochs=epochs,
                        steps_per_epoch=steps_per_epoch, warmup_epochs=warmup_epochs,
                        step_time_s=step_time_s,
                        warmup_step_time_s=step_time_s if warmup_step_time_s is None
                        else warmup_step_time_s,
                        act_bytes=act_bytes, samples=samples, train_loss0=train_loss0,
                        eval_losses=eval_losses)
        (metrics / f"rank{rank}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    frame, peers = metrics_frame(sorted(metrics.glob("rank*.jsonl")), name)
    write_csv(cell_dir / "metrics.csv", frame)
    write_csv(cell_dir / "peers.csv", peers)
    write_json(cell_dir / "meta.json", meta)
    return cell_dir


def fixture_record(cell_dir: Path, *, cell: dict | None = None, **blocks) -> CellRecord:
    """The record of fixture_meta() read from `cell_dir`, its top-level `blocks` replaced
    and its `cell` block updated with `cell` (for the readers of one block or two)."""
    meta = fixture_meta()
    meta = {**meta, **blocks, "cell": {**meta["cell"], **(cell or {})}}
    return parse_record(json.loads(json.dumps(meta)), Path(cell_dir) / "meta.json")


def scheduled_link(src: int, dst: int, phases: list[tuple[float, bool]] | None = None,
                   loop: bool = False) -> dict:
    """An entry of the launcher's `schedule.links`: `phases` (duration_s, down) each."""
    phases = [(10.0, False)] if phases is None else phases
    return {"src": src, "dst": dst, "source": "fixture", "loop": loop,
            "duration_s": sum(d for d, _ in phases),
            "phases": [{"duration_s": d, "down": down} for d, down in phases]}


def launcher_block(links: list[dict], run: dict | None) -> dict:
    """meta.json's `launcher` with a schedule of `links` (scheduled_link) and `run` (the
    runner's record: started_unix, stopped_unix, changes)."""
    return {"choice": "netns", "reason": "fixture", "schedule": {"links": links, "run": run}}


def outage_block(outages: list[dict] | None = None, time_lost_s: float | None = None) -> dict:
    """meta.json's `schedule` block (bench.harness.outages) of a scheduled cell."""
    outages = outages or []
    return {"outages": outages,
            "longest_outage_s": max((o["up_s"] - o["down_s"] for o in outages
                                     if o["up_s"] is not None), default=0.0),
            "dist_timeout_s": 1800.0, "survivable_outage_s": 885.0,
            "time_lost_s": time_lost_s, "changes_applied": 0}
