"""Predictions from a step workload and a profile: step time, throughput, bytes per step,
the bottleneck, and the bandwidth below which a run is communication-bound.

    pred = predict(work, profile)            # Prediction
    rate = comm_bound_rate_mbit(work, profile)

The runtime's measured overlap (profile `comm.overlap`, fitted from measured cells by
`bench.perfmodel.validate.fit_comm`) weighs two simulations of the same step: sends in
the background (overlap 1) and blocking sends (overlap 0):
step = overlap * T_background + (1 - overlap) * T_blocking.
Sharing a CPU profile's cores, compute and coding first take its contention factor
(profile `contention`: its ranks computing together against one stage alone).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bench.perfmodel.profile import Profile
from bench.perfmodel.sim import SimResult, simulate
from bench.perfmodel.workload import LinkWork, StepWorkload

__all__ = ["COMM_BOUND_SLOWDOWN", "Prediction", "predict", "contended", "bytes_per_step",
           "bottleneck",
           "with_rate", "comm_bound_rate_mbit"]

# A run is communication-bound when its step takes this much longer than with links of
# unlimited rate (same delays).
COMM_BOUND_SLOWDOWN = 1.10


@dataclass(frozen=True)
class Prediction:
    step_s: float
    throughput_samples_s: float
    bytes_per_step: int
    background: SimResult
    blocking: SimResult


def bytes_per_step(work: StepWorkload) -> int:
    """Everything every rank sends in one step (the reports' bytes per step)."""
    pipe = work.micro_batches * work.replicas * (work.stages - 1) * (work.act_bytes
                                                                     + work.grad_bytes)
    return pipe + work.replicas * sum(work.dp_bytes)


def _cores(profile: Profile, cores: int | None | bool) -> int | None:
    return profile.cores if cores is True else (None if cores is False else cores)


def predict(work: StepWorkload, profile: Profile, *, cores: int | None | bool = True
            ) -> Prediction:
    """`cores=True`: share the profile's cores; False: a device per rank (compute already
    measured with every rank running); an int: that many. With more ranks than the
    profile's cores, a rank that blocked waits `comm.wake_s` for a core after it. A
    replayed step (`work.replayed`) waits its stages' times instead of computing: no
    core is shared and nobody waits for one."""
    n = None if work.replayed else _cores(profile, cores)
    if n is not None and profile.contention is not None:
        work = contended(work, profile.contention.factor(work.stages * work.replicas))
    comm = profile.comm
    crowded = (not work.replayed and profile.cores is not None
               and work.stages * work.replicas > profile.cores)
    kw = dict(overhead_s=comm.message_overhead_s, unshaped_rate_mbit=comm.unshaped_rate_mbit,
              cores=n, wake_s=comm.wake_s if crowded else 0.0)
    bg = simulate(work, **kw)
    blk = bg if comm.overlap >= 1.0 else simulate(work, blocking_sends=True, **kw)
    step = comm.overlap * bg.step_s + (1.0 - comm.overlap) * blk.step_s
    return Prediction(step, work.samples_per_step / step, bytes_per_step(work), bg, blk)


def contended(work: StepWorkload, factor: float) -> StepWorkload:
    """`work` with every compute and coding time `factor` times longer (a CPU profile's
    contention: its ranks computing together against one stage alone)."""
    return work.replace(stage=tuple(w.scaled(factor) for w in work.stage),
                        encode_act_s=work.encode_act_s * factor,
                        decode_act_s=work.decode_act_s * factor,
                        encode_grad_s=work.encode_grad_s * factor,
                        decode_grad_s=work.decode_grad_s * factor,
                        dp_codec_s=tuple(x * factor for x in work.dp_codec_s))


def bottleneck(work: StepWorkload, profile: Profile, *, cores: int | None | bool = True
               ) -> tuple[str, float]:
    """What bounds the step: "compute" or "communication", whichever the step is more
    sensitive to as a whole (all compute 10% faster, or every link 10% faster), with that
    sensitivity (the step's relative change over the resource's, 1.0: entirely bound),
    and the single resource it is most sensitive to (a stage's compute or one link's
    rate) with its own sensitivity in the label."""
    base = predict(work, profile, cores=cores).step_s

    def gain_of(changed: StepWorkload) -> float:
        return (1.0 - predict(changed, profile, cores=cores).step_s / base) / 0.1

    S = work.stages
    best = ("none", 0.0)
    for s in range(S):
        stages = tuple(w.scaled(0.9) if i == s else w for i, w in enumerate(work.stage))
        gain = gain_of(work.replace(stage=stages))
        if gain > best[1] + 1e-9:
            best = (f"stage {s}", gain)
    for (a, b), link in work.links.items():
        rate = link.rate_mbit if link.rate_mbit is not None else profile.comm.unshaped_rate_mbit
        links = dict(work.links)
        links[(a, b)] = LinkWork(rate / 0.9, link.delay_ms)
        gain = gain_of(work.replace(links=links))
        if gain > best[1] + 1e-9:
            what = (f"dp stage {a % S}" if a % S == b % S else
                    f"activations {a % S}->{b % S}" if b == a + 1 else
                    f"gradients {a % S}->{b % S}")
            best = (f"link rank {a}->{b} ({what})", gain)
    compute = gain_of(work.replace(stage=tuple(w.scaled(0.9) for w in work.stage)))
    comm = gain_of(with_rate(work, scale=1 / 0.9, unshaped_mbit=profile.comm.unshaped_rate_mbit))
    kind, share = ("communication", comm) if comm > compute else ("compute", compute)
    return f"{kind} {share:.2f}; most: {best[0]} {best[1]:.2f}", share


def with_rate(work: StepWorkload, rate_mbit: float | None = None,
              scale: float | None = None, unshaped_mbit: float | None = None) -> StepWorkload:
    """`work` with every link at `rate_mbit`, or every link's rate times `scale` (an
    unshaped link taken at `unshaped_mbit`, or left unshaped), delays unchanged."""
    def one(link: LinkWork) -> LinkWork:
        if rate_mbit is not None:
            return LinkWork(rate_mbit, link.delay_ms)
        rate = link.rate_mbit if link.rate_mbit is not None else unshaped_mbit
        if rate is None or scale is None:
            return link
        return LinkWork(rate * scale, link.delay_ms)
    return work.replace(links={k: one(v) for k, v in work.links.items()})


def comm_bound_rate_mbit(work: StepWorkload, profile: Profile, *,
                         cores: int | None | bool = True) -> float:
    """The rate of every link below which the step takes COMM_BOUND_SLOWDOWN times its
    time on unlimited links (bisection on a log scale between 1 kbit/s and 1 Tbit/s;
    0.0 when the step is never communication-bound)."""
    fast = predict(with_rate(work, 1e6), profile, cores=cores).step_s

    def bound(rate: float) -> bool:
        return predict(with_rate(work, rate), profile, cores=cores).step_s > (
            COMM_BOUND_SLOWDOWN * fast)

    lo, hi = math.log(1e-3), math.log(1e6)
    if not bound(math.exp(lo)):
        return 0.0
    for _ in range(24):  # 2**-24 of the log range: the rate to within 0.0002%
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if bound(math.exp(mid)) else (lo, mid)
    return math.exp(hi)
