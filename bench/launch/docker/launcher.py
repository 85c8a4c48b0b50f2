"""Docker launcher: one container per rank on a network the run creates, each
container's egress shaped with tc inside it, removal by exact recorded names.

    with DockerLauncher(load_scenario("100mbps"), n_hosts=2, state_dir=d) as hosts:
        print(format_table(hosts.probe()))          # measured inside the containers
        p = hosts.spawn(0, [sys.executable, "-m", "aqsgd.train.worker", ...], env, log)

Talks to the daemon through the Docker SDK (`docker.from_env()`; `docker/dockerd.sh
start` runs the suite's own). Its transport (bench.launch.hosts): `docker exec`, as root
for tc, as the image's non-root `worker` for workers, under the entrypoint's `--tied`
mode (stopping the client stops the process in the container). The checkout is mounted
read-only at its own path, the results read-write; `python` ("host" or "image") picks
the workers' interpreter. What a run creates, the delay line without netem and why the
host's interpreter: docs/docker.md.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

from aqsgd.compress.plugins import Plugin, is_file_source
from aqsgd.filecache import default_cache_dir
from bench import REPO_ROOT
from bench.launch.docker.checks import (
    ContainerExecutor,
    check_delay_lines,
    check_host_python,
    check_plugins,
    docker_client,
    gpu_count,
    probe_capabilities,
    wait_for_delay_line,
)
from bench.launch.docker.spec import (
    SHAPED_FILE,
    TUN_DEVICE,
    WORKER_USER,
    DockerRunSpec,
)
from bench.launch.docker.state import teardown_docker, write_state
from bench.launch.hosts import ShapedHosts
from bench.launch.process import SAFE_PATH_ENV, TEARDOWN_GRACE_S, isolated, spawn_group, stop_all
from bench.net.executor import Argv
from bench.net.scenario import NetworkScenario
from bench.net.shaping import Interface, ShapingPlan
from bench.net.tc import Capabilities, mechanisms_for

__all__ = ["DockerLauncher"]

MAX_NAME_DRAWS = 5
ENTRYPOINT = ("python3", "-P", "/usr/local/bin/aqsgd-entrypoint")  # docker/Dockerfile
HOST_CACHE = "/run/aqsgd/host-cache"  # the host's .cache, read-only, seeds the run's volume
PYTHONS = ("host", "image")
# An interpreter installed here belongs to the system: mounted at its own path it would
# hide the image's own /usr (tc, the entrypoint), so it is never mounted.
SYSTEM_PREFIXES = (Path("/"), Path("/usr"), Path("/usr/local"))
MECHANISMS = {"htb": "htb qdisc (kernel, inside each container)",
              "netem": "netem qdisc (kernel, inside each container)",
              "delayline": "userspace TUN delay line inside each container "
                           "(bench/net/delayline.py, UDP between containers)"}
# Host variables a worker keeps inside its container besides those the caller set.
PASSED_PREFIXES = ("AQ", "NCCL_", "GLOO_", "TORCH", "OMP_", "MKL_", "CUDA_", "TRITON_", "HF_")


class DockerLauncher(ShapedHosts):
    """Context manager building `n_hosts` containers for one run (see module doc).

    `image`: the worker image. `gpus`: True = rank i on GPU i (a GpuShortage error when
    there are fewer), False = none, None = GPUs when the host has any. `results_dir`:
    mounted read-write at its own path (default: the parent of state_dir).
    `python`: "host" or "image", the workers' interpreter (see module doc; None: "image"
    with GPUs or a system interpreter (under /usr), else "host"). `plugins`: the plug-ins
    the cells run (None: the class's, set by `bind`): a file outside the checkout is
    mounted read-only at its own path, and the workers' interpreter must load the same
    copy of each (checks.check_plugins). `allow_drop`, `payload_correction`: as on
    NetnsLauncher."""

    name = "docker"
    shaped = True
    plugins: ClassVar[tuple[Plugin, ...]] = ()

    @classmethod
    def bind(cls, plugins: tuple[Plugin, ...] = ()) -> type[DockerLauncher]:
        """This launcher with the cells' plug-ins fixed: the factory the harness calls
        with the protocol's arguments only (bench.launch.choice)."""
        return type(cls.__name__, (cls,), {"plugins": tuple(plugins),
                                           "__module__": cls.__module__})

    def __init__(self, scenario: NetworkScenario, n_hosts: int | None = None, *,
                 run_id: str | None = None, state_dir: Path | str | None = None,
                 image: str | None = None, gpus: bool | None = None,
                 results_dir: Path | str | None = None, allow_drop: bool = False,
                 payload_correction: bool = True, python: str | None = None, client=None,
                 plugins: tuple[Plugin, ...] | None = None):
        super().__init__(scenario, n_hosts, run_id=run_id, state_dir=state_dir,
                         allow_drop=allow_drop, payload_correction=payload_correction)
        n_gpus = gpu_count()
        self._spec_kw = {"use_gpus": n_gpus > 0 if gpus is None else gpus,
                         "gpu_count": n_gpus, "payload_correction": payload_correction}
        if image is not None:
            self._spec_kw["image"] = image
        self.spec = DockerRunSpec.new(scenario, self.n_hosts, self.run_id, **self._spec_kw)
        self.prefix = self.spec.prefix
        system = Path(sys.base_prefix).resolve() in SYSTEM_PREFIXES
        self.python = python or ("image" if self.spec.use_gpus or system else "host")
        if self.python not in PYTHONS:
            raise ValueError(f"python: expected one of {', '.join(PYTHONS)}, got {python!r}")
        if self.python == "host" and system:
            raise ValueError(f"python: 'host' needs an interpreter outside the system "
                             f"directories (a virtual environment's base, pyenv, conda), "
                             f"got {sys.base_prefix}; use python='image'")
        self.results_dir = Path(results_dir) if results_dir else (
            Path(state_dir).resolve().parent if state_dir else None)
        self._client = client
        if plugins is not None:
            self.plugins = tuple(plugins)
        self.capabilities: Capabilities | None = None
        self.history: list[Argv] = []
        self._containers: dict[int, object] = {}
        self._created: dict[str, list[str]] = {"containers": [], "networks": [], "volumes": []}
        self.delay_line_scheduling: list[str] = []
        self.cgroup_parent: str | None = None

    # -- names, addresses, environment ---------------------------------------------
    def addr(self, i: int) -> str:
        return self.spec.addr(i)

    def worker_env(self, i: int) -> dict[str, str]:
        return self.spec.worker_env(i)

    def _mounts(self) -> dict[str, dict]:
        binds = {str(REPO_ROOT): {"bind": str(REPO_ROOT), "mode": "ro"}}
        # the cache: the run's volume at the host cache's real path (.cache may be a
        # link), seeded from the host's cache mounted read-only beside it
        cache = self._cache_dir()
        cache.mkdir(parents=True, exist_ok=True)
        binds[str(cache)] = {"bind": HOST_CACHE, "mode": "ro"}
        binds[self.spec.volume] = {"bind": str(cache), "mode": "rw"}
        if self.results_dir is not None:
            self.results_dir.mkdir(parents=True, exist_ok=True)
            binds[str(self.results_dir)] = {"bind": str(self.results_dir), "mode": "rw"}
        if self.python == "host":  # the interpreter and its environment, at their own paths
            for prefix in {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()}:
                if not prefix.is_relative_to(REPO_ROOT):
                    binds[str(prefix)] = {"bind": str(prefix), "mode": "ro"}
        for p in self.plugins:  # a file of the checkout is there; a module, in its environment
            if is_file_source(p.source) and not Path(p.source).is_relative_to(REPO_ROOT):
                binds[p.source] = {"bind": p.source, "mode": "ro"}
        return binds

    @staticmethod
    def _cache_dir() -> Path:
        return default_cache_dir().resolve()

    def _write_state(self) -> None:
        """Every name the run may create, before it is created (and the pids spawned)."""
        write_state(self.state_path, self.spec, self.run_id, [p.pid for p in self._procs])

    # -- lifecycle -----------------------------------------------------------------
    def _prepare(self) -> None:
        if self._client is None:
            self._client = docker_client()
        # With the cgroupfs driver every container sits under /docker, whose CPU weight
        # is that of one process: on a busy host the workers of all containers together
        # would get one process's share. Under the root cgroup each container weighs
        # what one netns worker does.
        cgroupfs = self._client.info().get("CgroupDriver") == "cgroupfs"
        self.cgroup_parent = "/" if cgroupfs else None

    def _create_network(self) -> None:
        """The run's bridge network; another prefix (and /24) when its subnet or name is
        taken by someone else's network."""
        import docker

        for _ in range(MAX_NAME_DRAWS):
            self._write_state()  # before anything exists: a kill at any point is cleanable
            ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(
                subnet=self.spec.subnet, gateway=self.spec.gateway)])
            try:
                self._client.networks.create(
                    self.spec.network, driver="bridge", ipam=ipam, check_duplicate=True,
                    options={"com.docker.network.driver.mtu": str(self.spec.network_mtu)})
            except docker.errors.APIError as err:
                if err.status_code not in (403, 409):  # pool overlaps, name taken
                    raise
                self.state_path.unlink(missing_ok=True)
                fresh = DockerRunSpec.new(self.scenario, self.n_hosts, self.run_id,
                                          **self._spec_kw)
                self.spec = dataclasses.replace(self.spec, prefix=fresh.prefix,
                                                subnet_index=fresh.subnet_index)
                self.prefix = fresh.prefix
                continue
            self._created["networks"].append(self.spec.network)
            return
        raise RuntimeError(f"no free network name and /24 in 198.18.0.0/15 after "
                           f"{MAX_NAME_DRAWS} draws")

    def _build(self) -> None:
        self._write_state()  # before anything exists: a kill at any point is cleanable
        self.capabilities = self._probe_capabilities()
        self.mechanisms = mechanisms_for(self.scenario, self.n_hosts, self.capabilities,
                                         self.allow_drop)
        self.check_schedule()
        self.spec = dataclasses.replace(
            self.spec, netem="netem" in self.mechanisms.values(),
            delay_line="delayline" in self.mechanisms.values())
        self._create_network()  # its MTU depends on the delay mechanism
        sp = self.spec
        self._client.volumes.create(sp.volume)
        self._created["volumes"].append(sp.volume)
        for i in range(self.n_hosts):
            self._containers[i] = self._create_container(i)
        seed = ContainerExecutor(self._containers[0], self.history)
        cache = str(self._cache_dir())
        seed.run(("cp", "-a", f"{HOST_CACHE}/.", cache))
        seed.run(("chown", "-R", f"{WORKER_USER}:{WORKER_USER}", cache))
        if self.python == "host":
            check_host_python(self._containers[0], sys.executable, sp.image)
        check_plugins(self._containers[0], sys.executable if self.python == "host"
                      else "python3", self.plugins, sp.image)
        if sp.delay_line:
            self.delay_line_scheduling = [wait_for_delay_line(c)
                                          for c in self._containers.values()]
        for i, c in self._containers.items():
            ex = ContainerExecutor(c, self.history)
            ex.run_all(sp.shaping_argvs(i))
            ex.run(("touch", SHAPED_FILE))  # the entrypoint starts its command now

    def _create_container(self, i: int):
        import docker

        sp, api = self.spec, self._client.api
        gpu = sp.gpu(i)
        env = {**sp.worker_env(i), "AQ_SHAPED_FILE": SHAPED_FILE, "PYTHONPATH": str(REPO_ROOT)}
        if sp.delay_line:  # the entrypoint starts the delay line first (docker/entrypoint.py)
            env["AQ_DELAYLINE_CONFIG"] = sp.tunnel_config(i).to_json()
        host_config = api.create_host_config(
            network_mode=sp.network, cap_add=["NET_ADMIN"], binds=self._mounts(),
            cgroup_parent=self.cgroup_parent,
            devices=[f"{TUN_DEVICE}:{TUN_DEVICE}:rwm"] if sp.delay_line else None,
            device_requests=None if gpu is None else [docker.types.DeviceRequest(
                device_ids=[str(gpu)], capabilities=[["gpu"]])])
        networking = api.create_networking_config(
            {sp.network: api.create_endpoint_config(ipv4_address=sp.network_addr(i))})
        created = api.create_container(
            sp.image, name=sp.container(i), hostname=sp.container(i), environment=env,
            host_config=host_config, networking_config=networking,
            labels={"aqsgd-bench.run": self.run_id})
        self._created["containers"].append(sp.container(i))
        api.start(created["Id"])
        return self._client.containers.get(created["Id"])

    def _probe_capabilities(self) -> Capabilities:
        """netem in a scratch container, where the scenario asks for delay, jitter or
        loss (bench/launch/docker/checks.py)."""
        name = self.spec.scratch_container
        self._created["containers"].append(name)  # recorded until it is gone
        try:
            return probe_capabilities(self._client, self.spec.image, name, self.scenario,
                                      self.n_hosts, self.history)
        finally:
            self._created["containers"].remove(name)

    def check_delay_line(self) -> None:
        """Raise if a container's delay line, which carries every packet, has died."""
        if self.spec.delay_line:
            check_delay_lines(list(self._containers.values()), self.history)

    def _remove(self) -> None:
        if self._schedule is not None:
            self._schedule.stop()  # the containers go: nothing to put back
        stop_all(self._procs, TEARDOWN_GRACE_S)
        if self._client is not None:
            teardown_docker(self._created, self._client)  # only what this run created
        self.state_path.unlink(missing_ok=True)

    # -- processes -----------------------------------------------------------------
    def exec_argv(self, i: int, argv: list[str], env: dict[str, str] | None = None,
                  user: str = WORKER_USER, tied: bool = False) -> list[str]:
        """`docker exec` running argv in container i as `user`: a Python interpreter path
        of this host becomes the image's `python3`; env holds only what the worker
        needs (worker_env(i), what the caller set on top of this process's
        environment, and the NCCL/gloo/torch/OMP variables of this process). `tied`:
        through the entrypoint's --tied mode, so that argv stops when the client's
        stdin closes (spawn with stdin_pipe=True)."""
        host_python = self.python == "host" and argv and argv[0] == sys.executable
        if argv and not host_python and Path(argv[0]).name.startswith("python"):
            argv = ["python3", *argv[1:]]
        full = {k: v for k, v in os.environ.items() if k.startswith(PASSED_PREFIXES)}
        if env is not None:
            full.update({k: v for k, v in env.items()
                         if os.environ.get(k) != v or k.startswith(PASSED_PREFIXES)})
        full.update(self.worker_env(i))
        full.update(SAFE_PATH_ENV)  # bench.launch.process, Note [safe path]
        full.pop("DOCKER_HOST", None)
        full["PYTHONPATH"] = str(REPO_ROOT)
        cwd = Path.cwd()
        workdir = cwd if cwd.is_relative_to(REPO_ROOT) or (
            self.results_dir and cwd.is_relative_to(self.results_dir)) else REPO_ROOT
        flags = ["-i"] if tied else []
        for k, v in sorted(full.items()):
            flags += ["-e", f"{k}={v}"]
        tie = [*ENTRYPOINT, "--tied"] if tied else []
        return ["docker", "exec", *flags, "-u", user, "-w", str(workdir),
                self.spec.container(i), *tie, *isolated(argv)]

    def spawn(self, i: int, argv: list[str], env: dict[str, str] | None = None,
              log_path: Path | str | None = None) -> subprocess.Popen:
        """Run argv in container i as the worker user, through `docker exec` in its own
        process group; output appended to log_path. The results directory is handed to
        the worker user first (the harness made the cell's folders as this user)."""
        if self.results_dir is not None:
            ContainerExecutor(self._containers[i], self.history).run(
                ("chown", "-R", f"{WORKER_USER}:{WORKER_USER}", str(self.results_dir)))
        proc = spawn_group(self.exec_argv(i, argv, env, tied=True), dict(os.environ), log_path,
                           stdin_pipe=True)
        self._procs.append(proc)
        self._note_log(log_path)
        self._write_state()
        return proc

    # -- the transport (bench.launch.hosts) ------------------------------------------
    def helper_argv(self, i: int, argv: list[str]) -> list[str]:
        """argv in container i through `docker exec` (a leading "python": the image's)."""
        return self.exec_argv(i, argv)

    def start_helper(self, i: int, argv: list[str]) -> subprocess.Popen:
        """Through the entrypoint's --tied mode: stopping the client stops argv."""
        return spawn_group(self.exec_argv(i, argv, tied=True), dict(os.environ),
                           pipe_stdout=True, stdin_pipe=True)

    def _run_on_host(self, i: int, argv: Argv) -> subprocess.CompletedProcess:
        return self.run_as_root(i, argv)

    def _framing(self) -> float:
        return self.spec.factor

    def _schedule_plan(self) -> tuple[ShapingPlan, tuple[Interface, ...]]:
        return self.spec.shaping(), tuple(self.spec.interface(i) for i in range(self.n_hosts))

    def run_as_root(self, i: int, argv: Argv) -> subprocess.CompletedProcess:
        """One command (tc, ip) in container i as root, kept in the run's history."""
        return ContainerExecutor(self._containers[i], self.history).run(argv)

    def _commands(self) -> list[str]:
        return [" ".join(c) for c in self.history]

    def _record(self) -> dict:
        """The containers, the network, the image and each container's GPU."""
        sp = self.spec
        return {
            "capabilities": self.capabilities.to_dict() if self.capabilities else None,
            "shaping": {p: MECHANISMS.get(m, m) for p, m in self.mechanisms.items()},
            "data_plane": ("TUN of each container's delay line, over the Docker bridge "
                           "network" if sp.delay_line else
                           "Docker bridge network, eth0 of each container"),
            "delay_line_scheduling": self.delay_line_scheduling or None,
            "cgroup_parent": self.cgroup_parent,
            "python": {"mode": self.python, "executable": sys.executable
                       if self.python == "host" else "python3 (the image's)"},
            "payload_correction_factor": sp.factor,
            "image": sp.image,
            "network": {"name": sp.network, "subnet": sp.subnet, "gateway": sp.gateway},
            "volumes": [sp.volume],
            "hosts": [{"host": i, "container": sp.container(i), "device": sp.device,
                       "addr": sp.addr(i), "network_addr": sp.network_addr(i),
                       "gpu": sp.gpu(i)} for i in range(self.n_hosts)],
            "containers": sp.containers(),
        }
