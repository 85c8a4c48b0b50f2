"""Slurm export: one sbatch script that runs the cells of one scenario of a sweep on a
cluster, one after another on the same nodes, one torchrun agent per node.

    python -m bench slurm --scenario 100mbps --sweep scenarios/sweeps/smoke.yaml \\
        --iface eth0 --partition gpu --out /shared/results/smoke
    sbatch /shared/results/smoke/slurm-100mbps.sbatch

`bench slurm` writes each cell's `config.yaml` and `slurm-cell.json` (the head of its
meta.json) into the results folder, and `render_sbatch` writes the script beside them.
The job's steps (bench/launch/export/slurm_job.py): every node's address; every node
loading the same copy of each plug-in the cells run (else the job stops); with `--iface`
a step per node holding its part of the host shaping plan until the job ends; per cell
one torchrun agent per node, rank i on node i; then the result files, as `bench sweep`
lays them out. No link probe and no link schedules. The folder and the checkout must be
at the same paths on every node. Why each step: docs/multihost.md, "A Slurm cluster".
"""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from bench.net.scenario import NetworkScenario

if TYPE_CHECKING:
    from aqsgd.compress.plugins import Plugin

__all__ = ["SlurmCell", "SlurmExport", "SlurmJob", "SlurmOptions", "render_sbatch",
           "write_sbatch"]

START_MARGIN_S = 60  # per cell, beyond its timeout: srun, torchrun and imports on the nodes
JOB_MARGIN_MIN = 10  # the job's time limit beyond the sum of its cells'
PORTS_PER_JOB = 40  # rendezvous and store port of each cell, from a base the job id picks


class SlurmExport:
    """The launcher a Slurm cell's meta.json names (bench.launch.choice.LauncherChoice
    takes a factory's `name` and `shaped`): `shaped`, as a launcher that may shape; the
    job's own record (slurm_job.finish) says whether it did."""

    name = "slurm"
    shaped = True


@dataclass(frozen=True)
class SlurmCell:
    """One cell as the job runs it: its folder name, ranks (one per node) and timeout."""

    name: str
    world_size: int
    timeout_s: float


@dataclass(frozen=True)
class SlurmOptions:
    """The job's own settings. `iface`: the nodes' data-network interface (None: the
    address Slurm reaches each node at, and nothing shaped); `shaping`: shape it when the
    scenario has anything to shape; `netem`: the nodes have netem (else delay, jitter and
    loss are refused unless `allow_drop`); `allow_unshaped`: run on the real links where
    a node cannot shape; `sbatch`: more `#SBATCH` options (`--gpus-per-node=1`, ...)."""

    iface: str | None = None
    shaping: bool = True
    netem: bool = True
    allow_drop: bool = False
    allow_unshaped: bool = False
    partition: str | None = None
    account: str | None = None
    sbatch: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.iface is not None and (not self.iface or "/" in self.iface
                                       or len(self.iface) > 15):
            raise ValueError(f"--iface: expected a network interface name (at most 15 "
                             f"characters, no '/'), got {self.iface!r}")
        for opt in self.sbatch:
            if not opt.startswith("--") or "\n" in opt:
                raise ValueError(f"--sbatch-option: expected one sbatch option such as "
                                 f"--gpus-per-node=1, got {opt!r}")


@dataclass(frozen=True)
class SlurmJob:
    """Everything the script names: the sweep and scenario (`scenario_arg`: its name or
    file as the nodes load it), the cells in order, the results folder, the checkout and
    interpreter on the nodes."""

    sweep: str
    scenario: NetworkScenario
    scenario_arg: str
    cells: tuple[SlurmCell, ...]
    out: Path
    repo: Path
    python: str
    options: SlurmOptions = field(default_factory=SlurmOptions)
    plugins: tuple[Plugin, ...] = ()  # the plug-ins the cells run: every node needs them

    def __post_init__(self) -> None:
        if not self.cells:
            raise ValueError(f"sweep {self.sweep}: no cells of scenario "
                             f"{self.scenario.name} to run")
        for name, path in (("--out", self.out), ("the checkout", self.repo)):
            if not path.is_absolute():
                raise ValueError(f"{name}: expected an absolute path (the nodes run "
                                 f"elsewhere), got {path}")
        if self.scenario.scheduled_links(self.nodes):
            raise ValueError(f"scenario {self.scenario.name}: its links have schedules, "
                             f"which a Slurm job does not run (they need a launcher beside "
                             f"the workers: bench.launch.schedules); export a scenario "
                             f"without schedules")
        if self.shaped and self.nodes < 2:
            raise ValueError(f"scenario {self.scenario.name}: shaping needs at least 2 "
                             f"nodes, the cells use {self.nodes}")

    @property
    def nodes(self) -> int:
        return max(c.world_size for c in self.cells)

    @property
    def shaped(self) -> bool:
        """Whether the job has a shaping step: an interface, shaping asked for, and a
        scenario with a rate, cap, delay, jitter or loss on some link."""
        if self.options.iface is None or not self.options.shaping:
            return False
        n = self.nodes
        return any(self.scenario.link_spec(a, b).shaped for a in range(n)
                   for b in range(n) if a != b) or any(
            self.scenario.caps(h).uplink_mbit or self.scenario.caps(h).downlink_mbit
            for h in range(n))

    @property
    def time_limit_min(self) -> int:
        return math.ceil(sum(c.timeout_s + START_MARGIN_S for c in self.cells) / 60) \
            + JOB_MARGIN_MIN

    @property
    def slurm_dir(self) -> Path:
        """The job's own files in the results folder: the script, its output, the
        nodes' shaping records."""
        return self.out / ".slurm" / self.scenario.name


def _q(value: str | Path) -> str:
    return shlex.quote(str(value))


def _header(job: SlurmJob, command: str) -> list[str]:
    o = job.options
    links = ("shaped by tc on " + o.iface) if job.shaped else "real (nothing shaped)"
    lines = [
        "#!/bin/bash",
        f"# Written by `{command}` (bench/launch/export/slurm.py).",
        f"# Sweep {job.sweep}, scenario {job.scenario.name}: {len(job.cells)} cell(s), one after "
        f"another on the same {job.nodes} node(s), one torchrun agent per node; links {links}.",
        f"# Results in {job.out}/<cell>/ as `python -m bench sweep` writes them; that folder and",
        f"# the checkout {job.repo} must be at the same paths on every node.",
        f"#SBATCH --job-name=aqsgd-{job.sweep}-{job.scenario.name}",
        f"#SBATCH --nodes={job.nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --time={job.time_limit_min}",
        f"#SBATCH --output={job.slurm_dir}/job-%j.out",
    ]
    if o.partition:
        lines.append(f"#SBATCH --partition={o.partition}")
    if o.account:
        lines.append(f"#SBATCH --account={o.account}")
    lines += [f"#SBATCH {opt}" for opt in o.sbatch]
    return lines


# One torchrun agent per node, run by srun in each task ($SLURM_NODEID: the node's rank):
# c10d rendezvous on node 0; the worker takes its rank from --rank and builds its process
# group on its own store (Note [own store] in docs/multihost.md).
AGENT = r"""addr=($AQ_ADDRS); world=$1; port=$2; cell=$3
exec env TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 $AQ_SOCKET_ENV \
  "$AQ_PYTHON" -m torch.distributed.run --nnodes="$world" --nproc-per-node=1 \
  --node-rank="$SLURM_NODEID" --rdzv-backend=c10d --rdzv-endpoint="${addr[0]}:$port" \
  --rdzv-id="$SLURM_JOB_ID-$port" --rdzv-conf=is_host=$((SLURM_NODEID == 0)) \
  --local-addr="${addr[$SLURM_NODEID]}" --max-restarts=0 \
  -m aqsgd.train.worker --config "$cell/config.yaml" --rank "$SLURM_NODEID" \
  --world-size "$world" --master-addr "${addr[0]}" --master-port $((port + 1))"""


def _plugin_step(job: SlurmJob, node_step: str) -> list[str]:
    """Every node loads the same copy of each plug-in the cells run, or the job stops
    before anything is shaped, each node's lines naming the plug-in (docs/plugins.md)."""
    if not job.plugins:
        return []
    expect = json.dumps([p.to_dict() for p in job.plugins])
    return ["# the plug-ins: every node loads the same copy of each, or nothing runs",
            f"{node_step} \"$AQ_PYTHON\" -m aqsgd.compress.plugins --expect {_q(expect)} || "
            f"{{ echo 'plug-ins missing or different on a node (above)' >&2; exit 1; }}"]


def _body(job: SlurmJob) -> list[str]:
    o = job.options
    node_step = "srun --overlap --ntasks-per-node=1 --nodes=\"$SLURM_NNODES\""
    iface = f" --iface {_q(o.iface)}" if o.iface else ""
    lines = [
        "set -uo pipefail",
        f"export AQ_PYTHON={_q(job.python)}",
        f"export PYTHONPATH={_q(job.repo)}",
        "export PYTHONSAFEPATH=1  # no caller's folder on sys.path (bench/launch/process.py)",
        f"OUT={_q(job.out)}",
        "LINKS=\"$OUT/.slurm/" + job.scenario.name + "/links-$SLURM_JOB_ID\"",
        f"cd {_q(job.repo)}",
        "job() { \"$AQ_PYTHON\" -m bench.launch.export.slurm_job \"$@\"; }",
        "",
        f"# 1. every node's address{' on ' + o.iface if o.iface else ' (its NodeAddr)'}, "
        f"by node id; node 0 hosts the rendezvous",
        f"AQ_ADDRS=$({node_step} \"$AQ_PYTHON\" -m bench.launch.export.slurm_job address"
        f"{iface} | sort -n | awk '{{print $2}}' | paste -sd' ')",
        "export AQ_ADDRS",
        "read -ra addrs <<< \"$AQ_ADDRS\"",
        "if (( ${#addrs[@]} != SLURM_NNODES )); then",
        "    echo \"expected $SLURM_NNODES node addresses, got: $AQ_ADDRS\" >&2; exit 1",
        "fi",
        "echo \"nodes: $SLURM_JOB_NODELIST, addresses: $AQ_ADDRS\"",
        *_plugin_step(job, node_step),
        "export AQ_SOCKET_ENV=" + (_q(f"GLOO_SOCKET_IFNAME={o.iface} NCCL_SOCKET_IFNAME="
                                      f"{o.iface} TP_SOCKET_IFNAME={o.iface}")
                                   if o.iface else "''"),
        "",
    ]
    if job.shaped:
        flags = (" --no-netem" if not o.netem else "") + (" --allow-drop" if o.allow_drop
                                                            else "")
        lines += [
            f"# 2. shaping (tc, as root): scenario {job.scenario.name}'s host shaping plan on "
            f"{o.iface}, held by one step per node until the job ends ($LINKS/release)",
            f"{node_step} \"$AQ_PYTHON\" -m bench.launch.export.slurm_job shape --scenario "
            f"{_q(job.scenario_arg)} --addrs \"${{AQ_ADDRS// /,}}\" --iface {_q(o.iface)} "
            f"--links \"$LINKS\"{flags} &",
            "shaper=$!",
            "trap 'touch \"$LINKS/release\"; wait $shaper' EXIT",
            "links_failed=''",
            f"job links --links \"$LINKS\" --nodes \"$SLURM_NNODES\""
            f"{' --allow-unshaped' if o.allow_unshaped else ''} || "
            "links_failed=\"the nodes' links are not as the scenario asks: see the job's "
            "output\"",
        ]
    else:
        why = ("--no-shaping" if o.iface and not o.shaping else
               "no --iface" if not o.iface else f"scenario {job.scenario.name} shapes nothing")
        lines += [f"# 2. no shaping ({why}): the cells run on the real links, recorded as such",
                  "links_failed=''"]
    lines += [
        "",
        "# 3. the cells, one torchrun agent per node",
        f"AGENT={_q(AGENT)}",
        f"base_port=$((20000 + (SLURM_JOB_ID % 1000) * {PORTS_PER_JOB}))",
        "failed=0",
        "run_cell() {  # NAME RANKS TIMEOUT_S INDEX",
        "    local cell=\"$OUT/$1\" world=$2 rc started",
        f"    local port=$((base_port + 2 * ($4 % {PORTS_PER_JOB // 2})))",
        "    started=$(date +%s.%N)",
        "    rm -rf \"$cell\"/{logs,metrics,tensorboard,meta.json,metrics.csv,peers.csv}",
        "    mkdir -p \"$cell/logs\"",
        "    if [[ -n $links_failed ]]; then",
        "        job finish --cell \"$cell\" --links \"$LINKS\" --returncode 1 "
        "--started \"$started\" --reason \"$links_failed\" || failed=1",
        "        return",
        "    fi",
        "    timeout --kill-after=30 \"$3\" srun --overlap --relative=0 --nodes=\"$world\" "
        "--ntasks=\"$world\" --ntasks-per-node=1 --kill-on-bad-exit=1 "
        "--output=\"$cell/logs/rank%t.log\" bash -c \"$AGENT\" agent \"$world\" \"$port\" "
        "\"$cell\"",
        "    rc=$?",
        "    job finish --cell \"$cell\" --links \"$LINKS\" --returncode \"$rc\" "
        "--started \"$started\" || failed=1",
        "}",
    ]
    for k, c in enumerate(job.cells):
        lines.append(f"run_cell {_q(c.name)} {c.world_size} "
                     f"{int(math.ceil(c.timeout_s)) + START_MARGIN_S} {k}")
    lines += ["exit $failed", ""]
    return lines


def render_sbatch(job: SlurmJob, command: str) -> str:
    """The sbatch script of `job` (see module doc); `command`: the line that wrote it."""
    return "\n".join([*_header(job, command), "", *_body(job)])


def write_sbatch(job: SlurmJob, command: str) -> Path:
    """Write the script into the job's folder (see SlurmJob.slurm_dir); its path."""
    path = job.out / f"slurm-{job.scenario.name}.sbatch"
    job.slurm_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(render_sbatch(job, command))
    path.chmod(0o755)
    return path
