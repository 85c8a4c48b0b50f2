"""Stage timing (bench.micro.stages): the measurement of every stage, and a real run's
per-stage compute read against its boundary traffic."""

import json

import pytest

from aqsgd.model.config import PRESETS, TINY_PIPELINE
from bench.micro.stages import (
    comm_to_compute_ratio,
    main,
    measure_stages,
    read_run_timings,
    run_ratio,
)


@pytest.mark.timeout(60)
def test_measure_reports_every_stage(capsys):
    rows = measure_stages(PRESETS["tiny"], 2, micro_batch_size=2, repeats=2)
    assert [r.stage for r in rows] == [0, 1]
    assert rows[0].boundary_bytes == 2 * PRESETS["tiny"].seq_len * PRESETS["tiny"].n_embd * 4
    assert rows[0].comm_ms > 0 and rows[1].comm_ms == 0
    assert all(r.compute_ms > 0 for r in rows)
    main(["--preset", "tiny", "--micro-batch-size", "2", "--repeats", "2"])
    assert "comm / slowest compute" in capsys.readouterr().out
    assert comm_to_compute_ratio(rows) == rows[0].comm_ms / max(r.compute_ms for r in rows)
    assert TINY_PIPELINE.num_stages == 2


def _write_run(directory, stages, compute_s, act_bytes=1000, warmup_steps=1, steps=3):
    metrics = directory / "metrics"
    metrics.mkdir(parents=True)
    for s in range(stages):
        with open(metrics / f"rank{s}.jsonl", "w", encoding="utf-8") as f:
            for step in range(warmup_steps + steps):
                warm = step < warmup_steps
                last = s == stages - 1
                rec = {"kind": "train", "step": step, "warmup": warm, "rank": s, "stage": s,
                       "replica": 0, "compute_s": 99.0 if warm else compute_s[s] + step * 1e-3,
                       "bytes_sent": {"activation": 0 if last else act_bytes,
                                      "gradient": 0 if s == 0 else act_bytes, "dp": 0},
                       "bytes_recv": {"activation": 0 if s == 0 else act_bytes,
                                      "gradient": 0 if last else act_bytes, "dp": 0}}
                f.write(json.dumps(rec) + "\n")
            f.write(json.dumps({"kind": "eval", "warmup": False}) + "\n")
    return metrics


def test_run_timings_leave_out_warmup_and_price_each_boundary(tmp_path, capsys):
    metrics = _write_run(tmp_path, 3, compute_s=[0.010, 0.020, 0.040], act_bytes=125_000)
    rows = read_run_timings(metrics, link_rate_mbit=100.0)
    assert [r.stage for r in rows] == [0, 1, 2] and all(r.steps == 3 for r in rows)
    assert [round(r.compute_s, 6) for r in rows] == [0.012, 0.022, 0.042]  # medians of steps 1-3
    # 125 kB forward + 125 kB back = 2 Mbit: 20 ms at 100 Mbit/s; the last stage sends none
    assert [r.boundary_bytes for r in rows] == [250_000, 250_000, 0]
    assert rows[0].comm_s == pytest.approx(0.02) and rows[2].comm_s == 0
    assert run_ratio(rows) == pytest.approx(0.02 / 0.042)
    main(["--metrics", str(metrics), "--link-rate-mbit", "10"])
    assert f"{0.2 / 0.042:.2f}" in capsys.readouterr().out


def test_run_timings_refuse_runs_without_measured_steps(tmp_path):
    with pytest.raises(FileNotFoundError, match="no rank"):
        read_run_timings(tmp_path)
    metrics = _write_run(tmp_path, 2, compute_s=[0.01, 0.01], warmup_steps=2, steps=0)
    with pytest.raises(ValueError, match="rank0.jsonl: no measured"):
        read_run_timings(metrics)
    with pytest.raises(ValueError, match="link_rate_mbit"):
        read_run_timings(metrics, link_rate_mbit=0)
