"""meta.json's cell block (bench.harness.meta)."""

from __future__ import annotations

import pytest

from aqsgd.model.config import PRESETS
from bench.harness.meta import (
    cell_dir_name,
    cell_identity,
    expected_identity,
    meta_head,
    shaping_text,
)
from bench.harness.modes import parse_mode
from bench.harness.sweep import CellSpec, Workload
from bench.launch.choice import LauncherChoice
from bench.launch.local import LocalLauncher
from bench.launch.netns import NetnsLauncher
from bench.net.placement import place
from bench.net.scenario import load_scenario, with_link
from bench.results.files import IDENTITY_KEYS

CELL = CellSpec("100mbps", parse_mode("fp32"), Workload())
NETNS = LauncherChoice("netns", "test", factory=NetnsLauncher)
LOCAL = LauncherChoice("local", "test", factory=LocalLauncher)


def test_a_cell_directory_carries_the_launcher_tag_but_on_netns():
    assert cell_dir_name(CELL, NETNS) == "100mbps__fp32"  # results/baseline's names
    assert cell_dir_name(CELL, LOCAL) == "100mbps__fp32__local"
    ssh = type("Ssh", (), {"name": "ssh", "shaped": False})
    unshaped = LauncherChoice("ssh", "test", factory=ssh, options={"shaping": False})
    assert cell_dir_name(CELL, unshaped) == "100mbps__fp32__ssh-unshaped"


def test_the_identity_names_spec_scenario_content_launcher_machine_and_commit():
    scenario = load_scenario("100mbps")
    ident = expected_identity(CELL, scenario, NETNS, "abc")
    assert tuple(ident) == IDENTITY_KEYS
    assert ident["launcher"] == {"launcher": "netns", "shaped": True, "options": {}}
    assert ident != expected_identity(CELL, scenario, LOCAL, "abc")
    assert ident != expected_identity(CELL, scenario, NETNS, "def")
    # an edited scenario file (another rate under the same name) is another cell
    edited = with_link(scenario, rate_mbit=50.0)
    assert ident["scenario_key"] != expected_identity(CELL, edited, NETNS, "abc")["scenario_key"]


def test_meta_records_the_mechanisms_in_the_identity_and_the_cell_block():
    scenario = load_scenario("100mbps")
    prov = {"git": {"commit": "abc"}}
    mechanisms = {"rate": "htb", "delay": "netem", "jitter": "none", "loss": "none"}
    meta = meta_head(CELL, "s", NETNS, scenario, [], prov, place(scenario, 2, 1), mechanisms)
    assert meta["identity"]["mechanisms"] == mechanisms
    assert meta["cell"]["shaping"] == "htb+netem"
    assert shaping_text(LocalLauncher.mechanisms) == "none"
    assert shaping_text({"rate": "htb", "delay": "delayline"}) == "htb+delayline"


def test_meta_cell_block_says_what_was_trained():
    cell = CellSpec("loopback", parse_mode("aqsgd:2/4"),
                    Workload(epochs=10, train_samples=768, seed=2, dropout=0.0,
                             variant="dropout0", eval_each_epoch=True), seed_in_name=True)
    choice = LauncherChoice("local", "test", factory=LocalLauncher)
    block = cell_identity(cell, "convergence", choice, load_scenario("loopback"), [])
    # the local launcher's cells carry its tag; spec_name is the sweep's own name
    assert block["name"] == "loopback__aqsgd-fw2-bw4__dropout0__s2__local"
    assert block["spec_name"] == "loopback__aqsgd-fw2-bw4__dropout0__s2"
    assert block["launcher"] == "local" and block["shaping"] == "unknown"
    assert {k: block[k] for k in ("seed", "variant", "dropout", "dropout_masks", "epochs",
                                  "steps_per_epoch", "warmup_epochs", "eval_windows")} == {
        "seed": 2, "variant": "dropout0", "dropout": 0.0, "dropout_masks": "random",
        "epochs": 10.0, "steps_per_epoch": 12, "warmup_epochs": 1, "eval_windows": 128}
    gc = CellSpec("100mbps", parse_mode("aqsgd+gc/natural:2/4"), Workload(replicas=2))
    block = cell_identity(gc, "bench", choice, load_scenario("100mbps"), [])
    assert block["grad_mode"] == "natural" and block["label"] == "aqsgd+gc-natural-fw2-bw4"
    assert block["variant"] == "" and block["dropout"] == PRESETS["tiny"].dropout
    assert block["epochs"] == pytest.approx(11 / 1)  # one warm-up step + 10 measured


def test_a_cell_whose_links_all_stay_inside_one_machine_records_no_rate_and_no_shaping():
    import dataclasses

    scenario = load_scenario("100mbps")
    placed = place(scenario, 2, 1)
    inside = dataclasses.replace(placed, links=tuple(
        dataclasses.replace(link, rate_mbit=None, kind="machine") for link in placed.links))
    block = cell_identity(CELL, "s", NETNS, scenario, [], {"rate": "none"}, inside)
    assert block["shaped"] is False and block["rate_mbit"] is None
    shaped = cell_identity(CELL, "s", NETNS, scenario, [], {"rate": "htb"}, placed)
    assert shaped["shaped"] is True and shaped["rate_mbit"] == 100.0
