"""Dynamic loss scaling of a pipeline computing in fp16 (`train.precision: fp16`).

    scaler = LossScaler.for_precision("fp16")       # None for fp32 and bf16
    (loss * scaler.scale).backward()                 # the last stage
    backward(out, grad_out * scaler.scale)           # a stage given its output's gradient
    send(scaler.unscale_boundary(inp.grad))          # the gradient a stage sends back
    if scaler.unscale_and_agree(params):             # at the optimizer step, every rank
        ...average, clip, step...                    # else every rank skips this step

torch.amp.GradScaler's rule (scale 2**16 at first, halved on an overflow, doubled after
2000 clean steps), for a model cut into stages: the gradients on the wire are unscaled
(the compressors see what they see in fp32), and the overflow flag is all-reduced over
every rank of the run, so all skip the same step and keep the same scale. Why:
docs/precision.md, "fp16 and loss scaling".
"""

from __future__ import annotations

import torch
import torch.distributed as dist

__all__ = ["LossScaler"]


class LossScaler:
    """One rank's loss scale (a power of two) and its overflow flag of the current step."""

    def __init__(self, init_scale: float = 2.0**16, growth_interval: int = 2000):
        self.scale = init_scale
        self.growth_interval = growth_interval
        self._clean_steps = 0  # steps since the last overflow or growth
        self._found_inf = False  # a non-finite gradient on this rank in this step

    @classmethod
    def for_precision(cls, precision: str) -> LossScaler | None:
        """A scaler for fp16 compute, None for the precisions that need none."""
        return cls() if precision == "fp16" else None

    def unscale_boundary(self, grad: torch.Tensor) -> torch.Tensor:
        """The gradient of a stage's input (B, L, D) as it goes on the wire: unscaled;
        a non-finite value marks the step (the quantizers would clip it to a finite one)."""
        grad = grad / self.scale
        if not bool(torch.isfinite(grad).all()):
            self._found_inf = True
        return grad

    def unscale_and_agree(self, params: list[torch.nn.Parameter], group=None) -> bool:
        """Unscale this rank's gradients in place and agree with every rank of `group`
        (default: the whole run) whether any saw a non-finite gradient; update the scale.
        True: take the step; False: every rank skips it."""
        inv = 1.0 / self.scale  # exact: the scale is a power of two
        found = self._found_inf
        for p in params:
            if p.grad is not None:
                p.grad.mul_(inv)
                found = found or not bool(torch.isfinite(p.grad).all())
        # on the gradients' device, as the pipeline's other all-reduces (NCCL: the GPU)
        device = params[0].device if params else torch.device("cpu")
        flag = torch.tensor([float(found)], device=device)
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
        self._found_inf = False
        if flag.item() > 0:
            self.scale /= 2
            self._clean_steps = 0
            return False
        self._clean_steps += 1
        if self._clean_steps == self.growth_interval:
            self.scale *= 2
            self._clean_steps = 0
        return True
