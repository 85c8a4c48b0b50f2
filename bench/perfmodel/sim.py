"""Discrete-event simulation of one optimizer step, walking the schedule's action lists
(aqsgd.train.schedule) under the runtime's semantics (aqsgd.train.pipeline).

    result = simulate(work, cores=2, wake_s=1e-3)   # SimResult; work: a StepWorkload

Ranks run their actions in order (compute, blocking receives, sends in the background
or, with `blocking_sends`, waiting until their last byte left); each directed link is a
FIFO (bytes * 8 / rate, then delay + message_overhead), and so is a host's capped uplink
or downlink, which every link out of or into the host shares; OPT_STEP waits for the sends,
the data-parallel exchange and the clipping all-reduce; compute shares `cores` slots by
processor sharing, and a rank that blocked wakes `wake_s` late. The step ends when the
last rank finishes. The model in full: docs/performance-model.md, "The model of one step".
"""

from __future__ import annotations

import functools
from collections import deque
from dataclasses import dataclass

from aqsgd.compress.registry import GRAD_CODECS
from aqsgd.train.schedule import Op, make_schedule
from bench.perfmodel.workload import StepWorkload

__all__ = ["SimResult", "simulate", "transfer_s"]

_EPS = 1e-12


def transfer_s(nbytes: float, rate_mbit: float) -> float:
    return nbytes * 8.0 / (rate_mbit * 1e6)


@dataclass(frozen=True)
class SimResult:
    step_s: float
    finish_s: tuple[float, ...]  # per rank
    compute_busy_s: tuple[float, ...]  # per rank, wall time spent computing
    link_busy_s: dict[tuple[int, int], float]  # per (src rank, dst rank), transmitting


@functools.lru_cache(maxsize=64)
def _schedule(name: str, stages: int, micro_batches: int):
    return make_schedule(name, stages, micro_batches)  # validated once per shape


class _Step:
    def __init__(self, work: StepWorkload, overhead_s: float, unshaped_mbit: float,
                 cores: int | None, blocking_sends: bool, wake_s: float):
        self.w, self.overhead, self.unshaped = work, overhead_s, unshaped_mbit
        self.cores, self.blocking, self.wake = cores, blocking_sends, wake_s
        self.sched = _schedule(work.schedule, work.stages, work.micro_batches)
        self.link_free: dict = {}  # a link (src, dst) or a HostWire -> when it is free
        self.link_busy: dict[tuple[int, int], float] = {}
        self.arrival: dict[tuple, float] = {}
        self.sent_done: dict[int, float] = {}
        self.arrived: dict[tuple, list[int]] = {}
        self.exchange: dict[int, float] = {}  # per stage, computed once

    # ---------------------------------------------------------------- tasks of a rank
    def tasks(self, rank: int) -> deque:
        w, S = self.w, self.w.stages
        s, r = rank % S, rank // S
        st = w.stage[s]
        out: deque = deque()
        for a in self.sched.stage_actions(s):
            k = a.micro_batch
            if a.op is Op.RECV_ACT:
                out += [("recv", ("act", rank - 1, rank, k)), ("work", w.decode_act_s)]
            elif a.op is Op.FORWARD:
                out.append(("work", st.forward_s))
            elif a.op is Op.SEND_ACT:
                out += [("work", w.encode_act_s), ("send", ("act", rank, rank + 1, k), w.act_bytes)]
            elif a.op is Op.RECV_GRAD:
                out += [("recv", ("grad", rank + 1, rank, k)), ("work", w.decode_grad_s)]
            elif a.op is Op.BACKWARD:
                out.append(("work", st.backward_s))
            elif a.op is Op.SEND_GRAD:
                out += [("work", w.encode_grad_s),
                        ("send", ("grad", rank, rank - 1, k), w.grad_bytes)]
            elif a.op is Op.OPT_STEP:
                out += self._opt_tasks(rank, s, r)
        return out

    def _opt_tasks(self, rank: int, s: int, r: int) -> list:
        w, S, R = self.w, self.w.stages, self.w.replicas
        out: list = [("sends",)]
        exchange = []
        if R > 1:
            exchange = [("work", w.dp_codec_s[s]),
                        ("barrier", ("dp", s), R, self._exchange_s(s))]
        in_step = GRAD_CODECS[w.grad_mode].exchanges_in_step
        if not in_step:
            out += exchange
        if S > 1:
            out.append(("barrier", ("norm", r), S, self._allreduce_s(r)))
        if in_step and R > 1:
            out.append(("barrier", ("dpnorm", s), R, self._dp_allreduce_s(s)))
            out += exchange
        out.append(("work", w.stage[s].optimizer_s))
        return out

    # ---------------------------------------------------------------- link costs
    def _rate(self, src: int, dst: int) -> float:
        link = self.w.links[(src, dst)]
        return self.unshaped if link.rate_mbit is None else link.rate_mbit

    def _hop_s(self, src: int, dst: int) -> float:
        return self.w.links[(src, dst)].delay_ms / 1e3 + self.overhead

    def _dp_pairs(self, s: int) -> list[tuple[int, int]]:
        S, R = self.w.stages, self.w.replicas
        return [(a * S + s, b * S + s) for a in range(R) for b in range(R) if a != b]

    def _exchange_s(self, s: int) -> float:
        """Each rank sends its share to every peer at once, in the codec's rounds: EF21 in
        one, the sharded exchange in two (to the shard's owner, then back)."""
        if s in self.exchange:
            return self.exchange[s]
        rounds = GRAD_CODECS[self.w.grad_mode].rounds
        per_peer = self.w.dp_bytes[s] / (self.w.replicas - 1) / rounds
        pairs = self._dp_pairs(s)
        one = max(transfer_s(per_peer, self._rate(a, b)) + self._hop_s(a, b) for a, b in pairs)
        for pair in pairs:
            self.link_busy[pair] = self.link_busy.get(pair, 0.0) + rounds * transfer_s(
                per_peer, self._rate(*pair))
        self.exchange[s] = rounds * one
        return self.exchange[s]

    def _allreduce_s(self, r: int) -> float:
        S = self.w.stages
        hops = [self._hop_s(r * S + s, r * S + s + 1) for s in range(S - 1)]
        return 2 * (S - 1) * max(hops)

    def _dp_allreduce_s(self, s: int) -> float:
        R = self.w.replicas
        return 2 * (R - 1) * max(self._hop_s(a, b) for a, b in self._dp_pairs(s))

    # ---------------------------------------------------------------- events
    def send(self, key: tuple, nbytes: int, t: float) -> float:
        """A message holds its link and the capped host wires on its way (a host's
        uplink, the peer's downlink) from when all are free, at the slowest's rate."""
        _, src, dst, _ = key
        wires = self.w.wires.get((src, dst), ())
        held = [(src, dst), *wires]
        start = max([t] + [self.link_free.get(h, 0.0) for h in held])
        rate = min([self._rate(src, dst)] + [w.rate_mbit for w in wires])
        dur = transfer_s(nbytes, rate)
        for h in held:
            self.link_free[h] = start + dur
        self.link_busy[(src, dst)] = self.link_busy.get((src, dst), 0.0) + dur
        self.arrival[key] = start + dur + self._hop_s(src, dst)
        self.sent_done[src] = max(self.sent_done.get(src, 0.0), start + dur)
        return start + dur

    def run(self) -> SimResult:
        n = self.w.stages * self.w.replicas
        queues = [self.tasks(r) for r in range(n)]
        cur: list = [None] * n
        finish: list[float | None] = [None] * n
        busy = [0.0] * n
        t = 0.0
        while True:
            # run every rank as far as it goes at time t; a send or a barrier's release
            # may unblock another rank, so sweep again until nothing moves
            moved = True
            while moved:
                moved = False
                for r in range(n):
                    while finish[r] is None:
                        c = cur[r]
                        if c is None:
                            if not queues[r]:
                                finish[r] = t
                                break
                            task = queues[r].popleft()
                            moved |= task[0] in ("send", "barrier")
                            cur[r] = self._start(r, task, t, cur)
                        elif c[0] == "recv" and c[1] in self.arrival:
                            cur[r] = ("until", self._woken(self.arrival[c[1]], t))
                        elif c[0] == "until" and c[1] <= t + _EPS:
                            cur[r] = None
                        else:
                            break
            if all(f is not None for f in finish):
                break
            working = [r for r in range(n) if cur[r] and cur[r][0] == "work"]
            share = 1.0 if self.cores is None or not working else min(
                1.0, self.cores / len(working))
            ends = {r: t + cur[r][1] / share for r in working}
            times = list(ends.values())
            times += [cur[r][1] for r in range(n) if cur[r] and cur[r][0] == "until"]
            if not times:
                stuck = [(r, cur[r]) for r in range(n) if finish[r] is None]
                raise RuntimeError(f"simulation deadlock at t={t:.6f}: {stuck}")
            t_next = max(min(times), t)
            for r in working:
                busy[r] += t_next - t
                # the task that sets t_next ends there, whatever rounding leaves over
                left = cur[r][1] - (t_next - t) * share
                cur[r] = None if ends[r] <= t_next or left <= _EPS else ("work", left)
            t = t_next
        done = tuple(float(f) for f in finish)
        return SimResult(max(done), done, tuple(busy), dict(self.link_busy))

    def _start(self, r: int, task: tuple, t: float, cur: list):
        kind = task[0]
        if kind == "work":
            return ("work", task[1]) if task[1] > _EPS else None
        if kind == "send":
            gone = self.send(task[1], task[2], t)
            return ("until", gone) if self.blocking else None
        if kind == "recv":
            key = task[1]
            if key in self.arrival:
                return ("until", self._woken(self.arrival[key], t))
            return ("recv", key)
        if kind == "sends":
            return ("until", self._woken(self.sent_done.get(r, 0.0), t))
        # barrier: everyone leaves cost after the last member arrives
        _, key, size, cost = task
        members = self.arrived.setdefault(key, [])
        members.append(r)
        if len(members) < size:
            return ("barrier", key)
        for m in members[:-1]:
            cur[m] = ("until", t + cost + self.wake)
        return ("until", t + cost)

    def _woken(self, ready: float, t: float) -> float:
        """When a rank blocked until `ready` runs again: a rank that had to block waits
        `wake` more for a core (more ranks than cores); one that did not block goes on."""
        return ready + self.wake if ready > t + _EPS else t


def simulate(work: StepWorkload, *, overhead_s: float = 0.0, unshaped_rate_mbit: float = 1e4,
             cores: int | None = None, blocking_sends: bool = False,
             wake_s: float = 0.0) -> SimResult:
    """One step of `work` (module docstring)."""
    return _Step(work, overhead_s, unshaped_rate_mbit, cores, blocking_sends, wake_s).run()
