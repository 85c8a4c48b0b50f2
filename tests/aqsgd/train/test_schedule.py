"""Schedules as data: generation, validation of broken schedules, stable grid."""

import pytest

from aqsgd.train.schedule import (
    Action,
    Op,
    Schedule,
    ScheduleError,
    format_grid,
    gpipe,
    make_schedule,
    one_f_one_b,
    validate,
)


def _replace_stage(sched: Schedule, stage: int, acts: list[Action]) -> Schedule:
    per = list(sched.actions)
    per[stage] = tuple(acts)
    return Schedule(sched.name, sched.num_stages, sched.num_micro_batches, tuple(per))


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
@pytest.mark.parametrize("stages,mbs", [(1, 1), (1, 3), (2, 1), (2, 4), (4, 3), (4, 8), (5, 2)])
def test_generated_schedules_are_valid(name, stages, mbs):
    sched = make_schedule(name, stages, mbs)
    validate(sched)
    for acts in sched.actions:
        ops = [a.op for a in acts]
        assert ops.count(Op.FORWARD) == mbs and ops.count(Op.BACKWARD) == mbs
        assert ops[-1] is Op.OPT_STEP


def test_gpipe_order_is_all_forwards_then_all_backwards():
    acts = gpipe(2, 3).actions[1]
    compute = [(a.op.value[0], a.micro_batch) for a in acts if a.op in (Op.FORWARD, Op.BACKWARD)]
    assert compute == [("F", 0), ("F", 1), ("F", 2), ("B", 0), ("B", 1), ("B", 2)]


def test_missing_backward_rejected():
    sched = gpipe(2, 2)
    acts = [a for a in sched.actions[0] if not (a.op is Op.BACKWARD and a.micro_batch == 1)]
    with pytest.raises(ScheduleError, match="stage 0: missing BACKWARD for micro-batch 1"):
        validate(_replace_stage(sched, 0, acts))


def test_backward_before_forward_rejected():
    sched = gpipe(1, 2)
    acts = list(sched.actions[0])  # F0 F1 B0 B1 S
    acts[1], acts[2] = acts[2], acts[1]  # F0 B0 F1 B1: fine
    validate(_replace_stage(sched, 0, acts))
    acts = [acts[1], acts[0], acts[2], acts[3], acts[4]]  # B0 F0 ...
    with pytest.raises(ScheduleError, match="BACKWARD of micro-batch 0 comes before its FORWARD"):
        validate(_replace_stage(sched, 0, acts))


def test_mismatched_send_recv_order_rejected():
    sched = gpipe(2, 2)
    # stage 1 receives micro-batch 1 first, while stage 0 sends 0 first
    s1 = [
        Action(1, Op.RECV_ACT, 1), Action(1, Op.FORWARD, 1),
        Action(1, Op.RECV_ACT, 0), Action(1, Op.FORWARD, 0),
        Action(1, Op.BACKWARD, 0), Action(1, Op.SEND_GRAD, 0),
        Action(1, Op.BACKWARD, 1), Action(1, Op.SEND_GRAD, 1),
        Action(1, Op.OPT_STEP, None),
    ]  # fmt: skip
    with pytest.raises(ScheduleError, match=r"activations 0->1: sends .*\[0, 1\].*\[1, 0\]"):
        validate(_replace_stage(sched, 1, s1))


def test_deadlock_rejected():
    # stage 0 waits for the gradient of micro-batch 0 before it sends activation 1,
    # while stage 1 (GPipe) waits for activation 1 before any backward: a cycle.
    sched = gpipe(2, 2)
    s0 = [
        Action(0, Op.FORWARD, 0), Action(0, Op.SEND_ACT, 0),
        Action(0, Op.RECV_GRAD, 0), Action(0, Op.BACKWARD, 0),
        Action(0, Op.FORWARD, 1), Action(0, Op.SEND_ACT, 1),
        Action(0, Op.RECV_GRAD, 1), Action(0, Op.BACKWARD, 1),
        Action(0, Op.OPT_STEP, None),
    ]  # fmt: skip
    with pytest.raises(ScheduleError, match=r"deadlock: .*RECV_GRAD0@s0.*RECV_ACT1@s1"):
        validate(_replace_stage(sched, 0, s0))


def test_wrong_stage_and_misplaced_step_rejected():
    sched = gpipe(2, 1)
    acts = list(sched.actions[0])
    acts.insert(0, acts.pop())  # OPT_STEP first
    with pytest.raises(ScheduleError, match="OPT_STEP at position 0 is not the last"):
        validate(_replace_stage(sched, 0, acts))
    acts = [Action(1, a.op, a.micro_batch) for a in sched.actions[0]]
    with pytest.raises(ScheduleError, match="belongs to stage 1"):
        validate(_replace_stage(sched, 0, acts))


def test_bad_sizes_and_name():
    with pytest.raises(ScheduleError, match="num_stages must be an int >= 1, got 0"):
        gpipe(0, 2)
    with pytest.raises(ScheduleError, match="schedule must be one of .* got 'zb'"):
        make_schedule("zb", 2, 2)


def test_grid_is_stable():
    assert format_grid(gpipe(3, 3)) == (
        "gpipe: 3 stages x 3 micro-batches\n"
        "stage 0 | F0 F1 F2 .  .  .  .  B0 B1 B2 S\n"
        "stage 1 | .  F0 F1 F2 .  .  B0 B1 B2 S  .\n"
        "stage 2 | .  .  F0 F1 F2 B0 B1 B2 S  .  .\n"
    )
    assert format_grid(one_f_one_b(3, 4)) == (
        "1f1b: 3 stages x 4 micro-batches\n"
        "stage 0 | F0 F1 F2 .  .  B0 F3 B1 .  B2 .  B3 S\n"
        "stage 1 | .  F0 F1 .  B0 F2 B1 F3 B2 .  B3 S  .\n"
        "stage 2 | .  .  F0 B0 F1 B1 F2 B2 F3 B3 S  .  .\n"
    )
