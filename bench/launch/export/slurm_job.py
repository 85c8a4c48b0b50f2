"""What a Slurm job of bench/launch/export/slurm.py runs on the cluster: the steps of its
sbatch script, each a command of this module.

    srun --ntasks-per-node=1 python -m bench.launch.export.slurm_job address [--iface DEV]
    srun --ntasks-per-node=1 --overlap python -m bench.launch.export.slurm_job shape \\
        --scenario S --addrs A0,A1 --iface DEV --links DIR        # held until SIGTERM
    python -m bench.launch.export.slurm_job links --links DIR --nodes N [--allow-unshaped]
    python -m bench.launch.export.slurm_job finish --cell DIR --links DIR --returncode RC \\
        --started T

`address` prints `NODEID ADDR`. `shape` applies this node's part of the host shaping plan
(bench.launch.export.multihost.plan_hosts) on DEV, writes `DIR/node{I}.json` (what it
ran, the commands removing it, or why it could not shape) and removes it once
DIR/release exists or on SIGTERM/SIGINT. `links` exits 0 when every node is shaped (or
`--allow-unshaped`), else 1 naming each node. `finish` writes a cell's result files as
`bench sweep` does. docs/multihost.md, "A Slurm cluster". No launcher imported.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from tenacity import Retrying, retry_if_result, stop_after_delay, wait_fixed

from bench import REPO_ROOT
from bench.launch.export.multihost import plan_hosts
from bench.net.executor import format_argv
from bench.net.scenario import load_scenario

__all__ = ["CELL_HEAD", "main", "node_address"]

CELL_HEAD = "slurm-cell.json"  # the meta.json head the export writes into each cell
LOG_TAIL_LINES = 40
WAIT_RECORDS_S = 120.0  # how long `links` waits for every node's record
RELEASE = "release"  # the file in the links folder that ends every node's shaping step
POLL_S = 0.5
TIMED_OUT = 124  # the exit status of coreutils' `timeout` when the time ran out


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _node_id() -> int:
    value = os.environ.get("SLURM_NODEID", "")
    if not value.isdigit():
        raise ValueError(f"SLURM_NODEID: expected this node's index in the job (run "
                         f"this under srun), got {value!r}")
    return int(value)


def node_address(iface: str | None) -> str:
    """This node's IPv4 address on `iface`, or (None) the NodeAddr Slurm has for it."""
    if iface is not None:
        out = subprocess.run(["ip", "-4", "-o", "addr", "show", "dev", iface],
                             capture_output=True, text=True, check=False)
        words = out.stdout.split()
        if out.returncode != 0 or "inet" not in words:
            raise ValueError(f"--iface {iface}: no IPv4 address on this node "
                             f"({platform.node()}): {out.stderr.strip() or 'none assigned'}")
        return words[words.index("inet") + 1].split("/")[0]
    name = os.environ.get("SLURMD_NODENAME", platform.node())
    shown = subprocess.run(["scontrol", "show", "node", "-o", name], capture_output=True,
                           text=True, check=True).stdout.split()
    addr = dict(w.split("=", 1) for w in shown if "=" in w)["NodeAddr"]
    try:
        return str(ipaddress.IPv4Address(addr))
    except ValueError:  # a name: the address it resolves to here
        import socket

        return socket.gethostbyname(addr)


# -- the shaping step ---------------------------------------------------------------
def _run_all(argvs) -> None:
    for argv in argvs:
        done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{format_argv(argv)} failed (exit {done.returncode}): "
                               f"{done.stderr.strip()}")


CAP_NET_ADMIN = 12  # linux/capability.h: what tc needs to change a qdisc


def _cannot_shape() -> str | None:
    """Why this process cannot run tc here; None when it can."""
    status = Path("/proc/self/status").read_text().split("\n")
    effective = int(next(ln for ln in status if ln.startswith("CapEff:")).split()[1], 16)
    if not effective >> CAP_NET_ADMIN & 1:
        return (f"no CAP_NET_ADMIN (uid {os.geteuid()}): tc needs root on the node, or a "
                f"job granted that capability")
    if subprocess.run(["which", "tc"], capture_output=True, check=False).returncode:
        return "no tc on the node (iproute2)"
    return None


def shape(scenario_name: str, addrs: list[str], iface: str, links_dir: Path, *,
          netem: bool, allow_drop: bool) -> int:
    """This node's shaping, held until SIGTERM (see module doc); the exit status."""
    node = _node_id()
    scenario = load_scenario(scenario_name)
    plans, mechanisms = plan_hosts(scenario, addrs, iface, [], netem=netem,
                                   allow_drop=allow_drop)
    plan = plans[node]
    record = {"node": node, "hostname": platform.node(), "addr": addrs[node],
              "device": iface, "scenario": scenario.name, "mechanisms": mechanisms,
              "setup": [format_argv(a) for a in plan.setup],
              "removal": [format_argv(a) for a in plan.teardown],
              "shaped": False, "reason": None, "removed": False, "applied_at": None}
    path = links_dir / f"node{node}.json"
    links_dir.mkdir(parents=True, exist_ok=True)
    from bench.results.files import write_json  # here: `address` stays light
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    record["reason"] = _cannot_shape()
    if record["reason"] is None:
        try:
            _run_all(plan.setup)
            record.update(shaped=True, applied_at=_now())
        except RuntimeError as err:
            record["reason"] = str(err)
            _remove(plan.teardown)  # whatever part of it was made
    write_json(path, record)
    print(f"node {node}: {'shaped' if record['shaped'] else 'not shaped: ' + record['reason']}",
          flush=True)
    if not record["shaped"]:
        return 0  # `links` decides whether the job may go on
    release = links_dir / RELEASE
    # an event and a file to wait for, not an attempt to retry: no tenacity here
    while not stop.wait(POLL_S) and not release.exists():
        pass
    _remove(plan.teardown)
    write_json(path, {**record, "removed": True, "removed_at": _now()})
    return 0


def _remove(argvs) -> None:
    """Run each removal command; one whose qdisc or device is already gone fails
    harmlessly and is skipped."""
    for argv in argvs:
        subprocess.run(list(argv), capture_output=True, check=False)


def check_links(links_dir: Path, nodes: int, allow_unshaped: bool) -> int:
    """The job's verdict on its links (see module doc); prints one line per node."""
    paths = [links_dir / f"node{i}.json" for i in range(nodes)]
    Retrying(stop=stop_after_delay(WAIT_RECORDS_S), wait=wait_fixed(0.2),
             retry=retry_if_result(lambda written: not written),
             retry_error_callback=lambda state: False)(lambda: all(p.is_file() for p in paths))
    missing = [i for i, p in enumerate(paths) if not p.is_file()]
    if missing:
        print(f"links: no shaping record from node(s) {missing} within "
              f"{WAIT_RECORDS_S:g} s in {links_dir}", file=sys.stderr)
        return 1
    records = [json.loads(p.read_text()) for p in paths]
    unshaped = [r for r in records if not r["shaped"]]
    for r in records:
        print(f"node {r['node']} ({r['hostname']}, {r['addr']} on {r['device']}): "
              f"{'shaped' if r['shaped'] else 'NOT shaped: ' + r['reason']}")
    if unshaped and not allow_unshaped:
        print(f"links: {len(unshaped)} of {nodes} node(s) could not shape their interface "
              f"(above); run the job as root where tc may run, or export it with "
              f"--allow-unshaped to measure the real links and record them as such",
              file=sys.stderr)
        return 1
    return 0


# -- a cell's result files ----------------------------------------------------------
def _links_block(links_dir: Path | None, nodes: int) -> dict:
    """meta.json's launcher block of a Slurm cell: the job, and what the links were."""
    records = []
    if links_dir is not None:
        records = [json.loads(p.read_text()) for p in sorted(links_dir.glob("node*.json"))]
    shaped = bool(records) and len(records) >= nodes and all(r["shaped"] for r in records)
    return {
        "launcher": "slurm",
        "shaped": shaped,
        "data_plane": ("each node's interface, shaped by tc (the host shaping plan)" if shaped
                       else "each node's interface as it is (real links, nothing emulated)"),
        "job_id": os.environ.get("SLURM_JOB_ID"),
        "job_nodes": os.environ.get("SLURM_JOB_NODELIST"),
        "cluster": os.environ.get("SLURM_CLUSTER_NAME"),
        "batch_host": platform.node(),
        "nodes": records,
    }


def finish(cell_dir: Path, links_dir: Path | None, returncode: int, started: float,
           reason: str | None = None) -> int:
    """Write the cell's result files (see module doc); 0 when the cell is ok."""
    from bench.results.files import log_tail, metrics_frame, provenance, write_csv, write_json

    meta = json.loads((cell_dir / CELL_HEAD).read_text())
    world = meta["spec"]["workload"]["stages"] * meta["spec"]["workload"]["replicas"]
    launcher = _links_block(links_dir, world)
    meta["launcher"] = {**meta["launcher"], **launcher}
    meta["cell"]["shaped"] = launcher["shaped"] and meta["cell"]["rate_mbit"] is not None
    meta["provenance"] = provenance(REPO_ROOT)
    failure = None
    if reason is not None:
        failure = {"rank": None, "returncode": returncode, "reason": reason}
    elif returncode != 0:
        logs = sorted((cell_dir / "logs").glob("rank*.log"))
        rank = next((int(p.stem[4:]) for p in logs if "Traceback" in p.read_text(
            errors="replace")), 0)
        why = ("ran past its timeout (the script's `timeout` stopped it)"
               if returncode == TIMED_OUT else f"exited with code {returncode}")
        failure = {"rank": rank, "returncode": returncode,
                   "reason": f"the job step of the cell {why}",
                   "log_tail": log_tail(cell_dir / "logs" / f"rank{rank}.log",
                                        LOG_TAIL_LINES)}
    else:
        paths = [cell_dir / "metrics" / f"rank{r}.jsonl" for r in range(world)]
        missing = [r for r, p in enumerate(paths) if not p.is_file()]
        if missing:
            failure = {"rank": missing[0], "returncode": 0,
                       "reason": f"rank(s) {missing} exited 0 but wrote no metrics file"}
        else:
            metrics, peers = metrics_frame(paths, meta["cell"]["name"])
            write_csv(cell_dir / "peers.csv", peers)
            write_csv(cell_dir / "metrics.csv", metrics)
    meta.update(status="ok" if failure is None else "failed", failure=failure,
                started_at=datetime.fromtimestamp(started, timezone.utc)
                .isoformat(timespec="seconds"),
                wall_s=round(time.time() - started, 3), finished_at=_now())
    write_json(cell_dir / "meta.json", meta)
    print(f"{meta['status']:6s} {meta['cell']['name']} ({meta['wall_s']:.1f} s, links "
          f"{'shaped' if launcher['shaped'] else 'real'})"
          + (f": {failure['reason']}" if failure else ""), flush=True)
    return 0 if failure is None else 1


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.launch.export.slurm_job",
                                description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    a = sub.add_parser("address")
    a.add_argument("--iface", default=None)
    s = sub.add_parser("shape")
    s.add_argument("--scenario", required=True)
    s.add_argument("--addrs", required=True, help="every node's address, by node id")
    s.add_argument("--iface", required=True)
    s.add_argument("--links", type=Path, required=True)
    s.add_argument("--no-netem", action="store_true")
    s.add_argument("--allow-drop", action="store_true")
    k = sub.add_parser("links")
    k.add_argument("--links", type=Path, required=True)
    k.add_argument("--nodes", type=int, required=True)
    k.add_argument("--allow-unshaped", action="store_true")
    f = sub.add_parser("finish")
    f.add_argument("--cell", type=Path, required=True)
    f.add_argument("--links", type=Path, default=None)
    f.add_argument("--returncode", type=int, required=True)
    f.add_argument("--started", type=float, required=True)
    f.add_argument("--reason", default=None, help="why the cell never ran")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    try:
        if args.command == "address":
            print(f"{_node_id()} {node_address(args.iface)}")
            return 0
        if args.command == "shape":
            return shape(args.scenario, args.addrs.split(","), args.iface, args.links,
                         netem=not args.no_netem, allow_drop=args.allow_drop)
        if args.command == "links":
            return check_links(args.links, args.nodes, args.allow_unshaped)
        return finish(args.cell, args.links, args.returncode, args.started, args.reason)
    except (ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
