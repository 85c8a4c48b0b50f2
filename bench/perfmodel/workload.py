"""What one optimizer step of a cell does, as numbers the simulation walks: compute per
stage, every message's bytes and coding time, each used link's rate and delay, and the
data-parallel exchange.

    work = step_workload(run_config, placement, profile)

Bytes come from the compressors' own size rules (`aqsgd.compress.message.message_spec`
for a pipeline message, `aqsgd.compress.gradient.exchange_nbytes` for the data-parallel
exchange), in the steady state the measured steps run in: after the warm-up epochs every
sample is in the caches (n_raw = 0 for directq and the aqsgd modes) and QuantizedAdam is
past its freeze. A mode sized by data (its bytes known only after encoding) is costed at
the size it declares it expects (`message_spec(..., expected=True)`, its length prefix
included). A mode with an in-graph half sends rows of its k coordinates, and its token
ids when its receiver needs them (aqsgd.compress.ingraph). Compute comes from the
profile: measured per-stage costs of the same cut and micro-batch when the profile has
them, else FLOPs over its achieved FLOP rate; a replayed run's (`compute: replay:...`)
are the times its run config says its stages waited (`RunConfig.compute.stages`), not
the profile's. A host's uplink or downlink cap (a scenario's `hosts`) is one wire that
every link out of or into the host shares (`StepWorkload.wires`).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from aqsgd.compress.adaptive import widest_fitting
from aqsgd.compress.gradient import exchange_nbytes
from aqsgd.compress.ingraph import boundary_width, token_spec
from aqsgd.compress.message import message_spec, steady_raw_rows
from aqsgd.compress.wire import spec_nbytes
from aqsgd.model.config import PRESETS, ModelConfig, layer_split
from aqsgd.train.config import RunConfig
from bench.net.placement import Placement
from bench.perfmodel.profile import Profile

__all__ = ["ADAM_BYTES_PER_PARAM", "StageWork", "LinkWork", "HostWire", "StepWorkload",
           "stage_params",
           "stage_flops", "step_workload", "preset_of", "adaptive_bits", "UnprofiledShape"]

# AdamW per parameter and step: read parameter, gradient and both moments (16 bytes),
# write parameter and both moments (12 bytes), all fp32.
ADAM_BYTES_PER_PARAM = 28


@dataclass(frozen=True)
class StageWork:
    """Per micro-batch: forward, backward; per step: optimizer (seconds)."""

    forward_s: float
    backward_s: float
    optimizer_s: float
    params: int

    def scaled(self, factor: float) -> StageWork:
        """This stage's compute times `factor` (the parameters unchanged)."""
        return StageWork(self.forward_s * factor, self.backward_s * factor,
                         self.optimizer_s * factor, self.params)


@dataclass(frozen=True)
class LinkWork:
    """One directed link between two ranks' hosts (None rate: unshaped)."""

    rate_mbit: float | None
    delay_ms: float


@dataclass(frozen=True)
class HostWire:
    """A host's capped uplink or downlink: one wire of `rate_mbit` that every message out
    of (`direction` "up") or into ("down") host `host` holds while it is sent."""

    host: int
    direction: str  # "up" or "down"
    rate_mbit: float


@dataclass(frozen=True)
class StepWorkload:
    schedule: str
    stages: int
    replicas: int
    micro_batches: int
    samples_per_step: int
    stage: tuple[StageWork, ...]
    act_bytes: int  # one forward message (a micro-batch's activations at a boundary)
    grad_bytes: int  # one backward message
    encode_act_s: float  # coding time of one message at the sender / receiver
    decode_act_s: float
    encode_grad_s: float
    decode_grad_s: float
    dp_bytes: tuple[int, ...]  # per stage: bytes one rank sends in the exchange per step
    dp_codec_s: tuple[float, ...]  # per stage: the gradient codec's compute per step
    grad_mode: str
    links: dict[tuple[int, int], LinkWork]  # (src rank, dst rank) -> its link
    # True: the stages wait their times (replayed compute), they do not share cores
    replayed: bool = False
    # (src rank, dst rank) -> the host wires a message on that link also holds
    wires: dict[tuple[int, int], tuple[HostWire, ...]] = field(default_factory=dict)

    def replace(self, **changes) -> StepWorkload:
        return dataclasses.replace(self, **changes)


def preset_of(model: ModelConfig) -> str | None:
    """The preset's name when `model` has a preset's shape (profiles key measurements by
    it); dropout is not compared: it changes no shape, and its cost is within the noise
    of the measured costs."""
    return next((name for name, cfg in PRESETS.items()
                 if cfg.replace(dropout=model.dropout) == model), None)


def _block_params(cfg: ModelConfig) -> int:
    return cfg.replace(n_layer=2).num_parameters() - cfg.replace(n_layer=1).num_parameters()


def stage_params(cfg: ModelConfig, stages: int) -> list[int]:
    """Parameters of each stage: its blocks, wte and wpe on the first, ln_f and the untied
    head (a d x V matrix, no bias) on the last; from ModelConfig.num_parameters."""
    block = _block_params(cfg)
    outer = cfg.replace(n_layer=1).num_parameters() - block  # embeddings + ln_f + head
    head = 2 * cfg.n_embd + cfg.n_embd * cfg.vocab_size
    out = [len(r) * block for r in layer_split(cfg.n_layer, stages)]
    out[0] += outer - head
    out[-1] += head
    return out


def stage_flops(cfg: ModelConfig, stages: int, micro_batch_size: int) -> list[float]:
    """Forward FLOPs of each stage for one micro-batch: 2 per weight per token for the
    blocks' matrices (and the head on the last stage), plus attention's two L x L
    products (4 L^2 d per sample and block)."""
    d, seq, f = cfg.n_embd, cfg.seq_len, cfg.inner_dim
    tokens = micro_batch_size * seq
    block = 2 * tokens * (4 * d * d + 2 * d * f) + 4 * micro_batch_size * seq * seq * d
    out = [len(r) * float(block) for r in layer_split(cfg.n_layer, stages)]
    out[-1] += 2.0 * tokens * d * cfg.vocab_size
    return out


class UnprofiledShape(ValueError):
    """A model shape whose stages the profile neither measured nor can derive (it has no
    flop rate)."""


def _stage_work(config: RunConfig, profile: Profile) -> tuple[StageWork, ...]:
    p, model = config.pipeline, config.model
    params = stage_params(model, p.stages)
    if config.compute.replayed:  # exactly what the stages waited
        return tuple(StageWork(t.forward_s, t.backward_s, t.optimizer_s, n)
                     for t, n in zip(config.compute.stages, params, strict=True))
    preset = preset_of(model)
    measured = profile.compute.measured(preset, p.stages, p.micro_batch_size) if preset else []
    if measured:
        return tuple(StageWork(c.forward_s, c.backward_s, c.optimizer_s, n)
                     for c, n in zip(measured, params, strict=True))
    rate = profile.compute.flop_rate_tflops
    if rate is None:
        what = preset or "this model"
        raise UnprofiledShape(f"profile {profile.name!r} has no measured stages for {what} "
                              f"in {p.stages} stages at micro-batch {p.micro_batch_size} "
                              f"and no flop_rate_tflops to derive them")
    mem = profile.compute.optimizer_gbyte_s
    out = []
    for flops, n in zip(stage_flops(model, p.stages, p.micro_batch_size), params, strict=True):
        forward = flops / (rate * 1e12)
        optimizer = n * ADAM_BYTES_PER_PARAM / (mem * 1e9) if mem else 0.0
        out.append(StageWork(forward, 2.0 * forward, optimizer, n))  # backward: 2x forward
    return tuple(out)


def _links(placement: dict) -> dict[tuple[int, int], LinkWork]:
    """(src rank, dst rank) -> link, from `Placement.to_dict()` (what meta.json keeps)."""
    by_hosts = {(u["src"], u["dst"]): LinkWork(u["rate_mbit"], u["delay_ms"])
                for u in placement["links"]}
    hosts = [r["host"] for r in sorted(placement["ranks"], key=lambda r: r["rank"])]
    return {(a, b): by_hosts[(hosts[a], hosts[b])] for a in range(len(hosts))
            for b in range(len(hosts)) if (hosts[a], hosts[b]) in by_hosts}


def _wires(placement: dict, caps: Iterable[tuple[int, float | None, float | None]]
           ) -> dict[tuple[int, int], tuple[HostWire, ...]]:
    """(src rank, dst rank) -> the capped host wires of a link between two hosts (caps:
    (host, uplink Mbit/s, downlink Mbit/s), None uncapped)."""
    up = {h: HostWire(h, "up", u) for h, u, _ in caps if u is not None}
    down = {h: HostWire(h, "down", d) for h, _, d in caps if d is not None}
    hosts = [r["host"] for r in sorted(placement["ranks"], key=lambda r: r["rank"])]
    out = {}
    for a, b in itertools.permutations(range(len(hosts)), 2):
        ha, hb = hosts[a], hosts[b]
        held = tuple(w for w in (up.get(ha), down.get(hb)) if w is not None and ha != hb)
        if held:
            out[(a, b)] = held
    return out


def adaptive_bits(cfg, shape, stage: tuple[StageWork, ...],
                  links: dict[tuple[int, int], LinkWork]) -> int:
    """The steady width of an adaptive direction (`cfg.widths`): the chooser's rule
    (aqsgd.compress.adaptive.widest_fitting) on the slowest shaped link and the fastest
    stage's compute per micro-batch, the tightest boundary; the widest on unshaped links.
    One width for every link, as the workload has one message size per direction."""
    rates = [w.rate_mbit for w in links.values() if w.rate_mbit is not None]
    if not rates:
        return cfg.widths[-1]
    budget = min(w.forward_s + w.backward_s for w in stage)

    def size(bits: int) -> int:
        return spec_nbytes(message_spec(cfg, shape, steady_raw_rows(cfg, shape[0]), bits=bits))

    return widest_fitting(cfg.widths, size, min(rates) * 1e6 / 8, budget)


def step_workload(config: RunConfig, placement: Placement | dict, profile: Profile,
                  host_caps: Iterable[tuple[int, float | None, float | None]] = ()
                  ) -> StepWorkload:
    """The step of `config` on `placement` (a Placement or its `to_dict()`, as meta.json
    keeps it), costed by `profile`; `host_caps` the scenario's per-host caps as (host,
    uplink Mbit/s, downlink Mbit/s) (module docstring)."""
    p, model = config.pipeline, config.model
    if isinstance(placement, Placement):
        placement = placement.to_dict()
    if (placement["stages"], placement["replicas"]) != (p.stages, p.replicas):
        raise ValueError(f"placement of {placement['stages']} x {placement['replicas']} ranks "
                         f"for a run of {p.stages} stages x {p.replicas} replicas")
    # a mode with an in-graph half sends its k coordinates a token (and maybe the ids)
    shape = (p.micro_batch_size, model.seq_len, boundary_width(config.forward, model.n_embd))
    elements = p.micro_batch_size * model.seq_len * shape[2]

    stage = _stage_work(config, profile)
    links = _links(placement)

    def nbytes(cfg) -> int:
        if cfg.widths:  # adaptive: the width its chooser settles on (adaptive_bits)
            cfg = dataclasses.replace(cfg, bits=adaptive_bits(cfg, shape, stage, links))
        return spec_nbytes(message_spec(cfg, shape, steady_raw_rows(cfg, shape[0]),
                                        expected=True))

    # a plug-in's mode the profile has no entry for is unprofiled: its coding costs 0 here
    # and `bench model` marks its row (CompressProfile.unprofiled)
    enc = defaultdict(float, profile.compress.encode_s_per_element)
    dec = defaultdict(float, profile.compress.decode_s_per_element)
    grad = config.grad
    dp_bytes = tuple(exchange_nbytes(grad, w.params, p.replicas) if p.replicas > 1 else 0
                     for w in stage)
    dp_codec = tuple(profile.compress.grad_s_per_element.get(grad.mode, 0.0) * w.params
                     if p.replicas > 1 else 0.0 for w in stage)
    return StepWorkload(
        schedule=p.schedule, stages=p.stages, replicas=p.replicas,
        micro_batches=p.num_micro_batches, samples_per_step=p.samples_per_step, stage=stage,
        act_bytes=nbytes(config.forward) + spec_nbytes(token_spec(config.forward, shape)),
        grad_bytes=nbytes(config.backward),
        encode_act_s=enc[config.forward.mode] * elements,
        decode_act_s=dec[config.forward.mode] * elements,
        encode_grad_s=enc[config.backward.mode] * elements,
        decode_grad_s=dec[config.backward.mode] * elements,
        dp_bytes=dp_bytes, dp_codec_s=dp_codec, grad_mode=grad.mode, links=links,
        replayed=config.compute.replayed, wires=_wires(placement, host_caps))
