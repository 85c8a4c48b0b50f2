"""The stage executor: one pipeline stage of one data-parallel replica.

    runner = PipelineRunner(schedule=..., topo=Topology(stages=2, replicas=1, rank=r), ...)
    runner.train_step(step)                             # one optimizer step: its record
    runner.evaluate(step, eval_batches, micro_batch_size)  # held-out loss: its record

Each rank walks its stage's action list (aqsgd.train.schedule) once per optimizer step;
rank = replica * stages + stage. Per micro-batch k with sample ids ids[k] (B,):

    stage 0         input_ids (B, L) -> module -> hidden (B, L, D) -> fwd encode -> isend
    middle stages   irecv -> fwd decode -> hidden (B, L, D), requires_grad -> module -> ...
    last stage      ... -> logits (B, L, V) -> lm_loss / M
    backward        irecv -> bwd decode -> grad of output -> autograd -> grad of input
                    -> bwd encode -> isend to the previous stage

Receives are posted one message ahead, sends complete in the background until OPT_STEP.
Notes [sample ids], [warm-up flag], [clipping under QuantizedAdam], [adaptive widths],
[fp16 loss scaling] and [evaluation windows]: docs/pipeline.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.distributed as dist

from aqsgd.compress.adaptive import WidthChooser
from aqsgd.compress.ingraph import StageBoundary
from aqsgd.compress.message import message_spec
from aqsgd.compress.wire import spec_nbytes
from aqsgd.data.sampler import Sampler
from aqsgd.model.dropout import SampleMasks
from aqsgd.model.gpt2 import compute_precision
from aqsgd.train.loss_scale import LossScaler
from aqsgd.train.metrics import StepMeter
from aqsgd.train.p2p import P2P, PendingRecv
from aqsgd.train.schedule import Op, Schedule

__all__ = ["Topology", "make_groups", "linear_warmup_decay", "eval_batch_ids", "PipelineRunner",
           "InjectedFailure"]  # fmt: skip

_COMPRESSORS = ("fwd_send", "fwd_recv", "bwd_send", "bwd_recv")  # keys of `compressors`
_SENDERS = {"fwd_send": "activation", "bwd_send": "gradient"}  # sender -> kind of its bytes


class InjectedFailure(RuntimeError):
    """Raised by the `train.fail_at_step` test hook."""


@dataclass(frozen=True)
class Topology:
    stages: int
    replicas: int
    rank: int

    def __post_init__(self):
        if not 0 <= self.rank < self.stages * self.replicas:
            raise ValueError(
                f"rank {self.rank} outside world of {self.stages} stages x "
                f"{self.replicas} replicas"
            )

    @property
    def stage(self) -> int:
        return self.rank % self.stages

    @property
    def replica(self) -> int:
        return self.rank // self.stages

    @property
    def is_first(self) -> bool:
        return self.stage == 0

    @property
    def is_last(self) -> bool:
        return self.stage == self.stages - 1

    @property
    def prev_rank(self) -> int | None:
        return None if self.is_first else self.rank - 1

    @property
    def next_rank(self) -> int | None:
        return None if self.is_last else self.rank + 1

    def dp_ranks(self, stage: int) -> list[int]:
        return [r * self.stages + stage for r in range(self.replicas)]

    def pipe_ranks(self, replica: int) -> list[int]:
        return [replica * self.stages + s for s in range(self.stages)]


def make_groups(topo: Topology, timeout) -> tuple[object, object]:
    """(data-parallel group of this stage, pipeline group of this replica).
    new_group is collective: every rank creates every group, in the same order."""
    dp_group = pipe_group = None
    for s in range(topo.stages):
        g = dist.new_group(topo.dp_ranks(s), timeout=timeout)
        if s == topo.stage:
            dp_group = g
    for r in range(topo.replicas):
        g = dist.new_group(topo.pipe_ranks(r), timeout=timeout)
        if r == topo.replica:
            pipe_group = g
    return dp_group, pipe_group


def linear_warmup_decay(warmup_steps: int, total_steps: int) -> Callable[[int], float]:
    """LR multiplier: linear 0 -> 1 over warmup_steps, then linear 1 -> 0 at total_steps."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    return factor


def eval_batch_ids(num_batches: int, micro_batch_size: int, replica: int, replicas: int,
                   num_eval: int) -> list[torch.Tensor]:  # fmt: skip
    """(B,) int64 held-out window ids of each of `replica`'s evaluation micro-batches:
    micro-batch j is the global evaluation micro-batch j * replicas + replica, windows
    taken in order and wrapped around when more are asked for than there are."""
    B = micro_batch_size
    span = max(1, num_eval - B + 1)  # start positions that leave a whole micro-batch
    return [torch.arange(start, start + B)
            for start in (((j * replicas + replica) * B) % span for j in range(num_batches))]


@dataclass
class _MicroBatch:
    ids: torch.Tensor  # (B,) int64
    tokens: torch.Tensor  # (B, L) int64
    wire_tokens: torch.Tensor | None = None  # (B, L) as received (an in-graph half's)
    inp: torch.Tensor | None = None  # received activation (B, L, D), requires grad
    out: torch.Tensor | None = None  # stage output
    loss: torch.Tensor | None = None  # last stage only
    grad_out: torch.Tensor | None = None  # received gradient of `out`


class PipelineRunner:
    """Runs training steps and evaluations of one stage on one rank."""

    def __init__(self, *, schedule: Schedule, topo: Topology, module: torch.nn.Module,
                 loss_fn: Callable, train_tokens: torch.Tensor, eval_tokens: torch.Tensor,
                 sampler: Sampler, compressors: dict, dp, lr_scheduler, pipe_group, dp_group,
                 clip: float, meter: StepMeter, p2p: P2P, device: torch.device,
                 fail_at_step: int | None = None,
                 after_sync: Callable[[int], None] | None = None,
                 dropout_masks: SampleMasks | None = None, precision: str = "fp32",
                 boundary: StageBoundary | None = None):  # fmt: skip
        self.schedule, self.topo, self.module, self.loss_fn = schedule, topo, module, loss_fn
        self.train_tokens, self.eval_tokens = train_tokens, eval_tokens  # (N, L) int64
        self.sampler, self.comp, self.dp, self.lr_scheduler = sampler, compressors, dp, lr_scheduler
        self.pipe_group, self.dp_group, self.clip = pipe_group, dp_group, clip
        self.meter, self.p2p, self.device = meter, p2p, device
        self.fail_at_step = fail_at_step
        self.after_sync = after_sync  # test hook, called with the step after dp sync
        self.dropout_masks = dropout_masks  # None: dropout masks from torch's RNG
        self.precision = precision  # train.precision: autocast in forward and loss (or none)
        self.scaler = LossScaler.for_precision(precision)  # Note [fp16 loss scaling]
        self.actions = schedule.stage_actions(topo.stage)
        # the in-graph halves around this stage (aqsgd.compress.ingraph); their parameters
        # are the module's (a submodule), so they are in `params` and the optimizer
        self.boundary = boundary or StageBoundary(None, topo.is_first, topo.is_last)
        self.params = [p for p in module.parameters() if p.requires_grad]
        self._dp_sent = self._dp_recv = 0
        self.choosers = self._make_choosers()  # Note [adaptive widths]
        self._compute_per_mb_s = math.inf  # the last step's compute per micro-batch
        self._stretch_s = 0.0  # the last step's time beyond its compute

    def _make_choosers(self) -> dict[str, WidthChooser]:
        choosers = {}
        shape = (self.sampler.micro_batch_size, *self.comp["sample_shape"])
        for key in _SENDERS:
            c = self.comp.get(key)
            if c is not None and c.adaptive:
                def nbytes(bits, cfg=c.cfg):
                    return spec_nbytes(message_spec(cfg, shape, 0, bits=bits))
                choosers[key] = WidthChooser(c.cfg.widths, nbytes, start=c.cfg.bits)
        return choosers

    def _choose_widths(self) -> dict | None:
        """Update every chooser from the last step (Note [adaptive widths]); their state."""
        if not self.choosers:
            return None
        states = {}
        for key, chooser in self.choosers.items():
            peer = self.topo.next_rank if key == "fwd_send" else self.topo.prev_rank
            sent, busy = self.p2p.take_send_times(peer)
            bits = chooser.update(sent, max(busy, self._stretch_s), self._compute_per_mb_s)
            self.comp[key].set_next_bits(bits)
            budget = self._compute_per_mb_s
            state = chooser.state(budget if math.isfinite(budget) else None)
            states[_SENDERS[key]] = dict(vars(state), sent_bytes=sent, busy_s=busy,
                                         stretch_s=self._stretch_s)
        return states

    # ----------------------------------------------------------- receives
    def _recv_order(self, op: Op) -> list[int]:
        return [a.micro_batch for a in self.actions if a.op is op]

    def _post(self, kind: str, mb: _MicroBatch, k: int, step: int, training: bool) -> PendingRecv:
        shape = (mb.ids.numel(), *self.comp["sample_shape"])
        if kind == "activation":
            peer, codec = self.topo.prev_rank, self.comp["fwd_recv"]
        else:
            peer, codec = self.topo.next_rank, self.comp["bwd_recv"]
        spec = codec.wire_spec(shape, mb.ids, training=training)
        if kind == "activation":
            spec = spec + self.boundary.extra_spec(shape)
        return self.p2p.post_recv(peer, kind, f"{kind} mb{k} step {step}", spec,
                                  length_first=codec.cfg.sized_by_data)

    # ----------------------------------------------------------- one step
    def train_step(self, step: int) -> dict:
        self.meter.reset()
        epoch = self.sampler.epoch_of(step)
        compressors = [self.comp[k] for k in _COMPRESSORS if self.comp.get(k) is not None]
        for c in compressors:
            c.set_epoch(epoch)
        warmup = any(c.in_warmup for c in compressors)  # Note [warm-up flag]
        adaptive = self._choose_widths()
        ids = self.sampler.step_ids(step, self.topo.replica)  # (M, B)
        mbs = [_MicroBatch(ids[k], self.train_tokens[ids[k]]) for k in range(ids.shape[0])]
        self.module.train()
        recv = _RecvQueues(self, mbs, step)
        grad_norm = lr = None
        scale = self.scaler.scale if self.scaler else None  # this step's loss scale
        for a in self.actions:
            k = a.micro_batch
            if a.op in (Op.RECV_ACT, Op.RECV_GRAD):
                recv.take(a.op, k)
            elif a.op is Op.FORWARD:
                if self.fail_at_step == step:
                    raise InjectedFailure(f"train.fail_at_step={step}: injected (test hook)")
                self._forward(mbs[k], k, len(mbs))
            elif a.op is Op.SEND_ACT:
                with self.meter.span("compress", f"encode act mb{k}"):
                    msg = self.comp["fwd_send"].encode(mbs[k].out.detach(), mbs[k].ids)
                    msg += self.boundary.pack(mbs[k].wire_tokens)
                self._send("fwd_send", msg)
            elif a.op is Op.BACKWARD:
                self._backward(mbs[k], k)
            elif a.op is Op.SEND_GRAD:
                grad = mbs[k].inp.grad
                if self.scaler:  # Note [fp16 loss scaling]: the wire carries it unscaled
                    grad = self.scaler.unscale_boundary(grad)
                with self.meter.span("compress", f"encode grad mb{k}"):
                    msg = self.comp["bwd_send"].encode(grad, mbs[k].ids)
                self._send("bwd_send", msg)
                mbs[k].inp = None
            elif a.op is Op.OPT_STEP:
                grad_norm, lr = self._optimizer_step(step)
        loss = float(sum(m.loss.item() for m in mbs) / len(mbs)) if self.topo.is_last else None
        n = sum(m.ids.numel() for m in mbs)
        self._compute_per_mb_s = self.meter.seconds["compute"] / len(mbs)
        rec = self.meter.record(
            kind="train", step=step, epoch=epoch, warmup=warmup, rank=self.topo.rank,
            stage=self.topo.stage, replica=self.topo.replica, loss=loss, samples=n,
            tokens=n * self.train_tokens.shape[1], lr=lr, grad_norm=grad_norm,
            adaptive=adaptive, **({} if scale is None else {
                "loss_scale": scale, "step_skipped": grad_norm is None}),
        )  # fmt: skip
        pure = (len(mbs) + self.topo.stages - 1) * self._compute_per_mb_s
        self._stretch_s = max(0.0, rec["step_time_s"] - pure)
        return rec

    def _send(self, key: str, msg: list[torch.Tensor]) -> None:
        """Send what compressor `key` (fwd_send, bwd_send) just encoded to its peer."""
        kind, codec = _SENDERS[key], self.comp[key]
        self.meter.note_bits(kind, codec.last_bits)
        peer = self.topo.next_rank if key == "fwd_send" else self.topo.prev_rank
        self.p2p.send(peer, kind, msg, length_first=codec.cfg.sized_by_data)

    def _on_recv(self, op: Op, mb: _MicroBatch, k: int, tensors: list[torch.Tensor]) -> None:
        if op is Op.RECV_ACT:
            with self.meter.span("compress", f"decode act mb{k}"):
                tensors, mb.wire_tokens = self.boundary.unpack(tensors, mb.tokens)
                x = self.comp["fwd_recv"].decode(tensors, mb.ids)
            mb.inp = x.requires_grad_(True)
        else:
            with self.meter.span("compress", f"decode grad mb{k}"):
                mb.grad_out = self.comp["bwd_recv"].decode(tensors, mb.ids)

    def _forward(self, mb: _MicroBatch, k: int, num_mb: int) -> None:
        masks = self.dropout_masks.samples(mb.ids) if self.dropout_masks else nullcontext()
        autocast = compute_precision(self.precision, self.device)
        with self.meter.span("compute", f"F{k}"), masks, autocast:
            mb.out = self._stage(mb, mb.inp)
            if self.topo.is_last:
                mb.loss = self.loss_fn(mb.out, mb.tokens.to(self.device))
                mb.out = mb.loss / num_mb  # backward of the mean over micro-batches

    def _stage(self, mb: _MicroBatch, inp: torch.Tensor | None) -> torch.Tensor:
        """The stage between its in-graph halves: received rows (or the tokens) -> what
        it sends (or the logits)."""
        if self.topo.is_first:
            mb.wire_tokens = mb.tokens.to(self.device)
            return self.boundary.outbound(self.module(mb.wire_tokens), mb.wire_tokens)
        out = self.module(self.boundary.inbound(inp, mb.wire_tokens))
        return out if self.topo.is_last else self.boundary.outbound(out, mb.wire_tokens)

    def _backward(self, mb: _MicroBatch, k: int) -> None:
        scale = self.scaler.scale if self.scaler else 1.0  # Note [fp16 loss scaling]
        with self.meter.span("compute", f"B{k}"):
            if self.topo.is_last:
                (mb.out * scale if self.scaler else mb.out).backward()
            else:
                grad_out = mb.grad_out * scale if self.scaler else mb.grad_out
                torch.autograd.backward(mb.out, grad_out)
        mb.out = mb.grad_out = None
        mb.loss = mb.loss.detach() if mb.loss is not None else None

    def _optimizer_step(self, step: int) -> tuple[float | None, float]:
        """Returns (global grad norm before clipping, lr used); the norm is None for a
        step every rank skipped on an fp16 overflow (Note [fp16 loss scaling])."""
        self.p2p.wait_sends()
        opt = self.dp.optimizer
        lr = opt.param_groups[0]["lr"]
        if self.scaler:
            with self.meter.span("comm_wait", "overflow all-reduce"):
                ok = self.scaler.unscale_and_agree(self.params)
            if not ok:
                opt.zero_grad(set_to_none=True)
                self.lr_scheduler.step()
                return None, lr
        if self.topo.replicas > 1:  # averaging over a group of one is the identity
            with self.meter.span("dp_sync", "dp synchronize"):
                self.dp.synchronize()
        for p in self.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        if self.after_sync is not None:
            self.after_sync(step)
        with self.meter.span("comm_wait", "grad norm all-reduce"):
            sq = torch.stack([p.grad.detach().float().pow(2).sum() for p in self.params]).sum()
            if self.topo.stages > 1:
                dist.all_reduce(sq, group=self.pipe_group)
            if self.topo.replicas > 1 and self.dp.exchanges_in_step:
                # Note [clipping under QuantizedAdam]
                dist.all_reduce(sq, group=self.dp_group)
                sq /= self.topo.replicas
        norm = math.sqrt(sq.item())
        if self.clip > 0 and norm > self.clip:
            coef = self.clip / (norm + 1e-6)
            for p in self.params:
                p.grad.mul_(coef)
        # qadam exchanges Adam's first moment inside step(): that is data-parallel time
        exchanges = self.topo.replicas > 1 and self.dp.exchanges_in_step
        with self.meter.span("dp_sync" if exchanges else "compute", "optimizer step"):
            opt.step()
            self.lr_scheduler.step()
            opt.zero_grad(set_to_none=True)
        # cumulative counters; read after step() so qadam's bytes land in this step
        sent, recv = int(self.dp.bytes_sent), int(self.dp.bytes_recv)
        self.meter.add_bytes("dp", None, sent=sent - self._dp_sent, recv=recv - self._dp_recv)
        self._dp_sent, self._dp_recv = sent, recv
        return norm, lr

    # ----------------------------------------------------------- evaluation
    def evaluate(self, step: int, num_batches: int, micro_batch_size: int) -> dict:
        """Forward-only pass over held-out windows (Note [evaluation windows]);
        `step` is the number of optimizer steps done so far."""
        self.meter.reset()
        self.module.eval()
        R = self.topo.replicas
        batches = [_MicroBatch(ids, self.eval_tokens[ids]) for ids in eval_batch_ids(
            num_batches, micro_batch_size, self.topo.replica, R, self.eval_tokens.shape[0])]
        loss_sum = torch.zeros((), dtype=torch.float64)
        with torch.no_grad():
            pend = self._post("activation", batches[0], 0, step, False) if (
                batches and not self.topo.is_first) else None  # fmt: skip
            for j, mb in enumerate(batches):
                if not self.topo.is_first:
                    tensors, mb.wire_tokens = self.boundary.unpack(self.p2p.wait_recv(pend),
                                                                   mb.tokens)
                    mb.inp = self.comp["fwd_recv"].decode(tensors, mb.ids, training=False)
                    if j + 1 < len(batches):
                        pend = self._post("activation", batches[j + 1], j + 1, step, False)
                autocast = compute_precision(self.precision, self.device)
                with self.meter.span("compute", f"eval F{j}"), autocast:
                    out = self._stage(mb, mb.inp)  # (lm_loss takes bf16 logits to fp32)
                if self.topo.is_last:
                    loss_sum += self.loss_fn(out, mb.tokens.to(self.device)).double().cpu()
                else:
                    msg = self.comp["fwd_send"].encode(out, mb.ids, training=False)
                    self._send("fwd_send", msg + self.boundary.pack(mb.wire_tokens))
            self.p2p.wait_sends()
        eval_loss = ppl = None
        if self.topo.is_last:
            both = torch.stack([loss_sum, torch.tensor(float(len(batches)), dtype=torch.float64)])
            if R > 1:
                dist.all_reduce(both, group=self.dp_group)
            eval_loss = float(both[0] / both[1])
            ppl = math.exp(min(eval_loss, 700.0))
        n = len(batches) * micro_batch_size
        rec = self.meter.record(
            kind="eval", step=step, epoch=self.sampler.epoch_of(step), warmup=False,
            rank=self.topo.rank, stage=self.topo.stage, replica=self.topo.replica,
            eval_loss=eval_loss, perplexity=ppl, samples=n, tokens=n * self.eval_tokens.shape[1],
        )  # fmt: skip
        rec["eval_time_s"] = rec.pop("step_time_s")
        return rec


class _RecvQueues:
    """Receives of one training step, posted one message ahead per direction in the
    schedule's order (the order the peer sends in), each posted only after the
    previous message of its direction was decoded (the compressor contract)."""

    _KINDS = {Op.RECV_ACT: "activation", Op.RECV_GRAD: "gradient"}

    def __init__(self, runner: PipelineRunner, mbs: list[_MicroBatch], step: int):
        self.runner, self.mbs, self.step = runner, mbs, step
        self.order = {op: runner._recv_order(op) for op in self._KINDS}
        self.pending: dict[Op, PendingRecv | None] = {}
        for op in self._KINDS:
            self._post_next(op)

    def _post_next(self, op: Op) -> None:
        order = self.order[op]
        self.pending[op] = None
        if order:
            k = order[0]
            self.pending[op] = self.runner._post(self._KINDS[op], self.mbs[k], k, self.step, True)

    def take(self, op: Op, k: int) -> None:
        """Wait for micro-batch k's message of this direction, decode it into its
        micro-batch, post the next receive."""
        assert self.pending[op] is not None and self.order[op][0] == k, (op, k, self.order[op])
        tensors = self.runner.p2p.wait_recv(self.pending[op])
        self.order[op].pop(0)
        self.runner._on_recv(op, self.mbs[k], k, tensors)
        self._post_next(op)
