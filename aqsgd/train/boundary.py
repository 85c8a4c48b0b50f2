"""A stage's in-graph halves (aqsgd.compress.ingraph) as the worker builds them: the
mode's half made from the model's shape, the stage's blocks constrained to it (ssn),
its modules attached to the stage (so its optimizer trains them and its state dict
holds them), and the calibration pass of a half that starts from activations.

    boundary = attach_boundary(cfg, topo, module, device, init)   # before the optimizer
    record = calibrate(runner)        # before step 0: a `calibration` record, or None

The calibration pass (bottleneck's PCA init) runs step 0's micro-batches of replica 0
forward once, without gradients or dropout, sending each boundary's activations raw in
fp32 (counted in its record's bytes); both sides of a boundary then compute the same
principal components from the same rows. docs/trainable-codecs.md.
"""

from __future__ import annotations

import torch

from aqsgd.compress.ingraph import BoundaryShape, StageBoundary
from aqsgd.model.gpt2 import GPT2Stage, init_stage
from aqsgd.train.config import RunConfig

__all__ = ["attach_boundary", "calibrate", "starting_embeddings"]


def starting_embeddings(cfg: RunConfig, init) -> tuple[torch.Tensor, torch.Tensor]:
    """(token (V, D), position (L, D)) tables of the first stage the run starts from:
    the checkpoint's, or the random init's from the run's seed (any rank rebuilds them
    without the first stage: a stage of one block)."""
    first = init_stage(cfg.model, 0, cfg.model.n_layer, seed=cfg.train.seed, pretrained=init)
    return first.embed.wte.weight.detach(), first.embed.wpe.weight.detach()


def attach_boundary(cfg: RunConfig, topo, module: GPT2Stage, device: torch.device,
                    init) -> StageBoundary:
    """The stage's in-graph halves of `cfg.forward`'s mode, attached to `module` as its
    submodule `boundary` (the identity, with no parameters, for a byte-level mode or a
    single stage)."""
    half_type = cfg.forward.coding.in_graph
    if half_type is None or topo.stages == 1:
        boundary = StageBoundary(None, topo.is_first, topo.is_last)
        module.add_module("boundary", boundary)
        return boundary
    m = cfg.model
    shape = BoundaryShape(seq_len=m.seq_len, width=m.n_embd, vocab_size=m.vocab_size,
                          seed=cfg.train.seed, embeddings=lambda: starting_embeddings(cfg, init))
    half = half_type(cfg.forward, shape)
    # every block but the model's last writes into the residual stream through these
    writers = [getattr(block, part) for index, block in module.blocks.items()
               if int(index) != m.n_layer - 1 for part in ("attn", "mlp")]
    half.constrain(writers, module.embed)
    boundary = StageBoundary(half, topo.is_first, topo.is_last).to(device)
    module.add_module("boundary", boundary)
    return boundary


@torch.no_grad()
def calibrate(runner) -> dict | None:
    """The calibration pass (module docstring) of a PipelineRunner whose boundary's half
    calibrates; its record (kind `calibration`, the bytes it moved), or None."""
    boundary, topo = runner.boundary, runner.topo
    if boundary.half is None or not boundary.half.calibrates:
        return None
    runner.meter.reset()
    ids = runner.sampler.step_ids(0, 0)  # (M, B): replica 0's, so every replica agrees
    width = runner.module.cfg.n_embd
    was_training = runner.module.training
    runner.module.eval()
    sent, received = [], []
    for k in range(ids.shape[0]):
        tokens = runner.train_tokens[ids[k]].to(runner.device)  # (B, L)
        x = tokens
        if not topo.is_first:
            spec = [((*tokens.shape, width), torch.float32)]
            pend = runner.p2p.post_recv(topo.prev_rank, "activation", f"calibration mb{k}", spec)
            x = runner.p2p.wait_recv(pend)[0].to(runner.device)  # (B, L, D)
            received.append(x)
        if not topo.is_last:
            h = runner.module(x).float().contiguous()  # (B, L, D)
            runner.p2p.send(topo.next_rank, "activation", [h])
            sent.append(h)
    runner.p2p.wait_sends()
    runner.module.train(was_training)
    half = boundary.half
    if sent:
        half.calibrate(boundary.sender, torch.cat(sent).reshape(-1, width))
    if received:
        half.calibrate(boundary.receiver, torch.cat(received).reshape(-1, width))
    # sent raw before the first step, as a warm-up's traffic: no throughput counts it
    return runner.meter.record(kind="calibration", step=0, epoch=0, warmup=True,
                               rank=topo.rank, stage=topo.stage, replica=topo.replica)
