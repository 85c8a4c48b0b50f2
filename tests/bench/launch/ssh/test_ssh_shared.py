"""An SSH sweep on hosts that share the harness machine's file system, as hosts with an
NFS home do (conftest.py's `sshd_hosts_shared`: network namespaces that see this
machine's mounts, the results folder included), end to end with the real worker: a
shaped 100mbps cell and its unshaped loopback reference. Each host is found to share the
results folder (a marker file read back over SSH), so nothing is copied onto itself:
config.yaml keeps what the harness wrote, the workers run it (rank 0's run_config.json
in the cell is the cell's run config, not the default under runs/local/), and each
rank's files have names of their own. The hosts are checked once for both bring-ups, the
placement counts the hostfile's 2 hosts, and `launcher.shaped` agrees with
`cell.shaped` on both cells."""

from __future__ import annotations

import json

import pytest

from bench.harness.run import run_sweep
from bench.harness.sweep import SweepSpec, Workload, parse_mode

pytestmark = [pytest.mark.netns, pytest.mark.workers, pytest.mark.slow]
# as tests/harness_helpers.py SMOKE: 2 stages of the tiny preset, 1 warm-up step, 2 measured
SMOKE = Workload(steps=2, train_samples=64, timeout_s=240, dist_timeout_s=60, init_from=None)
SHAPED, REFERENCE = "100mbps__aqsgd-fw2-bw4__ssh", "loopback__fp32__ssh"


@pytest.mark.timeout(900)
def test_a_sweep_on_hosts_sharing_the_results_folder(sshd_hosts_shared, count_checks):
    hosts, out = sshd_hosts_shared, sshd_hosts_shared.results / "shared"
    spec = SweepSpec("smoke", ("100mbps",), (parse_mode("aqsgd:2/4"),), SMOKE,
                     reference_scenario="loopback")
    printed: list[str] = []
    outcomes = run_sweep(spec, out, launcher="ssh", quiet=True, echo=printed.append,
                         launcher_options={"hostfile": hosts.hostfile})
    metas = {o.name: json.loads((out / o.name / "meta.json").read_text()) for o in outcomes}
    assert [o.status for o in outcomes] == ["ok", "ok"], \
        [m.get("failure") for m in metas.values()]
    assert count_checks == [2]  # both hosts, once, for two bring-ups
    for i in range(hosts.n):
        assert (f"root@{hosts.addr(i)}: checked, {hosts.addr(i)} on {hosts.dev(i)}, shares "
                f"the results folder {out}") in "\n".join(printed)
    for name, meta in metas.items():
        cell = out / name
        assert [h["shares_results"] for h in meta["launcher"]["hosts"]] == [True, True]
        # what the harness wrote is what the workers ran (a copy onto itself empties it)
        assert "run_config" in meta and (cell / "config.yaml").stat().st_size > 0
        assert json.loads((cell / "run_config.json").read_text()) == meta["run_config"]
        assert sorted(p.name for p in (cell / "metrics").iterdir()) == \
            ["rank0.jsonl", "rank1.jsonl"]
        assert f"[h1 {hosts.addr(1)}] " in (cell / "logs" / "rank1.log").read_text()
        assert not list(cell.rglob("*.part-*"))
        assert (meta["placement"]["n_hosts"], meta["placement"]["idle_hosts"]) == (2, [])
        assert meta["launcher"]["shaped"] is meta["cell"]["shaped"], name
    assert metas[SHAPED]["cell"]["shaped"] is True
    assert metas[REFERENCE]["cell"]["shaped"] is False
    assert not list(out.rglob(".aqsgd-fs-check-*"))  # the marker went
    for i in range(hosts.n):
        assert hosts.qdiscs(i) == []
