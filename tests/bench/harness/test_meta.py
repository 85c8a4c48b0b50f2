"""meta.json's cell block (bench.harness.meta)."""

from __future__ import annotations

import pytest

from aqsgd.model.config import PRESETS
from bench.harness.meta import cell_identity
from bench.harness.modes import parse_mode
from bench.harness.sweep import CellSpec, Workload
from bench.launch.choice import LauncherChoice
from bench.launch.local import LocalLauncher
from bench.net.scenario import load_scenario


def test_meta_cell_block_says_what_was_trained():
    cell = CellSpec("loopback", parse_mode("aqsgd:2/4"),
                    Workload(epochs=10, train_samples=768, seed=2, dropout=0.0,
                             variant="dropout0", eval_each_epoch=True), seed_in_name=True)
    choice = LauncherChoice("local", "test", factory=LocalLauncher)
    block = cell_identity(cell, "convergence", choice, load_scenario("loopback"), [])
    assert block["name"] == "loopback__aqsgd-fw2-bw4__dropout0__s2"
    assert {k: block[k] for k in ("seed", "variant", "dropout", "dropout_masks", "epochs",
                                  "steps_per_epoch", "warmup_epochs", "eval_windows")} == {
        "seed": 2, "variant": "dropout0", "dropout": 0.0, "dropout_masks": "random",
        "epochs": 10.0, "steps_per_epoch": 12, "warmup_epochs": 1, "eval_windows": 128}
    gc = CellSpec("100mbps", parse_mode("aqsgd+gc/natural:2/4"), Workload(replicas=2))
    block = cell_identity(gc, "bench", choice, load_scenario("100mbps"), [])
    assert block["grad_mode"] == "natural" and block["label"] == "aqsgd+gc-natural-fw2-bw4"
    assert block["variant"] == "" and block["dropout"] == PRESETS["tiny"].dropout
    assert block["epochs"] == pytest.approx(11 / 1)  # one warm-up step + 10 measured
