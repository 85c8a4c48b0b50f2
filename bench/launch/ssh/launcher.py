"""SSH launcher: the hosts are real machines named in a hostfile, reached over SSH; each
host's interface shaped with the one host shaping plan, workers started by one torchrun
agent per host, result files copied back.

    factory = SshLauncher.bind("hosts.txt")                 # what choose_launcher("ssh") gives
    with factory(load_scenario("100mbps"), 2, state_dir=d) as hosts:
        print(format_table(hosts.probe()))                  # measured between the hosts
        p = hosts.spawn(0, [sys.executable, "-m", "aqsgd.train.worker", ...], env, log)

Its transport (bench.launch.hosts): a command runs over the host's SSH connection
(bench/launch/ssh/remote.py), a process through a local relay (relay.py) and `hostside
tied` there, so stopping the relay stops its tree on the host. Bring-up checks every host
first (checks.py; a sweep checks them once, `checked_for`), then writes the state file,
then shapes; a host that shares the results folder gets no copies. Host i is a rank's
place (as a namespace is on netns): machine i // k of the hostfile, whose `slots` must
equal the scenario's k ranks per machine; the machines' interfaces are shaped with the
links between machines, a machine's ranks talk over its loopback. Workers: one torchrun agent
per rank in c10d rendezvous, with the worker's own store (Note [own store] in
docs/multihost.md). Why each step: docs/multihost.md.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from bench.launch.hostfile import HostEntry, load_hostfile
from bench.launch.hosts import ShapedHosts
from bench.launch.process import (
    TEARDOWN_GRACE_S,
    env_with_repo,
    python_argv,
    spawn_group,
    stop_all,
)
from bench.launch.ssh.checks import (
    CheckedHosts,
    HostFacts,
    check_interfaces_free,
    check_machines,
    hostside_argv,
)
from bench.launch.ssh.commands import FREE_PORT, Rendezvous, mirrored, remote_argv, torchrun_argv
from bench.launch.ssh.hostside import HOST_RECORD_ROOT
from bench.launch.ssh.relay import relay_argv
from bench.launch.ssh.remote import Remote
from bench.launch.ssh.state import host_record, teardown_hosts, write_state
from bench.net.probe import ProbeRecord
from bench.net.scenario import LinkSpec, NetworkScenario
from bench.net.shaping import Interface, ShapingPlan, shaping_plan
from bench.net.tc import (
    ETHERNET_HEADER_BYTES,
    Capabilities,
    ShapingError,
    mechanisms_for,
    payload_factor,
)

if TYPE_CHECKING:
    from aqsgd.compress.plugins import Plugin

__all__ = ["SshLauncher", "machines_for", "real_links"]

MECHANISMS = {"htb": "htb qdisc (kernel, on each host's interface)",
              "netem": "netem qdisc (kernel, on each host's interface)"}


def real_links(scenario: NetworkScenario) -> NetworkScenario:
    """The scenario with nothing emulated: what `shaping=False` probes against (every
    link unshaped, no caps, no delay)."""
    link = dataclasses.replace(scenario.link, rate_mbit=None, delay_ms=0.0, jitter_ms=0.0,
                               loss_pct=0.0)
    return dataclasses.replace(scenario, link=link, overrides=(), host_caps=(),
                               machine_link=LinkSpec(None))


def impaired(scenario: NetworkScenario, n_hosts: int) -> bool:
    """Whether a link between n_hosts hosts of the scenario has delay, jitter or loss
    (which needs netem on the hosts)."""
    return any((s := scenario.link_spec(a, b)).delay_ms or s.jitter_ms or s.loss_pct
               for a in range(n_hosts) for b in range(n_hosts) if a != b)


def machines_for(listed: tuple[HostEntry, ...], n_hosts: int, per_machine: int,
                 hostfile: Path, scenario: str) -> tuple[HostEntry, ...]:
    """The hostfile's first machines that hold n_hosts ranks, per_machine on each: a
    ValueError where the hostfile lists too few, or a machine's `slots` is not
    per_machine (the scenario's ranks per machine), naming both."""
    need = -(-n_hosts // per_machine)
    if need > len(listed):
        raise ValueError(f"{hostfile}: the run needs {need} machine(s) of {per_machine} "
                         f"rank(s) each, the hostfile lists {len(listed)}")
    for h in listed[:need]:
        if h.slots != per_machine:
            raise ValueError(f"{hostfile}: host {h.name} has slots={h.slots}; scenario "
                             f"{scenario} places {per_machine} rank(s) on each machine "
                             f"(layout.ranks_per_machine): give slots={per_machine}, or a "
                             f"scenario with {h.slots} ranks per machine")
    return listed[:need]


class SshLauncher(ShapedHosts):
    """Context manager over `n_hosts` ranks' places on the first machines of a hostfile
    (see module doc).

    `hostfile`: its path (None: the class's, set by `bind`). `shaping`: shape the
    interfaces (None: the class's `shaped`). `results_dir`: the folder mirrored on the
    hosts (default: the parent of state_dir). `gpus`: as bench.launch.ssh.checks.
    check_hosts. `plugins`: the plug-ins the cells run, which every host must have the
    same copy of (None: the class's, set by `bind`). `allow_drop`, `payload_correction`:
    as on the netns launcher."""

    name = "ssh"
    shaped = True
    hostfile: ClassVar[Path | None] = None
    checked: ClassVar[CheckedHosts | None] = None  # set by checked_for: not checked again
    plugins: ClassVar[tuple[Plugin, ...]] = ()

    @classmethod
    def bind(cls, hostfile: Path | str, shaping: bool = True, plugins: tuple[Plugin, ...] = ()
             ) -> type[SshLauncher]:
        """This launcher with its hostfile (and shaping) fixed: the factory the harness
        calls with the protocol's arguments only (bench.launch.choice). The hostfile is
        read here, so that a mistake in it (HostfileError: file, field, value) stops the
        command before any cell, a dry run's included."""
        load_hostfile(hostfile)
        return type(cls.__name__, (cls,), {"hostfile": Path(hostfile), "shaped": shaping,
                                           "plugins": tuple(plugins),
                                           "__module__": cls.__module__})

    @classmethod
    def host_count(cls, scenario: NetworkScenario) -> int:
        """The scenario's hosts the hostfile gives: its machines x the scenario's ranks
        per machine, at most the scenario's hosts (read from the file, nobody contacted);
        a ValueError naming a machine among them whose `slots` differ from the ranks per
        machine (machines_for), which would otherwise read as too few hosts."""
        listed = load_hostfile(cls.hostfile).hosts
        per_machine = scenario.layout.ranks_per_machine
        count = min(scenario.n_hosts, len(listed) * per_machine)
        machines_for(listed, count, per_machine, cls.hostfile, scenario.name)
        return count

    @classmethod
    def checked_for(cls, needs: list[tuple[NetworkScenario, int]], results_dir: Path
                    ) -> tuple[type[SshLauncher], list[str]]:
        """Every machine the bring-ups `needs` ((scenario, n_hosts) each) use, checked
        once (bench.launch.ssh.checks.check_machines: HostCheckError naming each host
        that fails; a ValueError where slots and a scenario differ), nothing changed;
        returns this factory with what was found, which its bring-ups then use instead
        of checking again, and one line per machine saying what was found."""
        listed = load_hostfile(cls.hostfile).hosts
        used = max(len(machines_for(listed, n, s.layout.ranks_per_machine, cls.hostfile,
                                    s.name)) for s, n in needs)
        with Remote(listed[:used]) as remote:
            found = check_machines(remote, needs_netem=cls.shaped and any(
                impaired(s, n) for s, n in needs), shaping=cls.shaped, gpus=None,
                results_dir=results_dir, plugins=cls.plugins)
        lines = [f"{h.name}: checked, {f.facts['interface']['addr']} on {h.interface}, "
                 + ("shares" if shared else "does not share")
                 + f" the results folder {results_dir}"
                 for h, f, shared in zip(listed, found.facts, found.shares_results,
                                         strict=False)]
        return type(cls.__name__, (cls,), {"checked": found, "__module__": cls.__module__}), \
            lines

    def __init__(self, scenario: NetworkScenario, n_hosts: int | None = None, *,
                 run_id: str | None = None, state_dir: Path | str | None = None,
                 hostfile: Path | str | None = None, shaping: bool | None = None,
                 results_dir: Path | str | None = None, gpus: bool | None = None,
                 allow_drop: bool = False, payload_correction: bool = True,
                 python: str = sys.executable, plugins: tuple[Plugin, ...] | None = None):
        super().__init__(scenario, n_hosts, run_id=run_id, state_dir=state_dir,
                         allow_drop=allow_drop, payload_correction=payload_correction)
        path = hostfile if hostfile is not None else type(self).hostfile
        if path is None:
            raise ValueError("SshLauncher: a hostfile is needed (--hostfile FILE)")
        self.hostfile_path = Path(path)
        self.shaping = self.shaped = type(self).shaped if shaping is None else shaping
        self.results_dir = Path(results_dir).resolve() if results_dir else (
            Path(state_dir).resolve().parent if state_dir else None)
        self.gpus = gpus
        if plugins is not None:
            self.plugins = tuple(plugins)
        self.python = python
        self.hosts: tuple[HostEntry, ...] = ()  # one per machine
        self.per_machine = scenario.layout.ranks_per_machine
        self.machines = scenario.between_machines()  # what each machine's interface carries
        self.remote: Remote | None = None
        self.facts: list[HostFacts] = []
        self.shares_results: tuple[bool, ...] = ()  # per machine: nothing copied
        self.use_gpus = False
        self.plan: ShapingPlan | None = None
        self.interfaces: tuple[Interface, ...] = ()
        self._records: list[dict] = []
        self._job: Rendezvous | None = None

    # -- names and addresses -------------------------------------------------------
    def machine(self, i: int) -> int:
        """The machine (hostfile line) host i is on."""
        self._check_host(i)
        return i // self.per_machine

    def record_dir(self, m: int) -> str:
        """Machine m's own record of the run (bench/launch/ssh/hostside.py); named by
        machine too, so that machines sharing a filesystem keep one each."""
        return str(HOST_RECORD_ROOT / f"{self.prefix}-h{m}")

    def addr(self, i: int) -> str:
        return self.facts[self.machine(i)].addr

    def label(self, i: int) -> str:
        """How log lines name host i: `hI HOST`."""
        return f"h{i} {self.hosts[self.machine(i)].host}"

    def worker_env(self, i: int) -> dict[str, str]:
        # the machine's interface: its ranks reach each other over loopback regardless
        dev = self.hosts[self.machine(i)].interface
        return {"GLOO_SOCKET_IFNAME": dev, "NCCL_SOCKET_IFNAME": dev, "TP_SOCKET_IFNAME": dev}

    # -- lifecycle -----------------------------------------------------------------
    def _prepare(self) -> None:
        self.hosts = machines_for(load_hostfile(self.hostfile_path).hosts, self.n_hosts,
                                  self.per_machine, self.hostfile_path, self.scenario.name)
        if self.per_machine > 1 and self.shaping and self.scenario.machine_link.shaped:
            raise ShapingError(f"scenario {self.scenario.name}: the SSH launcher cannot shape "
                               f"the links inside a machine (its ranks talk over loopback); "
                               f"give machine_link no rate, or use the netns launcher")
        delays = self.shaping and impaired(self.scenario, self.n_hosts)
        self.remote = Remote(self.hosts)
        try:
            found = type(self).checked or check_machines(
                self.remote, needs_netem=delays, shaping=self.shaping, gpus=self.gpus,
                results_dir=self.results_dir, plugins=self.plugins)
            self.facts = list(found.facts[:len(self.hosts)])
            self.shares_results = found.shares_results[:len(self.hosts)]
            self.use_gpus = found.use_gpus
            self.mechanisms = self._mechanisms(delays)
            self._check_schedule_fits()
        except BaseException:
            self.remote.close()
            raise

    def _check_schedule_fits(self) -> None:
        """A link schedule needs links this launcher shapes: refused with --no-shaping;
        otherwise the core's check (bench.launch.schedules.ScheduledLinks)."""
        if self.per_machine > 1 and self.scenario.scheduled_links(self.n_hosts):
            raise ShapingError(f"scenario {self.scenario.name}: link schedules on machines "
                               f"of several ranks are not supported by the SSH launcher")
        if self.shaping:
            self.check_schedule()
        elif self.scenario.scheduled_links(self.n_hosts):
            raise ShapingError(f"scenario {self.scenario.name}: its links have schedules, "
                               f"which --no-shaping cannot apply (it measures the real "
                               f"links as they are); shape them, or use a scenario without "
                               f"schedules")

    # -- links that change (ScheduledLinks) ----------------------------------------
    def _schedule_plan(self) -> tuple[ShapingPlan, tuple[Interface, ...]]:
        return self.plan, self.interfaces

    def _run_on_host(self, i: int, argv: list[str]) -> Any:
        return self.remote.run(i, argv)

    def _mechanisms(self, impaired: bool) -> dict[str, str]:
        if not self.shaping:
            real = "none (--no-shaping: the real link, measured)"
            return {p: real for p in ("rate", "delay", "jitter", "loss")}
        no_netem = [h.name for h, f in zip(self.hosts, self.facts, strict=True)
                    if not f.facts["netem"]]
        if impaired and no_netem and not self.allow_drop:
            raise ShapingError(
                f"the scenario {self.scenario.name} asks for delay, jitter or loss, and "
                f"these hosts have no netem qdisc: {', '.join(no_netem)}. The SSH launcher "
                f"does not run the userspace delay line on remote hosts; use hosts whose "
                f"kernel has sch_netem, --no-shaping to measure the real links, or "
                f"allow_drop=True to run without them")
        caps = Capabilities(netem=impaired and not no_netem, delay_line=False)
        return mechanisms_for(self.scenario, self.n_hosts, caps, self.allow_drop)

    def _write_state(self) -> None:
        write_state(self.state_path, self.run_id, self.prefix, self._records, self._started)

    def _build(self) -> None:
        if self.shaping:  # the killed runs of this state dir are gone by now
            check_interfaces_free(self.remote)
        mtu = min(f.mtu for f in self.facts)
        factor = payload_factor(mtu, ETHERNET_HEADER_BYTES) if self.payload_correction else 1.0
        netem = "netem" in self.mechanisms.values()
        addrs = tuple(f.addr for f in self.facts)
        self._framing_factor = payload_factor(mtu, ETHERNET_HEADER_BYTES)
        self.plan = shaping_plan(self.machines, len(self.hosts), factor=factor, netem=netem)
        self.interfaces = tuple(
            Interface(h.interface, addrs,
                      ifb=f"{self.prefix}i" if self.plan.hosts[i].downlink else None)
            for i, h in enumerate(self.hosts))
        shaped = self.shaping and (self.mechanisms["rate"] != "none" or netem)
        self._records = [host_record(h, self.record_dir(i),
                                     self.plan.removal_argvs(i, self.interfaces[i])
                                     if shaped else [])
                         for i, h in enumerate(self.hosts)]
        self._write_state()  # before anything exists on any host: a kill is cleanable
        for i, h in enumerate(self.hosts):
            self.remote.run(i, hostside_argv(h, "record", "--dir", self.record_dir(i),
                                             "--state", json.dumps(self._records[i])))
        if shaped:
            for m in range(len(self.hosts)):
                self.remote.run_all(m, self.plan.setup_argvs(m, self.interfaces[m]))

    def _remove(self) -> None:
        stop_all(self._procs, TEARDOWN_GRACE_S)
        if self.remote is None:
            return
        try:
            if self._records:
                _, failed = teardown_hosts(self._records, self.remote)
                if failed:
                    self._records = [self._records[i] for i, _ in failed]
                    self._started = []
                    self._write_state()  # what is left, for `python -m bench.launch cleanup`
                    print(f"WARNING: ssh launcher: not torn down: "
                          f"{'; '.join(why for _, why in failed)}; run `python -m "
                          f"bench.launch cleanup --state {self.state_path}` once the host "
                          f"answers", file=sys.stderr, flush=True)
                    return
            self.state_path.unlink(missing_ok=True)
        finally:
            self.remote.close()

    # -- processes -----------------------------------------------------------------
    def remote_argv(self, i: int, argv: list[str], env: dict[str, str] | None) -> list[str]:
        """argv as host i runs it (bench.launch.ssh.commands.remote_argv)."""
        m = self.machine(i)
        return remote_argv(self.hosts[m], self.record_dir(m), argv, env, self.worker_env(i))

    def _torchrun(self, i: int, argv: list[str], world_size: int) -> list[str]:
        """argv under one torchrun agent of host i, in the rendezvous of the current job
        (a new one when host i is in it already or it is full)."""
        job = self._job
        if job is None or job.full_or_has(i):
            port = int(self.remote.run(0, python_argv(self.hosts[0].python, "-c", FREE_PORT,
                                                      self.addr(0))).stdout)
            job = self._job = Rendezvous(f"{self.prefix}-{secrets.token_hex(3)}", port,
                                         world_size)
        job.hosts.add(i)
        return torchrun_argv(self.hosts[self.machine(i)], i, argv, job, self.addr(0),
                             self.addr(i))

    def spawn(self, i: int, argv: list[str], env: dict[str, str] | None = None,
              log_path: Path | str | None = None) -> subprocess.Popen:
        """Run argv on host i under its torchrun agent (see module doc), through a local
        relay in its own process group; log lines prefixed with the host, appended to
        log_path. `env` must hold WORLD_SIZE, the number of ranks of the job."""
        self._check_host(i)
        world = (os.environ if env is None else env).get("WORLD_SIZE")
        if world is None or not world.isdigit():
            raise ValueError(f"spawn: expected WORLD_SIZE (the job's ranks) in env, got "
                             f"{world!r}")
        # a machine that sees the results folder as ours reads and writes it in place
        shared = self.shares_results[self.machine(i)]
        put, get = ([], []) if shared else mirrored(self.results_dir, argv)
        command = self.remote_argv(i, self._torchrun(i, argv, int(world)), env)
        proc = spawn_group(relay_argv(self.python, self.hosts[self.machine(i)], self.label(i),
                                      command, put=put, get=get), env_with_repo(), log_path)
        self._procs.append(proc)
        self._note_log(log_path)
        self._started_process(proc)
        return proc

    # -- link probe (ShapedHosts.probe) and record -----------------------------------
    def probe(self, links: list[tuple[int, int]] | None = None, check: bool = True,
              tolerance: float = 0.10, duration_s: float = 1.0) -> list[ProbeRecord]:
        """ShapedHosts.probe; unshaped, against the real links (nothing promised)."""
        if self.shaping:
            return super().probe(links, check, tolerance, duration_s)
        configured = self.scenario
        self.scenario = real_links(configured)
        try:
            return super().probe(links, check, tolerance, duration_s)
        finally:
            self.scenario = configured

    def helper_argv(self, i: int, argv: list[str]) -> list[str]:
        """argv on host i through a relay, its output unprefixed (raw)."""
        return relay_argv(self.python, self.hosts[self.machine(i)], self.label(i),
                          self.remote_argv(i, argv, None), raw=True)

    def _lift_limits(self, src: int, dst: int, lifted: bool) -> None:
        """On the machines of src and dst (nothing inside one machine: unshaped)."""
        a, b = self.machine(src), self.machine(dst)
        if a != b:
            for m, argv in self.plan.rate_limit_argvs(a, b, lifted, self.interfaces):
                self._run_on_host(m, argv)

    def _framing(self) -> float:
        return self._framing_factor

    def _commands(self) -> list[str]:
        return [f"h{i}: {' '.join(a)}" for i, a in (self.remote.history if self.remote else [])]

    def _record(self) -> dict[str, Any]:
        """The hostfile, and every host's entry, address, interface and what its checks
        found."""
        return {
            "hostfile": str(self.hostfile_path),
            "shaping": {p: MECHANISMS.get(m, m) for p, m in self.mechanisms.items()},
            "data_plane": "each host's own interface (real network)",
            "payload_correction_factor": None if self.plan is None else self.plan.factor,
            "uses_gpus": self.use_gpus,
            "ranks_per_machine": self.per_machine,
            "hosts": [{"host": i, "name": h.name, "addr": f.addr, "device": h.interface,
                       "mtu": f.mtu, "hostname": f.facts["hostname"],
                       "python": f.facts["python"], "gpus": f.facts["gpus"],
                       "netem": f.facts["netem"], "suite_commit": f.commit,
                       "record_dir": self.record_dir(i),
                       "shares_results": self.shares_results[i],
                       "ranks": list(range(i * self.per_machine, (i + 1) * self.per_machine))}
                      for i, (h, f) in enumerate(zip(self.hosts, self.facts, strict=True))],
        }
