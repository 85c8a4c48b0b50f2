"""The command lines SshLauncher runs on a host, as data: a command under `hostside
tied` with the variables it keeps, one torchrun agent in a job's rendezvous, the files
a command's arguments name that travel with it.

    argv = remote_argv(host, record_dir, ["python", "-m", "bench.net.probe", ...], env, dev_env)
    job = Rendezvous("aq1b2c3-4d5e6f", port, world_size=2)
    argv = torchrun_argv(host, 1, worker_argv, job, rendezvous_addr, local_addr)
    put, get = mirrored(results_dir, worker_argv)

Why each part is as it is: bench/launch/ssh/launcher.py (its module doc: Workers, and
Note [own store]). Nothing runs here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from bench.launch.hostfile import HostEntry
from bench.launch.process import SAFE_PATH, SAFE_PATH_ENV, is_python, isolated, python_argv
from bench.launch.ssh.checks import host_env

__all__ = ["FREE_PORT", "LOCAL_ONLY", "PASSED_PREFIXES", "Rendezvous", "mirrored",
           "remote_argv", "torchrun_argv"]

# Variables of this process a command on a host keeps besides what the caller changed.
PASSED_PREFIXES = ("AQ", "NCCL_", "GLOO_", "TORCH", "OMP_", "MKL_", "CUDA_", "TRITON_", "HF_")
LOCAL_ONLY = ("PYTHONPATH", "DOCKER_HOST")  # meaningless on another machine
# run on host 0 (`python -c FREE_PORT ADDR`): a TCP port free there, for a rendezvous
FREE_PORT = ("import socket, sys; s = socket.socket(); s.bind((sys.argv[1], 0)); "
             "print(s.getsockname()[1])")


def _on_host(h: HostEntry, argv: list[str]) -> list[str]:
    """argv with a leading python replaced by the host's interpreter, with -P
    (bench.launch.process, Note [safe path])."""
    if argv and is_python(argv[0]):
        return isolated([h.python, *argv[1:]])
    return list(argv)


def remote_argv(h: HostEntry, record_dir: str, argv: list[str], env: dict[str, str] | None,
                worker_env: dict[str, str]) -> list[str]:
    """argv as host `h` runs it: in its checkout of the suite, with the variables the
    caller set (and this process's PASSED_PREFIXES ones), `worker_env` and
    PYTHONSAFEPATH=1, under `hostside tied` recording in `record_dir`."""
    given = {k: v for k, v in os.environ.items() if k.startswith(PASSED_PREFIXES)}
    if env is not None:
        given.update({k: v for k, v in env.items()
                      if os.environ.get(k) != v or k.startswith(PASSED_PREFIXES)})
    given.update(worker_env)
    given.update(SAFE_PATH_ENV)  # torchrun starts its workers as `python -u -m ...`
    for key in LOCAL_ONLY:
        given.pop(key, None)
    settings = [f"{k}={v}" for k, v in sorted(given.items())]
    return [*host_env(h), *settings,
            *python_argv(h.python, "-m", "bench.launch.ssh.hostside", "tied", "--dir",
                         record_dir, "--"), *_on_host(h, argv)]


@dataclass
class Rendezvous:
    """One set of spawns that meet in one torchrun rendezvous: its id, its port on host
    0, the job's ranks and the hosts that joined so far."""

    rdzv_id: str
    port: int
    world_size: int
    hosts: set[int] = field(default_factory=set)

    def full_or_has(self, i: int) -> bool:
        """Whether a spawn on host i starts a new job (this one has it or is full)."""
        return i in self.hosts or len(self.hosts) >= self.world_size


def torchrun_argv(h: HostEntry, i: int, argv: list[str], job: Rendezvous, rdzv_addr: str,
                  local_addr: str) -> list[str]:
    """argv under one torchrun agent of host i (`h`), in the rendezvous `job` on
    rdzv_addr (host 0), its agent on local_addr."""
    opts = [f"--nnodes={job.world_size}", "--nproc-per-node=1", "--rdzv-backend=c10d",
            f"--rdzv-endpoint={rdzv_addr}:{job.port}", f"--rdzv-id={job.rdzv_id}",
            f"--rdzv-conf=is_host={1 if i == 0 else 0}", f"--local-addr={local_addr}",
            "--max-restarts=0"]
    # Note [own store] (docs/multihost.md): the workers' own `--master-addr/--master-port`
    # store, not the agent's (torchrun would otherwise tell rank 0 not to host the store)
    head = ["env", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1",
            *python_argv(h.python, "-m", "torch.distributed.run"), *opts]
    if argv and is_python(argv[0]):
        # torchrun takes the module (-m) itself; its workers get PYTHONSAFEPATH instead
        # of -P (remote_argv), which torchrun would read as an option of its own
        args = argv[1:]
        return [*head, *(args[1:] if args[:1] == [SAFE_PATH] else args)]
    return [*head, "--no-python", *argv]


def mirrored(results_dir: Path | None, argv: list[str]
             ) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(files argv names under results_dir: put at the same path on the host; their
    folders: brought back)."""
    if results_dir is None:
        return [], []
    files = [a for a in argv if a.startswith("/") and Path(a).is_file()
             and Path(a).resolve().is_relative_to(results_dir)]
    folders = dict.fromkeys(str(Path(f).parent) for f in files)
    return [(f, f) for f in files], [(d, d) for d in folders]
