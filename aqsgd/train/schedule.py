"""Pipeline schedules as data: per-stage lists of (stage, op, micro-batch) actions.

    python -m aqsgd.train.schedule --stages 4 --micro-batches 6 --schedule 1f1b

A schedule says, for every stage, in which order it waits for inputs, computes,
sends and steps. The executor (aqsgd.train.pipeline) walks one stage's list; sends
never block (isend completes in the background) and a RECV_* action is where the
executor *waits* for data whose receive it posted earlier. `validate` checks a
schedule under exactly those semantics, so a schedule it accepts cannot deadlock
or pair a send with the wrong receive.
"""

from __future__ import annotations

import argparse
import enum
from dataclasses import dataclass

__all__ = [
    "Op",
    "Action",
    "Schedule",
    "ScheduleError",
    "gpipe",
    "one_f_one_b",
    "make_schedule",
    "validate",
    "format_grid",
    "main",
    "SCHEDULES",
]


class Op(str, enum.Enum):
    RECV_ACT = "RECV_ACT"
    FORWARD = "FORWARD"
    SEND_ACT = "SEND_ACT"
    RECV_GRAD = "RECV_GRAD"
    BACKWARD = "BACKWARD"
    SEND_GRAD = "SEND_GRAD"
    OPT_STEP = "OPT_STEP"


_COMPUTE = (Op.FORWARD, Op.BACKWARD)


@dataclass(frozen=True)
class Action:
    stage: int
    op: Op
    micro_batch: int | None  # None only for OPT_STEP

    def __str__(self) -> str:
        mb = "" if self.micro_batch is None else str(self.micro_batch)
        return f"{self.op.value}{mb}@s{self.stage}"


@dataclass(frozen=True)
class Schedule:
    name: str
    num_stages: int
    num_micro_batches: int
    actions: tuple[tuple[Action, ...], ...]  # actions[stage] in execution order

    def stage_actions(self, stage: int) -> tuple[Action, ...]:
        return self.actions[stage]


class ScheduleError(ValueError):
    """A schedule that would compute wrongly, pair messages wrongly or deadlock."""


def _forward(s: int, k: int, num_stages: int) -> list[Action]:
    acts = [Action(s, Op.RECV_ACT, k)] if s > 0 else []
    acts.append(Action(s, Op.FORWARD, k))
    if s < num_stages - 1:
        acts.append(Action(s, Op.SEND_ACT, k))
    return acts


def _backward(s: int, k: int, num_stages: int) -> list[Action]:
    acts = [Action(s, Op.RECV_GRAD, k)] if s < num_stages - 1 else []
    acts.append(Action(s, Op.BACKWARD, k))
    if s > 0:
        acts.append(Action(s, Op.SEND_GRAD, k))
    return acts


def _check_sizes(num_stages: int, num_micro_batches: int) -> None:
    if not isinstance(num_stages, int) or num_stages < 1:
        raise ScheduleError(f"num_stages must be an int >= 1, got {num_stages!r}")
    if not isinstance(num_micro_batches, int) or num_micro_batches < 1:
        raise ScheduleError(f"num_micro_batches must be an int >= 1, got {num_micro_batches!r}")


def gpipe(num_stages: int, num_micro_batches: int) -> Schedule:
    """All forwards, then all backwards (same micro-batch order), then the step."""
    _check_sizes(num_stages, num_micro_batches)
    per_stage = []
    for s in range(num_stages):
        acts: list[Action] = []
        for k in range(num_micro_batches):
            acts += _forward(s, k, num_stages)
        for k in range(num_micro_batches):
            acts += _backward(s, k, num_stages)
        acts.append(Action(s, Op.OPT_STEP, None))
        per_stage.append(tuple(acts))
    return Schedule("gpipe", num_stages, num_micro_batches, tuple(per_stage))


def one_f_one_b(num_stages: int, num_micro_batches: int) -> Schedule:
    """1F1B: stage s runs S-s-1 warm-up forwards, then alternates forward and
    backward, then drains; at most S-s micro-batches of activations are live."""
    _check_sizes(num_stages, num_micro_batches)
    per_stage = []
    for s in range(num_stages):
        acts: list[Action] = []
        warmup = min(num_stages - s - 1, num_micro_batches)
        fwd = bwd = 0
        for _ in range(warmup):
            acts += _forward(s, fwd, num_stages)
            fwd += 1
        while fwd < num_micro_batches:
            acts += _forward(s, fwd, num_stages)
            fwd += 1
            acts += _backward(s, bwd, num_stages)
            bwd += 1
        while bwd < num_micro_batches:
            acts += _backward(s, bwd, num_stages)
            bwd += 1
        acts.append(Action(s, Op.OPT_STEP, None))
        per_stage.append(tuple(acts))
    return Schedule("1f1b", num_stages, num_micro_batches, tuple(per_stage))


SCHEDULES = {"gpipe": gpipe, "1f1b": one_f_one_b}


def make_schedule(name: str, num_stages: int, num_micro_batches: int) -> Schedule:
    if name not in SCHEDULES:
        raise ScheduleError(f"schedule must be one of {sorted(SCHEDULES)}, got {name!r}")
    sched = SCHEDULES[name](num_stages, num_micro_batches)
    validate(sched)
    return sched


# ---------------------------------------------------------------- validation


def _expected_counts(s: int, num_stages: int) -> dict[Op, int]:
    first, last = s == 0, s == num_stages - 1
    return {
        Op.RECV_ACT: 0 if first else 1,
        Op.FORWARD: 1,
        Op.SEND_ACT: 0 if last else 1,
        Op.RECV_GRAD: 0 if last else 1,
        Op.BACKWARD: 1,
        Op.SEND_GRAD: 0 if first else 1,
    }


def _check_stage(sched: Schedule, s: int) -> dict[tuple[Op, int], int]:
    """Per-stage checks; returns the position of every (op, micro-batch)."""
    acts = sched.actions[s]
    pos: dict[tuple[Op, int], int] = {}
    for i, a in enumerate(acts):
        if a.stage != s:
            raise ScheduleError(f"stage {s}: action {i} ({a}) belongs to stage {a.stage}")
        if a.op is Op.OPT_STEP:
            if i != len(acts) - 1:
                raise ScheduleError(f"stage {s}: OPT_STEP at position {i} is not the last action")
            continue
        if a.micro_batch is None or not 0 <= a.micro_batch < sched.num_micro_batches:
            raise ScheduleError(
                f"stage {s}: action {i} ({a}) has micro-batch {a.micro_batch!r}, "
                f"expected 0..{sched.num_micro_batches - 1}"
            )
        key = (a.op, a.micro_batch)
        if key in pos:
            raise ScheduleError(f"stage {s}: {a} appears twice (positions {pos[key]} and {i})")
        pos[key] = i
    if not acts or acts[-1].op is not Op.OPT_STEP:
        raise ScheduleError(f"stage {s}: the last action must be OPT_STEP")
    for op, n in _expected_counts(s, sched.num_stages).items():
        for k in range(sched.num_micro_batches):
            if ((op, k) in pos) != bool(n):
                what = "missing" if n else "unexpected"
                raise ScheduleError(f"stage {s}: {what} {op.value} for micro-batch {k}")
    order = [
        (Op.RECV_ACT, Op.FORWARD),
        (Op.FORWARD, Op.SEND_ACT),
        (Op.FORWARD, Op.BACKWARD),
        (Op.RECV_GRAD, Op.BACKWARD),
        (Op.BACKWARD, Op.SEND_GRAD),
    ]
    for k in range(sched.num_micro_batches):
        for before, after in order:
            if (before, k) in pos and (after, k) in pos and pos[(before, k)] > pos[(after, k)]:
                raise ScheduleError(
                    f"stage {s}: {after.value} of micro-batch {k} comes before its "
                    f"{before.value}"
                )
    return pos


def _check_pairing(sched: Schedule) -> None:
    """Messages on one (src, dst) link are matched in posting order (gloo and NCCL
    both pair the n-th send with the n-th receive), so orders must agree."""
    for s in range(sched.num_stages - 1):
        sends = [a.micro_batch for a in sched.actions[s] if a.op is Op.SEND_ACT]
        recvs = [a.micro_batch for a in sched.actions[s + 1] if a.op is Op.RECV_ACT]
        if sends != recvs:
            raise ScheduleError(
                f"activations {s}->{s + 1}: sends in micro-batch order {sends} "
                f"but receives in order {recvs}"
            )
        sends = [a.micro_batch for a in sched.actions[s + 1] if a.op is Op.SEND_GRAD]
        recvs = [a.micro_batch for a in sched.actions[s] if a.op is Op.RECV_GRAD]
        if sends != recvs:
            raise ScheduleError(
                f"gradients {s + 1}->{s}: sends in micro-batch order {sends} "
                f"but receives in order {recvs}"
            )


def _check_progress(sched: Schedule) -> None:
    """Simulate: sends never block, a receive blocks until its send has run."""
    done: set[tuple[int, Op, int | None]] = set()
    ptr = [0] * sched.num_stages
    n = sched.num_stages

    def runnable(a: Action) -> bool:
        if a.op is Op.RECV_ACT:
            return (a.stage - 1, Op.SEND_ACT, a.micro_batch) in done
        if a.op is Op.RECV_GRAD:
            return (a.stage + 1, Op.SEND_GRAD, a.micro_batch) in done
        return True

    while any(ptr[s] < len(sched.actions[s]) for s in range(n)):
        progressed = False
        for s in range(n):
            while ptr[s] < len(sched.actions[s]) and runnable(sched.actions[s][ptr[s]]):
                a = sched.actions[s][ptr[s]]
                done.add((s, a.op, a.micro_batch))
                ptr[s] += 1
                progressed = True
        if not progressed:
            stuck = ", ".join(
                str(sched.actions[s][ptr[s]]) for s in range(n) if ptr[s] < len(sched.actions[s])
            )
            raise ScheduleError(f"deadlock: every unfinished stage waits forever: {stuck}")


def validate(sched: Schedule) -> None:
    """Raise ScheduleError naming the first problem found; return None if sound."""
    _check_sizes(sched.num_stages, sched.num_micro_batches)
    if len(sched.actions) != sched.num_stages:
        raise ScheduleError(
            f"schedule has action lists for {len(sched.actions)} stages, "
            f"expected {sched.num_stages}"
        )
    for s in range(sched.num_stages):
        _check_stage(sched, s)
    _check_pairing(sched)
    _check_progress(sched)


# ---------------------------------------------------------------- printing


def _compute_timeline(sched: Schedule) -> list[dict[int, str]]:
    """Unit-time model (every FORWARD/BACKWARD one tick, messages free):
    returns per stage {tick: label}."""
    end: dict[tuple[int, Op, int], int] = {}
    free = [0] * sched.num_stages
    cells: list[dict[int, str]] = [{} for _ in range(sched.num_stages)]
    ptr = [0] * sched.num_stages
    pending = True
    while pending:
        pending = False
        for s in range(sched.num_stages):
            acts = sched.actions[s]
            while ptr[s] < len(acts):
                a = acts[ptr[s]]
                if a.op in _COMPUTE:
                    k = a.micro_batch
                    dep = (s - 1, Op.FORWARD, k) if a.op is Op.FORWARD else (s + 1, Op.BACKWARD, k)
                    has_dep = 0 <= dep[0] < sched.num_stages
                    if has_dep and dep not in end:
                        pending = True
                        break
                    start = max(free[s], end[dep] if has_dep else 0)
                    cells[s][start] = f"{a.op.value[0]}{k}"
                    end[(s, a.op, k)] = free[s] = start + 1
                elif a.op is Op.OPT_STEP:
                    cells[s][free[s]] = "S"
                    free[s] += 1
                ptr[s] += 1
    return cells


def format_grid(sched: Schedule) -> str:
    """Stable text picture of the schedule: one row per stage, one column per tick,
    F<k>/B<k> for compute, S for the optimizer step, '.' for idle."""
    validate(sched)
    cells = _compute_timeline(sched)
    width = max(len(f"F{sched.num_micro_batches - 1}"), 2)
    ticks = max(max(c) for c in cells) + 1
    lines = [f"{sched.name}: {sched.num_stages} stages x {sched.num_micro_batches} micro-batches"]
    for s, row in enumerate(cells):
        body = " ".join(row.get(t, ".").ljust(width) for t in range(ticks)).rstrip()
        lines.append(f"stage {s} | {body}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m aqsgd.train.schedule", description="Print and validate a pipeline schedule."
    )
    p.add_argument("--stages", type=int, default=4)
    p.add_argument("--micro-batches", type=int, default=4)
    p.add_argument("--schedule", choices=sorted(SCHEDULES), default="gpipe")
    a = p.parse_args(argv)
    print(format_grid(make_schedule(a.schedule, a.stages, a.micro_batches)), end="")


if __name__ == "__main__":
    main()
