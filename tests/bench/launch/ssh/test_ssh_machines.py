"""Several ranks per machine over SSH: a hostfile's `slots` is the ranks each machine runs
and must equal the scenario's ranks per machine (both named where they differ); 2
machines x 2 ranks (two sshd hosts of slots=2, scenarios/100mbps-2x2.yaml) run the same
bytes and held-out losses as the 2 stages x 2 replicas cell on 4 netns hosts of one rank
each, with the probe over both kinds of link."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from bench.harness.run import run_sweep
from bench.harness.sweep import SweepSpec, Workload, parse_mode
from bench.launch.hostfile import HostEntry
from bench.launch.ssh.launcher import machines_for
from bench.net.scenario import ScenarioError, load_scenario, parse_scenario

CELL_2X2 = Workload(steps=2, train_samples=128, timeout_s=240, dist_timeout_s=60,
                    init_from=None, stages=2, replicas=2)
COLUMNS = ["bytes_sent_activation", "bytes_sent_gradient", "bytes_recv_total", "samples"]


def test_slots_must_equal_the_scenarios_ranks_per_machine():
    two = (HostEntry("a", slots=2), HostEntry("b", slots=2), HostEntry("c", slots=2))
    assert machines_for(two, 4, 2, Path("h.txt"), "s") == two[:2]
    assert machines_for(two, 3, 2, Path("h.txt"), "s") == two[:2]
    with pytest.raises(ValueError, match=r"host a has slots=2; scenario s places 1 rank"):
        machines_for(two, 2, 1, Path("h.txt"), "s")
    with pytest.raises(ValueError, match=r"needs 4 machine\(s\) of 2 rank\(s\) each, the "
                                         r"hostfile lists 3"):
        machines_for(two, 8, 2, Path("h.txt"), "s")


def test_the_links_between_machines_are_one_scenario_per_machine():
    machines = load_scenario("100mbps-2x2").between_machines()
    assert machines.n_hosts == 2 and machines.link_spec(0, 1).rate_mbit == 100.0
    raw = {"description": "x", "layout": {"stages": 2, "replicas": 2, "ranks_per_machine": 2},
           "link": {"rate_mbit": 100}, "links": [{"src": 1, "dst": 2, "rate_mbit": 10}]}
    with pytest.raises(ScenarioError, match="1 -> 2 differs from 0 -> 2"):
        parse_scenario(raw, "uneven").between_machines()


def _cell(out: Path, scenario: str, launcher: str, **options) -> tuple[dict, pd.DataFrame]:
    spec = SweepSpec("machines", (scenario,), (parse_mode("aqsgd:2/4"),), CELL_2X2)
    outcomes = run_sweep(spec, out, launcher=launcher, quiet=True, echo=lambda s: None,
                         launcher_options=options or None)
    meta = json.loads((out / outcomes[0].name / "meta.json").read_text())
    assert [o.status for o in outcomes] == ["ok"], meta.get("failure")
    return meta, pd.read_csv(out / outcomes[0].name / "metrics.csv")


@pytest.mark.netns
@pytest.mark.workers
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_two_machines_of_two_ranks_over_ssh_match_four_netns_hosts(sshd_hosts, tmp_path):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text(sshd_hosts.hostfile.read_text().replace("slots=1", "slots=2"))
    ssh_meta, ssh = _cell(sshd_hosts.results, "100mbps-2x2", "ssh", hostfile=hostfile)
    _, netns = _cell(tmp_path / "netns", "100mbps", "netns")
    key = ["kind", "rank", "step"]
    assert ssh[key + COLUMNS].sort_values(key).reset_index(drop=True).equals(
        netns[key + COLUMNS].sort_values(key).reset_index(drop=True))
    held_out = [f[f["kind"] == "eval"]["eval_loss"].dropna().tolist() for f in (ssh, netns)]
    assert held_out[0] and held_out[0] == pytest.approx(held_out[1], rel=1e-6, abs=1e-6)
    machines = ssh_meta["launcher"]["hosts"]
    assert [m["ranks"] for m in machines] == [[0, 1], [2, 3]]
    assert machines[1]["addr"] == sshd_hosts.addr(1)
    kinds = {(x["src"], x["dst"]): x["kind"] for x in ssh_meta["placement"]["links"]}
    probed = {(p["src"], p["dst"]): p["rate_mbit_achieved"] for p in ssh_meta["probe"]}
    assert set(probed) == set(kinds)
    for link, kind in kinds.items():
        if kind == "network":
            assert abs(probed[link] - 100.0) <= 10.0, (link, probed[link])  # the probe's tolerance
        else:  # a machine's ranks over its loopback, unshaped
            assert probed[link] > 300.0, (link, probed[link])
