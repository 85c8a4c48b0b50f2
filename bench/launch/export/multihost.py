"""Multi-host planner: the commands to run a scenario on real machines.

    python -m bench.launch.export.multihost --scenario 100mbps --hostfile hosts.txt \\
        -- --config run.yaml
    python -m bench.launch.export.multihost --scenario 100mbps --hosts 10.0.0.1,10.0.0.2 \\
        --iface eth0 -- --config run.yaml

prints, for each host, the tc commands shaping its interface (the host shaping plan,
bench.net.shaping, rendered on the host's interface: the hostfile's `interface=` of
that host, or `--iface` for every host; egress per destination with htb, netem for
delay/jitter/loss; downlink through an ifb), the commands removing them, and the
torchrun line starting its worker (PYTHONSAFEPATH=1: bench.launch.process, Note [safe
path]). Nothing is executed: this is a planner
(`plan_hosts` returns the commands as data), not a Launcher context manager
(bench/launch/base.py); the user runs the commands on each host. Most GPU servers have
netem; pass --no-netem for hosts without it (delay, jitter and loss are then refused
unless --allow-drop).
"""

from __future__ import annotations

import argparse
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.launch.hostfile import load_hostfile
from bench.launch.process import SAFE_PATH_ENV
from bench.net.executor import Argv, format_argv
from bench.net.scenario import NetworkScenario, load_scenario
from bench.net.shaping import Interface, shaping_plan
from bench.net.tc import Capabilities, mechanisms_for, payload_factor

__all__ = ["HostPlan", "hostfile_hosts", "plan_hosts", "main"]

IFB_NAME = "ifb-aqsgd"  # fits in 15 characters


@dataclass(frozen=True)
class HostPlan:
    host: int
    address: str
    setup: tuple[Argv, ...]
    teardown: tuple[Argv, ...]
    env: tuple[tuple[str, str], ...]
    launch: Argv

    def render(self) -> str:
        env = " ".join(f"{k}={v}" for k, v in self.env)
        lines = [f"# host {self.host} ({self.address}): shape (as root)"]
        lines += [format_argv(a) for a in self.setup] or ["# (nothing to shape)"]
        lines += [f"# host {self.host}: start the worker", f"{env} {format_argv(self.launch)}"]
        lines += [f"# host {self.host}: remove the shaping afterwards"]
        lines += [format_argv(a) for a in self.teardown] or ["# (nothing to remove)"]
        return "\n".join(lines)


def plan_hosts(scenario: NetworkScenario, hosts: list[str], iface: str | Sequence[str],
               worker_args: list[str], netem: bool = True, allow_drop: bool = False,
               payload_correction: bool = True, master_port: int = 29500
               ) -> tuple[list[HostPlan], dict[str, str]]:
    """One HostPlan per address (host i = pipeline rank i), shaping `iface` (one name:
    every host's; a sequence: host i's is iface[i]); plus the mechanisms used."""
    ifaces = [iface] * len(hosts) if isinstance(iface, str) else list(iface)
    if len(ifaces) != len(hosts):
        raise ValueError(f"iface: expected one interface per host ({len(hosts)}), got "
                         f"{ifaces!r}")
    for k, a in enumerate(hosts):
        try:
            ipaddress.IPv4Address(a)
        except ValueError:
            raise ValueError(f"hosts[{k}]: expected an IPv4 address (tc filters match on "
                             f"addresses, not names), got {a!r}") from None
    n = len(hosts)
    if n < 2:
        raise ValueError(f"hosts: expected at least 2 addresses, got {hosts!r}")
    mechanisms = mechanisms_for(scenario, n, Capabilities(netem=netem, delay_line=False),
                                allow_drop)
    shaping = shaping_plan(scenario, n, factor=payload_factor() if payload_correction else 1.0,
                           netem=netem)
    plans = []
    for i, address in enumerate(hosts):
        where = Interface(ifaces[i], tuple(hosts), ifb=IFB_NAME)
        setup = shaping.setup_argvs(i, where)
        teardown = shaping.removal_argvs(i, where)
        launch = ("torchrun", "--nnodes", str(n), "--nproc-per-node", "1", "--node-rank",
                  str(i), "--master-addr", hosts[0], "--master-port", str(master_port),
                  "-m", "aqsgd.train.worker", *worker_args)
        env = (("GLOO_SOCKET_IFNAME", ifaces[i]), ("NCCL_SOCKET_IFNAME", ifaces[i]),
               *SAFE_PATH_ENV.items())
        plans.append(HostPlan(i, address, tuple(setup), tuple(teardown), env, launch))
    return plans, mechanisms


def hostfile_hosts(path: Path | str, iface: str | None = None) -> tuple[list[str], list[str]]:
    """(addresses, interfaces) of a hostfile's machines (bench.launch.hostfile), each
    with its own `interface=`, or `iface` for every one; a ValueError for a machine of
    several slots (the plan starts one rank per host)."""
    hosts = load_hostfile(path).hosts
    several = [f"{h.name} (slots={h.slots})" for h in hosts if h.slots != 1]
    if several:
        raise ValueError(f"{path}: the multi-host plan runs one rank per host; these hosts "
                         f"have more slots: {', '.join(several)}")
    return [h.host for h in hosts], [iface or h.interface for h in hosts]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Print the tc and torchrun commands of a "
                                     "scenario for real hosts (nothing is executed).")
    parser.add_argument("--scenario", required=True, help="scenario name or YAML path")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--hosts", help="comma-separated IPv4 addresses, host i = pipeline "
                       "rank i, the first is the torchrun master (needs --iface)")
    where.add_argument("--hostfile", type=Path, help="the SSH launcher's hostfile "
                       "(bench/launch/hostfile.py): its hosts in order, each with its "
                       "own interface=")
    parser.add_argument("--iface", default=None, help="network interface on every host "
                        "(with --hostfile: instead of each host's interface=)")
    parser.add_argument("--master-port", type=int, default=29500)
    parser.add_argument("--no-netem", action="store_true", help="hosts have no netem qdisc")
    parser.add_argument("--allow-drop", action="store_true",
                        help="run without the properties the hosts cannot emulate")
    parser.add_argument("--no-payload-correction", action="store_true",
                        help="configure tc with the scenario's rate literally (payload ~4.4%% "
                        "lower)")
    parser.add_argument("worker_args", nargs="*",
                        help="arguments for aqsgd.train.worker (after --)")
    args = parser.parse_args(argv)
    if args.hosts is not None and args.iface is None:
        parser.error("--hosts needs --iface (or give --hostfile, whose hosts name theirs)")
    addrs, ifaces = (hostfile_hosts(args.hostfile, args.iface) if args.hostfile else
                     (args.hosts.split(","), args.iface))
    scenario = load_scenario(args.scenario)
    plans, mechanisms = plan_hosts(
        scenario, addrs, ifaces, args.worker_args,
        netem=not args.no_netem, allow_drop=args.allow_drop,
        payload_correction=not args.no_payload_correction, master_port=args.master_port)
    print(f"# mechanisms: {mechanisms}")
    if scenario.scheduled_links(len(plans)):
        print("# NOTE: the scenario's links have schedules; these commands set each link's "
              "own values only (a launcher runs schedules: bench.launch.schedules)")
    for plan in plans:
        print(plan.render())
        print()


if __name__ == "__main__":
    main()
