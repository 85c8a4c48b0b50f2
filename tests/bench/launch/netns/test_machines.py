"""Several ranks per machine on real namespaces: 2 machines x 2 ranks (scenarios/
100mbps-2x2.yaml, one namespace per rank, the links inside a machine unshaped) runs the
same 2 stages x 2 replicas cell as 4 machines of one rank (100mbps): the same bytes per
step and held-out losses, its ranks where the placement puts them (a machine holds one
stage of both replicas), and the probe measured both kinds of link."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from bench.harness.run import run_sweep
from bench.harness.sweep import SweepSpec, Workload, parse_mode

pytestmark = [pytest.mark.netns, pytest.mark.workers, pytest.mark.slow]
CELL_2X2 = Workload(steps=2, train_samples=128, timeout_s=240, dist_timeout_s=60,
                    init_from=None, stages=2, replicas=2)


def _cell(out: Path, scenario: str) -> tuple[dict, pd.DataFrame]:
    spec = SweepSpec("machines", (scenario,), (parse_mode("aqsgd:2/4"),), CELL_2X2)
    outcomes = run_sweep(spec, out, launcher="netns", quiet=True, echo=lambda s: None)
    meta = json.loads((out / outcomes[0].name / "meta.json").read_text())
    assert [o.status for o in outcomes] == ["ok"], meta.get("failure")
    return meta, pd.read_csv(out / outcomes[0].name / "metrics.csv")


@pytest.mark.timeout(900)
def test_two_machines_of_two_ranks_match_four_machines_of_one(tmp_path):
    machines_meta, machines = _cell(tmp_path / "2x2", "100mbps-2x2")
    hosts_meta, hosts = _cell(tmp_path / "4x1", "100mbps")
    key = ["kind", "rank", "step"]
    columns = ["bytes_sent_activation", "bytes_sent_gradient", "bytes_recv_total", "samples"]
    assert machines[key + columns].sort_values(key).reset_index(drop=True).equals(
        hosts[key + columns].sort_values(key).reset_index(drop=True))
    held_out = [f[f["kind"] == "eval"]["eval_loss"].dropna().tolist() for f in (machines, hosts)]
    assert held_out[0] and held_out[0] == pytest.approx(held_out[1], rel=1e-6, abs=1e-6)

    placement = machines_meta["placement"]
    assert placement["ranks_per_machine"] == 2 and placement["within_machine"] == "replicas"
    # a machine holds one stage of both replicas; rank 1 (stage 1, replica 0) on host 2
    assert [(r["rank"], r["host"], r["machine"]) for r in placement["ranks"]] == \
        [(0, 0, 0), (1, 2, 1), (2, 1, 0), (3, 3, 1)]
    kinds = {(x["src"], x["dst"]): x["kind"] for x in placement["links"]}
    assert kinds[(0, 2)] == "network" and kinds[(0, 1)] == "machine"
    probed = {(p["src"], p["dst"]): p for p in machines_meta["probe"]}
    assert set(probed) == set(kinds)  # both kinds measured
    for (src, dst), kind in kinds.items():
        achieved = probed[(src, dst)]["rate_mbit_achieved"]
        if kind == "network":
            assert abs(achieved - 100.0) <= 10.0, probed[(src, dst)]  # the probe's tolerance
        else:  # unshaped: as fast as the namespaces' veths go, far above the network
            assert achieved > 300.0, probed[(src, dst)]
    assert "kind" not in hosts_meta["placement"]["links"][0]
