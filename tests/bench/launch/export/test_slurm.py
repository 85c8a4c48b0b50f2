"""`python -m bench slurm` (bench/launch/export/slurm.py and the job's steps,
slurm_job.py): the script it writes, the input it refuses (exit 2), and the job run by
a real Slurm whose two nodes are network namespaces (conftest.py): the tiny smoke cell
on the 100mbps scenario, its nodes' interface shaped by the job's own step and left
clean, the result files as `bench sweep` writes them, saying the links were shaped; and
the shaping step alone: held until SIGTERM (scancel), and without CAP_NET_ADMIN (a
user's job), saying why not."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.__main__ import main
from bench.launch.export.slurm_job import check_links, finish
from bench.results.files import load_results, write_json

# as tests/harness_helpers.py SMOKE: 2 stages of the tiny preset, 1 warm-up step, 2 measured
SWEEP = """name: slurmsmoke
scenarios: [100mbps]
modes: [fp32]
workload: {steps: 2, train_samples: 64, stages: 2, timeout_s: 240, dist_timeout_s: 60,
           init_from: null}
"""
CELL = "100mbps__fp32__slurm"  # the slurm launcher's tag (bench.harness.meta)
JOB_WAIT_S = 170.0


def _export(tmp_path: Path, capsys, *flags: str, sweep: str = SWEEP) -> tuple[int, str, Path]:
    """(exit code, stdout and stderr, the results folder) of `bench slurm` on `sweep`."""
    path = tmp_path / "sweep.yaml"
    path.write_text(sweep)
    out = tmp_path / "results"
    code = main(["slurm", "--sweep", str(path), "--out", str(out), *flags])
    captured = capsys.readouterr()
    return code, captured.out + captured.err, out


def test_the_script_is_bash_with_a_shaping_step_and_one_torchrun_agent_per_node(
        tmp_path, capsys):
    code, said, out = _export(tmp_path, capsys, "--scenario", "100mbps", "--iface", "eth0",
                              "--partition", "gpu", "--sbatch-option=--gpus-per-node=1")
    assert code == 0, said
    script = out / "slurm-100mbps.sbatch"
    assert f"wrote {script}" in said and "shaped on eth0" in said
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --partition=gpu",
                 "#SBATCH --gpus-per-node=1", "address --iface eth0",
                 "shape --scenario 100mbps", "--rdzv-backend=c10d",
                 '--node-rank="$SLURM_NODEID"', '--rank "$SLURM_NODEID"',
                 "GLOO_SOCKET_IFNAME=eth0", f"run_cell {CELL} 2 300 0"):
        assert line in text, line
    head = json.loads((out / CELL / "slurm-cell.json").read_text())
    assert head["cell"]["launcher"] == "slurm" and head["probe"] == []
    assert head["run_config"]["output"]["dir"] == str(out / CELL)
    assert (out / CELL / "config.yaml").is_file()


def test_without_an_interface_nothing_is_shaped_and_the_script_says_so(tmp_path, capsys):
    code, said, out = _export(tmp_path, capsys, "--scenario", "100mbps")
    assert code == 0, said
    text = (out / "slurm-100mbps.sbatch").read_text()
    assert "# 2. no shaping (no --iface)" in text and " shape " not in text
    assert "real (not shaped)" in said


@pytest.mark.parametrize(("flags", "sweep", "expected"), [
    (["--scenario", "10mbps"], SWEEP, r"--scenario 10mbps: .* name one of its scenarios: 100mbps"),
    (["--scenario", "100mbps", "--iface", "a/b"], SWEEP, r"--iface: expected a network"),
    (["--scenario", "100mbps", "--sbatch-option", "gpus=1"], SWEEP, r"--sbatch-option: expected"),
    (["--scenario", "dynamic-smoke"], SWEEP.replace("[100mbps]", "[dynamic-smoke]"),
     r"scenario dynamic-smoke: its links have schedules"),
    (["--scenario", "100mbps"], SWEEP.replace("fp32", "fp33"), r"fp33"),
])
def test_bad_input_exits_2_naming_it(tmp_path, capsys, flags, sweep, expected):
    code, said, out = _export(tmp_path, capsys, *flags, sweep=sweep)
    assert code == 2
    assert said.startswith("error: ") and len(said.strip().splitlines()) <= 3, said
    assert list(out.glob("*/config.yaml")) == []  # nothing written
    assert re.search(expected, said), said


def test_the_links_verdict_fails_on_an_unshaped_node_unless_allowed(tmp_path, capsys):
    base = {"hostname": "gpu-a", "addr": "10.0.0.1", "device": "eth0", "shaped": True,
            "reason": None}
    write_json(tmp_path / "node0.json", {**base, "node": 0})
    write_json(tmp_path / "node1.json", {**base, "node": 1, "shaped": False,
                                         "reason": "no CAP_NET_ADMIN (uid 1000)"})
    assert check_links(tmp_path, 2, allow_unshaped=False) == 1
    said = capsys.readouterr()
    assert "node 1 (gpu-a, 10.0.0.1 on eth0): NOT shaped: no CAP_NET_ADMIN (uid 1000)" in said.out
    assert "--allow-unshaped" in said.err
    assert check_links(tmp_path, 2, allow_unshaped=True) == 0


def test_a_failed_step_is_recorded_with_the_rank_that_failed(tmp_path, capsys):
    code, said, out = _export(tmp_path, capsys, "--scenario", "100mbps")
    assert code == 0, said
    cell = out / CELL
    (cell / "logs").mkdir()
    (cell / "logs" / "rank0.log").write_text("step 1\n")
    (cell / "logs" / "rank1.log").write_text("Traceback (most recent call last):\nOops\n")
    assert finish(cell, tmp_path / "no-links", 1, time.time()) == 1
    meta = json.loads((cell / "meta.json").read_text())
    assert meta["status"] == "failed" and meta["failure"]["rank"] == 1
    assert "Oops" in meta["failure"]["log_tail"]
    assert meta["launcher"]["shaped"] is False and meta["cell"]["shaped"] is False
    assert finish(cell, None, 124, time.time()) == 1
    assert "ran past its timeout" in json.loads((cell / "meta.json").read_text()
                                                )["failure"]["reason"]


# -- a real Slurm --------------------------------------------------------------------
def _wait_for(cluster, job_id: str) -> str:
    deadline = time.monotonic() + JOB_WAIT_S
    while time.monotonic() < deadline:
        state = cluster.job_state(job_id)
        if state not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
            return state
        time.sleep(1.0)
    raise AssertionError(f"job {job_id} still {state} after {JOB_WAIT_S:g} s")


@pytest.mark.workers
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_sbatch_runs_the_cell_on_shaped_nodes_and_records_it(slurm_cluster, tmp_path, capsys):
    code, said, out = _export(tmp_path, capsys, "--scenario", "100mbps", "--iface",
                              slurm_cluster.dev)
    assert code == 0, said
    script = out / "slurm-100mbps.sbatch"
    tested = slurm_cluster.run(["sbatch", "--test-only", str(script)], check=False)
    assert tested.returncode == 0 and "to start at" in tested.stderr, tested.stderr
    job_id = slurm_cluster.run(["sbatch", "--parsable", str(script)]).stdout.strip()
    state = _wait_for(slurm_cluster, job_id)
    job_out = out / ".slurm" / "100mbps" / f"job-{job_id}.out"
    assert state == "COMPLETED", job_out.read_text()
    meta = json.loads((out / CELL / "meta.json").read_text())
    assert meta["status"] == "ok", meta["failure"]
    launcher = meta["launcher"]
    assert launcher["launcher"] == "slurm" and launcher["job_id"] == job_id
    assert launcher["shaped"] is True and meta["cell"]["shaped"] is True
    nodes = launcher["nodes"]  # as they were while the cell ran
    assert [(n["node"], n["addr"], n["shaped"], n["removed"]) for n in nodes] == [
        (i, slurm_cluster.addr(i), True, False) for i in range(2)]
    assert any(f"tc qdisc add dev {slurm_cluster.dev} root handle 1: htb" in a
               for a in nodes[1]["setup"])
    # the job's end removed the shaping, and each node's record says so
    assert all(slurm_cluster.qdiscs(i) == [] for i in range(2))
    links = out / ".slurm" / "100mbps" / f"links-{job_id}"
    assert [json.loads((links / f"node{i}.json").read_text())["removed"]
            for i in range(2)] == [True, True]
    frame = load_results([out])
    assert set(frame["launcher"]) == {"slurm"} and len(frame[frame["kind"] == "train"]) > 0
    for rank in range(2):
        assert (out / CELL / "logs" / f"rank{rank}.log").is_file()
    print(f"\n{job_out.read_text()}")


def _shape_step(cluster, links: Path, node: int, *user: str) -> subprocess.Popen:
    """The job's shaping step of `node`, run by hand in its namespace (as srun would)."""
    from bench import REPO_ROOT

    argv = [*cluster.enter(node), *user, sys.executable, "-m", "bench.launch.export.slurm_job",
            "shape", "--scenario", "100mbps", "--addrs",
            f"{cluster.addr(0)},{cluster.addr(1)}", "--iface", cluster.dev, "--links",
            str(links)]
    env = {**cluster.env, "SLURM_NODEID": str(node), "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow
def test_the_shaping_step_holds_until_sigterm_and_an_unprivileged_one_says_why(
        slurm_cluster, tmp_path):
    links = tmp_path / "links"
    step = _shape_step(slurm_cluster, links, 1)
    assert step.stdout.readline().strip() == "node 1: shaped"
    assert any(" htb " in q for q in slurm_cluster.qdiscs(1))
    step.send_signal(signal.SIGTERM)  # scancel, the job's time limit
    assert step.wait(timeout=30) == 0
    assert slurm_cluster.qdiscs(1) == []
    record = json.loads((links / "node1.json").read_text())
    assert record["shaped"] and record["removed"]
    # a job that may not run tc (as a user's job: no CAP_NET_ADMIN): nothing shaped, and
    # the record says why
    step = _shape_step(slurm_cluster, links, 0, "setpriv", "--bounding-set=-net_admin")
    out, _ = step.communicate(timeout=60)
    assert step.returncode == 0, out
    assert out.startswith("node 0: not shaped: no CAP_NET_ADMIN (uid 0)"), out
    assert slurm_cluster.qdiscs(0) == []
    assert check_links(links, 2, allow_unshaped=False) == 1
