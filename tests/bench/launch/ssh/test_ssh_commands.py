"""The command lines the SSH launcher runs on a host (bench.launch.ssh.commands), as data:
under `hostside tied` in the host's checkout with the variables that travel, torchrun's
c10d options, and the files of the results folder that travel with a command."""

from __future__ import annotations

from bench.launch.hostfile import HostEntry
from bench.launch.ssh.commands import Rendezvous, mirrored, remote_argv, torchrun_argv

HOST = HostEntry("10.0.0.12", python="/opt/venv/bin/python", suite="/opt/aqsgd")


def test_a_command_runs_under_tied_with_the_host_interpreter_and_the_variables_that_travel(
        monkeypatch):
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    monkeypatch.setenv("PYTHONPATH", "/here")
    argv = remote_argv(HOST, "/run/aqsgd-bench/ssh/aq12345-h1",
                       ["/usr/bin/python3", "-m", "bench.net.probe", "serve"],
                       {"WORLD_SIZE": "2", "PYTHONPATH": "/here/too"},
                       {"GLOO_SOCKET_IFNAME": "ens5"})
    tied = argv.index("tied")
    # -P and PYTHONSAFEPATH: no folder but the checkout's (bench.launch.process)
    assert argv[tied - 4:tied + 4] == ["/opt/venv/bin/python", "-P", "-m",
                                       "bench.launch.ssh.hostside", "tied", "--dir",
                                       "/run/aqsgd-bench/ssh/aq12345-h1", "--"]
    assert argv[tied + 4:] == ["/opt/venv/bin/python", "-P", "-m", "bench.net.probe", "serve"]
    settings = argv[:tied - 4]
    assert {"NCCL_DEBUG=INFO", "WORLD_SIZE=2", "GLOO_SOCKET_IFNAME=ens5",
            "PYTHONSAFEPATH=1"} <= set(settings)
    # the host's own checkout, never this machine's paths
    assert [s for s in settings if s.startswith("PYTHONPATH=")] == ["PYTHONPATH=/opt/aqsgd"]


def test_torchrun_joins_the_c10d_rendezvous_on_host_0_on_its_own_address():
    job = Rendezvous("aq12345-abcdef", 29411, world_size=2)
    argv = torchrun_argv(HOST, 1, ["python", "-m", "aqsgd.train.worker", "--rank", "1"], job,
                         "10.0.0.11", "10.0.0.12")
    assert argv[:4] == ["env", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1", "/opt/venv/bin/python",
                        "-P"]
    for opt in ("--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint=10.0.0.11:29411",
                "--rdzv-id=aq12345-abcdef", "--rdzv-conf=is_host=0",
                "--local-addr=10.0.0.12", "--max-restarts=0"):
        assert opt in argv, opt
    assert argv[-4:] == ["-m", "aqsgd.train.worker", "--rank", "1"]
    # a worker's -P is not torchrun's option: its workers have PYTHONSAFEPATH instead
    isolated = torchrun_argv(HOST, 1, ["python", "-P", "-m", "aqsgd.train.worker"], job,
                             "10.0.0.11", "10.0.0.12")
    assert isolated[-3:] == ["--max-restarts=0", "-m", "aqsgd.train.worker"]
    assert torchrun_argv(HOST, 0, ["/bin/sleep", "1"], job, "10.0.0.11", "10.0.0.11")[-3:] \
        == ["--no-python", "/bin/sleep", "1"]
    job.hosts.update({0, 1})
    assert job.full_or_has(0) and not Rendezvous("x", 1, 2).full_or_has(0)


def test_only_files_under_the_results_folder_travel(tmp_path):
    cell = tmp_path / "results" / "cell"
    cell.mkdir(parents=True)
    (cell / "config.yaml").write_text("{}")
    (tmp_path / "elsewhere.yaml").write_text("{}")
    put, get = mirrored(tmp_path / "results", ["--config", str(cell / "config.yaml"),
                                               "--other", str(tmp_path / "elsewhere.yaml")])
    assert put == [(str(cell / "config.yaml"),) * 2] and get == [(str(cell),) * 2]
    assert mirrored(None, [str(cell / "config.yaml")]) == ([], [])
