"""The depth sweep and the size ladder (`python -m bench convergence --size depth|size`):
what their files run, the time stated before the first cell (pre-training included), and
their smoke sizes end to end through the real harness and real workers."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from aqsgd.model.config import PRESETS, layer_split
from aqsgd.model.pretrain import MAX_PRETRAIN_PARAMS, estimate_s
from bench.__main__ import main
from bench.harness import convergence
from bench.harness.convergence import plan, pretrain_lines, state_times, sweep_file
from bench.harness.modes import parse_mode
from bench.harness.sweep import SweepSpec, Timing
from bench.harness.workload import Workload

SERIES = {"fp32", "bf16", "directq-fw2-bw4", "directq-fw4-bw8", "tahquant-fw2-bw4",
          "tahquant-fw4-bw8", "tahquant-pub-fw2-bw4", "aqsgd-fw2-bw4", "aqsgd-fw4-bw8",
          # the trainable codecs at AQ-SGD 2/4's bytes a token and at a quarter of them
          "ssn-k15", "ssn-k3", "bottleneck-k16", "bottleneck-k4"}
LADDER = {"fp32", "bf16", "directq-fw2-bw4", "tahquant-fw2-bw4", "tahquant-pub-fw2-bw4",
          "aqsgd-fw2-bw4", "aqsgd-fw4-bw8"}
# ssn and bottleneck at AQ-SGD 2/4's bytes a token (32.25 forward at width 128, 64.5 at
# 256: ssn sends 2k + 2, bottleneck 2k) and at a quarter of them, per preset width
TRAINABLE = {128: {"ssn-k15", "bottleneck-k16", "ssn-k3", "bottleneck-k4"},
             256: {"ssn-k31", "bottleneck-k32", "ssn-k7", "bottleneck-k8"}}


def test_the_sizes_name_their_sweep_files():
    for size in ("depth", "depth-smoke", "size", "size-smoke"):
        assert sweep_file(size).name == f"convergence-{size}.yaml"
        assert sweep_file(size).is_file()


def test_the_depth_sweep_splits_one_model_over_2_4_and_8_stages():
    spec = plan("depth", with_throughput=False).convergence
    cells = spec.cells()
    presets = {c.workload.preset for c in cells}
    assert presets == {"tiny-8"}
    n_layer = PRESETS["tiny-8"].n_layer
    by_stages: dict[int, set] = {}
    for c in cells:
        by_stages.setdefault(c.workload.stages, set()).add((c.mode.label, c.workload.seed))
        # every block on exactly one stage: the same model, only the boundaries move
        blocks = [b for r in layer_split(n_layer, c.workload.stages) for b in r]
        assert blocks == list(range(n_layer))
    assert sorted(by_stages) == [2, 4, 8]
    for stages, runs in by_stages.items():
        assert {label for label, _ in runs} == SERIES, stages
        seeds = {seed for _, seed in runs}
        assert len(seeds) >= 3 and len(runs) == len(SERIES) * len(seeds)
    # one workload but the stages: the seed and stages are all a cell's series differ by
    base = {k: v for k, v in spec.workload.identity().items() if k not in ("stages", "variant")}
    for c in cells:
        w = c.workload.identity()
        assert {k: v for k, v in w.items() if k not in ("stages", "variant", "seed")} == \
               {k: v for k, v in base.items() if k != "seed"}
        assert w["variant"] == ("" if c.workload.stages == 2 else f"stages{c.workload.stages}")


def test_the_size_ladder_runs_larger_presets_pretrained_here():
    spec = plan("size", with_throughput=False).convergence
    cells = spec.cells()
    presets = sorted({c.workload.preset for c in cells}, key=lambda p: PRESETS[p].num_parameters())
    assert presets[0] == "tiny" and len(presets) >= 3
    sizes = [PRESETS[p].num_parameters() for p in presets]
    assert sizes == sorted(set(sizes)) and sizes[-1] <= MAX_PRETRAIN_PARAMS  # pre-trained here
    for preset in presets:
        runs = {(c.mode.label, c.workload.seed) for c in cells if c.workload.preset == preset}
        # tiny also runs the width-256 k (AQ-SGD 4/8's bytes a token at width 128)
        trainable = TRAINABLE[128] | TRAINABLE[256] if preset == "tiny" else TRAINABLE[256]
        assert PRESETS[preset].n_embd == (128 if preset == "tiny" else 256)
        assert {label for label, _ in runs} == LADDER | trainable, preset
        assert len({seed for _, seed in runs}) >= 2
    assert {c.workload.stages for c in cells} == {2}
    assert all(c.workload.init_from == "pretrained" for c in cells)
    # each preset steps at its own measured rate in the time stated up front
    assert spec.timing is not None
    assert set(spec.timing.preset_step_s_per_rank) == set(presets) - {"tiny"}


def test_a_presets_own_rates_set_its_cells_time():
    t = Timing(start_s=5.0, step_s_per_rank=0.1, eval_s_per_window=0.01,
               preset_step_s_per_rank={"w256-4": 0.5}, preset_eval_scale={"w256-4": 3.0})
    spec = SweepSpec("s", ("loopback",), (parse_mode("fp32"),),
                     Workload(stages=2, epochs=2, train_samples=64, eval_samples=16,
                              eval_each_epoch=True),
                     variants=(), timing=t)
    tiny = spec.cells()[0]
    big = SweepSpec("s", ("loopback",), (parse_mode("fp32"),),
                    Workload(preset="w256-4", stages=2, epochs=2, train_samples=64,
                             eval_samples=16, eval_each_epoch=True), timing=t).cells()[0]
    w = tiny.workload
    assert t.cell_s(tiny) == pytest.approx(5.0 + w.total_steps * 2 * 0.1
                                           + w.evaluations * w.eval_windows * 0.01)
    assert t.cell_s(big) == pytest.approx(5.0 + w.total_steps * 2 * 0.5
                                          + w.evaluations * w.eval_windows * 0.03)
    with pytest.raises(ValueError, match=r"Timing.preset_step_s_per_rank must map presets .* "
                                         r"got 'nope': 0.5"):
        Timing(start_s=1.0, step_s_per_rank=0.1, preset_step_s_per_rank={"nope": 0.5})


def test_pretraining_a_missing_checkpoint_is_stated_up_front(tmp_path, monkeypatch):
    spec = plan("size", with_throughput=False).convergence
    monkeypatch.setattr(convergence, "default_cache_dir", lambda: tmp_path)  # nothing cached
    lines = pretrain_lines(spec)
    presets = sorted({c.workload.preset for c in spec.cells()})
    assert len(lines) == len(presets)
    for preset, line in zip(presets, lines, strict=True):
        minutes = estimate_s(PRESETS[preset]) / 60
        assert line.startswith(f"pre-training preset {preset} (")
        assert f"about {minutes:.1f} min" in line
    assert estimate_s(PRESETS["w256-4"]) > estimate_s(PRESETS["w256-2"]) > estimate_s(
        PRESETS["tiny"])
    stated = state_times(plan("size", tmp_path / "c", with_throughput=False))
    assert stated[:len(lines)] == lines and stated[-1].startswith("sweep convergence-size: ")
    # random init (the smoke sizes) pre-trains nothing
    assert pretrain_lines(plan("size-smoke", with_throughput=False).convergence) == []


def _final_losses(conv) -> dict[str, float]:
    out = {}
    for path in conv.glob("*/metrics.csv"):
        frame = pd.read_csv(path)
        evals = frame[(frame["kind"] == "eval") & frame["eval_loss"].notna()]
        out[path.parent.name] = float(evals["eval_loss"].iloc[-1])
    return out


@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(400)
@pytest.mark.parametrize("size, field, values", [
    ("depth-smoke", "stages", {2, 4}), ("size-smoke", "preset", {"tiny", "w256-4"})])
def test_smoke_sizes_end_to_end(tmp_path, capsys, size, field, values):
    conv = tmp_path / "conv"
    args = ["convergence", "--size", size, "--results", str(conv), "--throughput-results",
            str(tmp_path / "paper"), "--quiet"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert re.search(rf"sweep convergence-{size}: 4 of 4 cells to run, about [\d.]+ min", out)
    spec = plan(size).convergence
    seen = set()
    for c in spec.cells():
        meta = json.loads((conv / f"{c.name}__local" / "meta.json").read_text())
        assert meta["status"] == "ok", meta.get("failure")
        assert meta["cell"][field] == getattr(c.workload, field)
        seen.add(meta["cell"][field])
    assert seen == values
    finals = _final_losses(conv)
    assert len(finals) == 4 and all(v == v and v < 10 for v in finals.values())
    fp32 = {v for name, v in finals.items() if "fp32" in name}
    aqsgd = {v for name, v in finals.items() if "aqsgd" in name}
    if size == "depth-smoke":  # the same model: uncompressed, the split changes no bit
        assert len(fp32) == 1 and len(aqsgd) == 2  # compressed, each boundary adds error
    else:
        assert len(fp32) == 2 and len(aqsgd) == 2
