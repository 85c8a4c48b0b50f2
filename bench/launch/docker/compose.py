"""The compose file equivalent to a Docker launcher run, for users who prefer Compose.

    python -m bench docker compose --scenario 100mbps --out compose.yaml
    docker compose -f compose.yaml up        # or docker-compose (1.27 and later)

One service per rank on one network of the run's /24 in 198.18.0.0/15, each with
NET_ADMIN only, the worker environment of bench.launch.docker.spec, a GPU reservation
where the run uses GPUs, and its tc commands in AQ_SHAPING_ARGVS (the image's entrypoint
runs them as root, without a shell, before it starts the worker as the non-root user).
Delay, jitter and loss: netem leaves (`delay_mechanism="netem"`) or each service's delay
line (`"delayline"`: the TUN device and AQ_DELAYLINE_CONFIG). The Compose Specification
without `version`; every volume an absolute host path. The ranks are placed as `bench
run --scenario S --modes MODE` would. docs/docker.md, "Compose".
"""

from __future__ import annotations

import json
from pathlib import Path

from bench import REPO_ROOT
from bench.launch.docker.spec import TUN_DEVICE, DockerRunSpec
from bench.net.scenario import NetworkScenario

__all__ = ["CONFIG_IN_CONTAINER", "DELAY_MECHANISMS", "WORKER_PORT", "WORKSPACE",
           "compose_dict", "write_compose"]

WORKER_PORT = 29500  # the rendezvous port on host0
WORKSPACE = "/workspace"
CONFIG_IN_CONTAINER = "/etc/aqsgd/run.yaml"  # outside /workspace: no mount point in a ro mount
DELAY_MECHANISMS = ("netem", "delayline")


def compose_dict(scenario: NetworkScenario, n_hosts: int | None = None, *,
                 config: str | Path = "examples/tiny-2stage.yaml",
                 checkout: Path = REPO_ROOT, gpus: bool = False,
                 gpu_count: int = 0, image: str | None = None,
                 subnet_index: int = 1, delay_mechanism: str = "netem",
                 ranks: tuple[int, ...] | None = None) -> dict:
    """The compose file as a dict: one service per rank running the worker with the run
    config `config` (a host path; a relative one is under `checkout`), world size
    n_hosts (default: the scenario's hosts); delay, jitter and loss by
    `delay_mechanism` (one of DELAY_MECHANISMS, see module doc); `ranks`: the rank each
    host runs (bench.net.placement; default host i runs rank i). Volumes are absolute."""
    if delay_mechanism not in DELAY_MECHANISMS:
        raise ValueError(f"delay_mechanism: expected one of {', '.join(DELAY_MECHANISMS)}, "
                         f"got {delay_mechanism!r}")
    n = scenario.n_hosts if n_hosts is None else n_hosts
    ranks = tuple(range(n)) if ranks is None else ranks
    if sorted(ranks) != list(range(n)):
        raise ValueError(f"ranks: expected each of ranks 0..{n - 1} once, got {ranks}")
    checkout = Path(checkout).resolve()
    config_path = (checkout / config).resolve()  # an absolute `config` stays itself
    kw = {"image": image} if image else {}
    impaired = any(scenario.link_spec(a, b).delay_ms or scenario.link_spec(a, b).jitter_ms
                   or scenario.link_spec(a, b).loss_pct
                   for a in range(n) for b in range(n) if a != b)
    delay_line = impaired and delay_mechanism == "delayline"
    spec = DockerRunSpec(scenario, n, "aqsgd", subnet_index, use_gpus=gpus,
                         gpu_count=gpu_count, netem=impaired and not delay_line,
                         delay_line=delay_line, **kw)
    services = {}
    for i in range(n):
        env = {**spec.worker_env(i), "NCCL_HOSTID": f"aqsgd-host{i}",
               "PYTHONPATH": WORKSPACE,
               "AQ_SHAPING_ARGVS": json.dumps([list(a) for a in spec.shaping_argvs(i)])}
        if delay_line:
            env["AQ_DELAYLINE_CONFIG"] = spec.tunnel_config(i).to_json()
        service = {
            "image": spec.image,
            "hostname": f"host{i}",
            "cap_add": ["NET_ADMIN"],
            "networks": {"aqsgd": {"ipv4_address": spec.network_addr(i)}},
            "environment": env,
            "volumes": [f"{checkout}:{WORKSPACE}:ro", f"{checkout / 'runs'}:{WORKSPACE}/runs:rw",
                        f"{checkout / '.cache'}:{WORKSPACE}/.cache:rw",
                        f"{config_path}:{CONFIG_IN_CONTAINER}:ro"],
            "working_dir": WORKSPACE,
            "command": ["python3", "-P", "-m", "aqsgd.train.worker", "--config",
                        CONFIG_IN_CONTAINER,
                        "--rank", str(ranks[i]), "--world-size", str(n),
                        "--master-addr", spec.addr(ranks.index(0)),
                        "--master-port", str(WORKER_PORT)],
        }
        if delay_line:
            service["devices"] = [f"{TUN_DEVICE}:{TUN_DEVICE}"]
        gpu = spec.gpu(i)
        if gpu is not None:
            service["deploy"] = {"resources": {"reservations": {"devices": [
                {"driver": "nvidia", "device_ids": [str(gpu)], "capabilities": ["gpu"]}]}}}
        services[f"host{i}"] = service
    return {
        "services": services,
        "networks": {"aqsgd": {
            "driver": "bridge",
            "driver_opts": {"com.docker.network.driver.mtu": str(spec.network_mtu)},
            "ipam": {"config": [{"subnet": spec.subnet, "gateway": spec.gateway}]}}},
    }


def write_compose(path: Path | str, scenario: NetworkScenario, **kw) -> Path:
    """Write compose_dict(scenario, **kw) as YAML to path (keys in the order built)."""
    import yaml

    path = Path(path)
    header = (f"# Generated by `python -m bench docker compose --scenario {scenario.name}`: "
              f"{scenario.n_hosts if kw.get('n_hosts') is None else kw['n_hosts']} "
              f"workers, links shaped inside each container before its worker starts.\n")
    path.write_text(header + yaml.safe_dump(compose_dict(scenario, **kw), sort_keys=False,
                                            width=100))
    return path
