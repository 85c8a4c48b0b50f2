"""The `tiny` family of presets for deeper pipelines, and the measurement that reads a real
run's per-stage compute against its boundary traffic."""

import json

import pytest

from aqsgd.model.config import PRESETS, TINY_FAMILY, layer_split
from bench.micro.stages import main, read_run_timings, run_ratio


def test_tiny_stays_the_two_stage_regression_shape():
    tiny = PRESETS["tiny"]
    assert (tiny.n_layer, tiny.n_embd, tiny.n_head, tiny.vocab_size, tiny.seq_len) == (
        2, 128, 2, 384, 64)
    assert tiny.n_inner is None and tiny.dropout == 0.1


@pytest.mark.parametrize("name, stages", [("tiny-4", 4), ("tiny-8", 8)])
def test_tiny_family_has_one_block_per_stage_and_tinys_boundary(name, stages):
    cfg, tiny = PRESETS[name], PRESETS["tiny"]
    assert TINY_FAMILY[name] == stages
    assert cfg.n_layer == stages
    assert [len(r) for r in layer_split(cfg.n_layer, stages)] == [1] * stages
    # a boundary carries (B, seq_len, n_embd) activations: the same bytes as tiny's
    assert (cfg.n_embd, cfg.seq_len, cfg.vocab_size) == (tiny.n_embd, tiny.seq_len,
                                                         tiny.vocab_size)
    # a narrower MLP makes a block cheaper than tiny's at the same boundary
    assert cfg.inner_dim < tiny.inner_dim
    assert cfg.num_parameters() < PRESETS["tiny"].replace(n_layer=stages).num_parameters()


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


def test_tiny_preset_for_picks_the_family_member_sized_for_the_depth():
    from aqsgd.model.config import tiny_preset_for

    assert [tiny_preset_for(s) for s in (2, 4, 8)] == ["tiny", "tiny-4", "tiny-8"]
    with pytest.raises(ValueError, match=r"no tiny preset is sized for 3 stages.*4 \(tiny-4\)"):
        tiny_preset_for(3)
