"""One pipeline-parallel fine-tuning worker (one process per stage and replica).

    python -m aqsgd.train.worker --config examples/tiny-2stage.yaml --local 2
    python -m aqsgd.train.worker --config RUN.yaml --rank R --world-size W --master-addr A \
        --master-port P
    torchrun --nproc-per-node 2 -m aqsgd.train.worker --config RUN.yaml  # torchrun env

Rank layout (rank = replica * stages + stage), the files a rank writes, `--local` and
Note [failure handling] (one line, then os._exit(1); every wait has `dist.timeout_s`):
docs/pipeline.md, "The worker process".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import traceback
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from aqsgd.compress.activation import make_compressor
from aqsgd.compress.gradient import make_data_parallel
from aqsgd.compress.ingraph import boundary_width
from aqsgd.data.sampler import Sampler
from aqsgd.model.dropout import use_sample_dropout
from aqsgd.model.gpt2 import init_stage, lm_loss
from aqsgd.train.boundary import attach_boundary, calibrate
from aqsgd.train.config import ConfigError, RunConfig, load_config
from aqsgd.train.metrics import MetricsWriter, StepMeter
from aqsgd.train.p2p import P2P
from aqsgd.train.pipeline import PipelineRunner, Topology, linear_warmup_decay, make_groups
from aqsgd.train.replay import ReplayStage, optimizer_wait, replay_loss
from aqsgd.train.replay_coding import ReplayedCoder
from aqsgd.train.replay_weights import ReplayWeights, stage_shapes
from aqsgd.train.schedule import make_schedule
from aqsgd.train.tensorboard import TensorBoardWriter

__all__ = ["main", "cli", "run_worker", "run_local", "local_summary", "load_tokens"]


# ------------------------------------------------------------------- data


def _synthetic_tokens(n: int, seq_len: int, vocab: int, seed: int) -> torch.Tensor:
    """(n, seq_len) windows of arithmetic progressions mod vocab, random start and
    stride per window: learnable in a few steps, needs no tokenizer. For runtime
    tests and benchmarks; real text comes from aqsgd.data.windows."""
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, vocab, (n, 1), generator=g)
    stride = torch.randint(1, 8, (n, 1), generator=g)
    return (start + stride * torch.arange(seq_len)) % vocab  # (n, L) int64


def load_tokens(cfg: RunConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """(train windows (N, L), eval windows (E, L)), int64, identical on every rank."""
    L, V, d = cfg.model.seq_len, cfg.model.vocab_size, cfg.data
    if d.name == "synthetic":
        n = d.max_samples or 256
        return (_synthetic_tokens(n, L, V, cfg.train.seed),
                _synthetic_tokens(d.eval_samples, L, V, cfg.train.seed + 1))  # fmt: skip
    # imported here: only text runs need the tokenizer stack
    from aqsgd.data import windows as data

    return data.load_windows(d, cfg.model, tokenizer=_tokenizer(cfg))


def _tokenizer(cfg: RunConfig):
    """The run's tokenizer: data.tokenizer's files, else the suite's BPE; its vocabulary
    checked against the model's (equal for a checkpoint: aqsgd.model.source)."""
    from aqsgd.model.source import run_tokenizer

    init = cfg.train.init_from
    checkpoint = None if init in (None, "pretrained") else init
    return run_tokenizer(cfg.data.tokenizer, cfg.model.vocab_size, checkpoint=checkpoint)


# ------------------------------------------------------------------- one rank


def _device(cfg: RunConfig, rank: int) -> torch.device:
    want = cfg.dist.device
    if want == "auto":
        want = "cuda" if torch.cuda.is_available() else "cpu"
    if want == "cuda":
        return torch.device("cuda", rank % torch.cuda.device_count())
    return torch.device("cpu")


def _wire_device(device: torch.device) -> torch.device:
    """Where point-to-point messages travel from: gloo sends and receives host memory only
    (torch.distributed's backend table), so a CUDA rank on gloo goes through the CPU; NCCL
    sends from the GPU. On one GPU NCCL refuses two ranks ("Duplicate GPU detected"), which
    leaves gloo (docs/performance-model.md, "The GPU check")."""
    if device.type == "cuda" and dist.get_backend() == "gloo":
        return torch.device("cpu")
    return device


def _build_compressors(cfg: RunConfig, topo: Topology, n_train: int, device) -> dict:
    # an in-graph half's boundary carries its k coordinates a token (aqsgd.compress.ingraph)
    shape = (cfg.model.seq_len, boundary_width(cfg.forward, cfg.model.n_embd))
    seed = cfg.train.seed * 1000 + topo.rank
    comp: dict = {"sample_shape": shape}
    if not topo.is_last:
        comp["fwd_send"] = make_compressor(cfg.forward, "send", shape, n_train, device, seed)
        comp["bwd_recv"] = make_compressor(cfg.backward, "recv", shape, n_train, device, seed,
                                           kind="gradient")  # fmt: skip
    if not topo.is_first:
        comp["fwd_recv"] = make_compressor(cfg.forward, "recv", shape, n_train, device, seed)
        comp["bwd_send"] = make_compressor(cfg.backward, "send", shape, n_train, device, seed,
                                           kind="gradient")  # fmt: skip
    rates = cfg.compute.coding_rates
    if rates is not None:  # compute.coding replay: each coder waits the profile's time
        per_element = {"fwd": (rates.forward_encode_s, rates.forward_decode_s),
                       "bwd": (rates.backward_encode_s, rates.backward_decode_s)}
        for key in ("fwd_send", "fwd_recv", "bwd_send", "bwd_recv"):
            if key in comp:
                encode_s, decode_s = per_element[key[:3]]
                comp[key] = ReplayedCoder(comp[key], encode_s=encode_s, decode_s=decode_s)
    return comp


def _load_stage(cfg: RunConfig, topo: Topology, device: torch.device) -> torch.nn.Module:
    """The stage's module: its GPT-2 layers with their starting weights, or under replayed
    compute a stand-in that holds no weights (aqsgd.train.replay)."""
    if cfg.compute.replayed:
        if cfg.forward.coding.in_graph is not None:  # its halves are layers of the stages
            raise ConfigError(f"forward.mode {cfg.forward.mode!r} codes inside the stages' "
                              f"graph; compute.source {cfg.compute.source!r} has no stages "
                              f"to hold it (docs/replay.md)")
        weights = None  # replicas: the real stage's gradient size to exchange
        if topo.replicas > 1:
            weights = ReplayWeights(stage_shapes(cfg.model, topo.stage, topo.stages),
                                    seed=cfg.train.seed * 1000 + topo.rank, device=device)
            recorded = cfg.compute.grad_params[topo.stage]
            if weights.numel != recorded:
                raise ConfigError(f"compute.grad_params[{topo.stage}] is {recorded}, the "
                                  f"stage of this model shape has {weights.numel} parameters")
        module = ReplayStage(cfg.compute.stages[topo.stage], first=topo.is_first,
                             last=topo.is_last, n_embd=cfg.model.n_embd,
                             weights=weights).to(device)
        attach_boundary(cfg, topo, module, device, None)  # the identity: byte-level coding
        return module
    init = cfg.train.init_from
    if init == "pretrained":  # the cached starting checkpoint (built once, under a lock)
        from aqsgd.model.pretrain import starting_checkpoint

        # pre-trained with the run's tokenizer, so its embeddings learned the same ids
        tokenizer = _tokenizer(cfg) if cfg.data.name != "synthetic" else None
        init = starting_checkpoint(cfg.model, tokenizer=tokenizer)
    module = init_stage(cfg.model, topo.stage, topo.stages, seed=cfg.train.seed, pretrained=init)
    module = module.to(device)
    attach_boundary(cfg, topo, module, device, init)  # its submodule `boundary`
    return module


def _train(cfg: RunConfig, topo: Topology, device: torch.device, writer: MetricsWriter,
           train_tokens: torch.Tensor, eval_tokens: torch.Tensor,
           module: torch.nn.Module) -> None:  # fmt: skip
    timeout = timedelta(seconds=cfg.dist.timeout_s)
    dp_group, pipe_group = make_groups(topo, timeout)
    t = cfg.train
    dp = make_data_parallel(cfg.grad, module.parameters(), dp_group,
                            {"lr": t.lr, "weight_decay": t.weight_decay})  # fmt: skip
    replayed = cfg.compute.replayed
    if replayed:
        optimizer_wait(dp.optimizer, cfg.compute.stages[topo.stage].optimizer_s)
    lr_sched = torch.optim.lr_scheduler.LambdaLR(
        dp.optimizer, linear_warmup_decay(t.lr_warmup_steps, t.total_steps)
    )
    meter = StepMeter(topo.rank, trace=cfg.output.trace)
    masks = use_sample_dropout(module, t.seed) if t.dropout_masks == "per_sample" else None
    p = cfg.pipeline
    runner = PipelineRunner(
        schedule=make_schedule(p.schedule, p.stages, p.num_micro_batches), topo=topo,
        module=module, loss_fn=replay_loss if replayed else lm_loss,
        train_tokens=train_tokens, eval_tokens=eval_tokens,
        sampler=Sampler(len(train_tokens), p.micro_batch_size, p.num_micro_batches, t.seed,
                        p.replicas),
        compressors=_build_compressors(cfg, topo, len(train_tokens), device), dp=dp,
        lr_scheduler=lr_sched, pipe_group=pipe_group, dp_group=dp_group, clip=t.clip,
        meter=meter, device=device,
        p2p=P2P(meter, device, cfg.dist.timeout_s,
                time_sends=bool(cfg.forward.widths or cfg.backward.widths),
                wire_device=_wire_device(device)),
        fail_at_step=t.fail_at_step if topo.rank == t.fail_rank else None,
        after_sync=_grad_dumper(cfg, topo, module) if t.dump_grads else None,
        dropout_masks=masks, precision=t.precision, boundary=module.boundary,
    )  # fmt: skip
    calibration = calibrate(runner)  # an in-graph half's first-step init (bottleneck)
    if calibration is not None:
        writer.write(calibration)
    # a replayed run has no held-out loss: its stand-in stages model nothing
    evaluating = bool(t.eval_batches) and not replayed
    if evaluating and t.eval_at_start:
        writer.write(runner.evaluate(0, t.eval_batches, p.micro_batch_size))
    for step in range(t.total_steps):
        writer.write(runner.train_step(step))
        last = step == t.total_steps - 1
        if evaluating and ((t.eval_every and (step + 1) % t.eval_every == 0) or last):
            writer.write(runner.evaluate(step + 1, t.eval_batches, p.micro_batch_size))
    if cfg.output.trace:
        writer.write_trace(meter.events, topo.rank, topo.stage, topo.replica)


def _grad_dumper(cfg: RunConfig, topo: Topology, module: torch.nn.Module):
    """Test hook: after step 0's gradient exchange (before clipping), save every
    gradient by global parameter name to OUTPUT_DIR/grads/rank{R}.pt, and the parameters
    at steps 0 and 1 (before and after the first update) to rank{R}.params{S}.pt."""
    path = Path(cfg.output.dir) / "grads" / f"rank{topo.rank}.pt"

    def dump(step: int) -> None:
        if step == 0:
            path.parent.mkdir(parents=True, exist_ok=True)
            torch.save({n: p.grad.detach().clone() for n, p in module.named_parameters()}, path)
        if step in (0, 1):
            torch.save({n: p.detach().clone() for n, p in module.named_parameters()},
                       path.with_suffix(f".params{step}.pt"))

    return dump


def run_worker(cfg: RunConfig, rank: int, world_size: int, master_addr: str,
               master_port: int) -> None:  # fmt: skip
    """Train on this rank; raises on any failure (main() turns that into exit 1)."""
    if world_size != cfg.pipeline.world_size:
        raise ConfigError(
            f"world size {world_size} != pipeline.stages x pipeline.replicas = "
            f"{cfg.pipeline.stages} x {cfg.pipeline.replicas}"
        )
    topo = Topology(cfg.pipeline.stages, cfg.pipeline.replicas, rank)
    torch.set_num_threads(cfg.train.threads)
    torch.manual_seed(cfg.train.seed * 1000 + rank)  # dropout masks: per rank, reproducible
    device = _device(cfg, rank)
    backend = cfg.dist.backend
    if backend == "auto":
        backend = "nccl" if device.type == "cuda" else "gloo"
    # Data and weights first: a rank that builds a cached tokenizer or checkpoint must
    # not make its peers' collective waits time out.
    train_tokens, eval_tokens = load_tokens(cfg)
    module = _load_stage(cfg, topo, device)
    tensorboard = cfg.output.tensorboard and topo.is_last and topo.replica == 0
    writer = MetricsWriter(cfg.output.dir, rank,
                           mirror=TensorBoardWriter(cfg.output.dir) if tensorboard else None)
    if rank == 0:
        Path(cfg.output.dir, "run_config.json").write_text(json.dumps(cfg.to_dict(), indent=1))
    dist.init_process_group(backend, init_method=f"tcp://{master_addr}:{master_port}",
                            rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=cfg.dist.timeout_s))  # fmt: skip
    try:
        _train(cfg, topo, device, writer, train_tokens, eval_tokens, module)
        dist.barrier()  # nobody tears down while a peer still receives
    finally:
        writer.close()
    dist.destroy_process_group()


# ------------------------------------------------------------------- launching


def run_local(config_path: str | Path, world_size: int) -> int:
    """Run a whole job on this machine under torchrun (standalone rendezvous on
    loopback); returns torchrun's exit status: 0 when every rank succeeded, non-zero
    when one failed (torchrun then stops the others). A config that does not load
    raises ConfigError before any rank starts."""
    cfg = load_config(config_path)
    # -P and PYTHONSAFEPATH (inherited by the ranks torchrun starts): no Python process
    # reads the current folder, whose json.py would shadow the standard library (the
    # suite's Note [safe path], bench.launch.process, which aqsgd does not import)
    argv = [sys.executable, "-P", "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={world_size}", "-m", "aqsgd.train.worker",
            "--config", str(config_path)]  # fmt: skip
    # torchrun sets OMP_NUM_THREADS=1 (with a banner) when unset; each rank sets its own
    # thread count from the config anyway, so give it that.
    env = {"OMP_NUM_THREADS": str(cfg.train.threads), **os.environ, "PYTHONSAFEPATH": "1"}
    return subprocess.run(argv, env=env, check=False).returncode


def local_summary(config_path: str | Path) -> str:
    """A few lines on a finished job, read back from the last stage's metrics file."""
    cfg = load_config(config_path)
    out = Path(cfg.output.dir)
    last = out / "metrics" / f"rank{cfg.pipeline.stages - 1}.jsonl"
    records = [json.loads(line) for line in last.read_text(encoding="utf-8").splitlines()]
    train = [r for r in records if r.get("kind") == "train"]
    evals = [r for r in records if r.get("kind") == "eval"]
    if not train:
        return f"no training steps recorded in {last}"
    step_ms = statistics.median(r["step_time_s"] for r in train) * 1e3
    lines = [f"{len(train)} steps: train loss {train[0]['loss']:.4f} -> {train[-1]['loss']:.4f}, "
             f"median step {step_ms:.1f} ms, activation bytes received in the last step "
             f"{train[-1]['bytes_recv']['activation']}"]
    if evals:
        lines.append(f"eval loss {evals[-1]['eval_loss']:.4f} "
                     f"(perplexity {evals[-1]['perplexity']:.2f}) at step {evals[-1]['step']}")
    lines.append(f"metrics: {out / 'metrics'}")
    return "\n".join(lines)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="aqsgd-worker", description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True, help="run config, .yaml or .json")
    p.add_argument("--local", type=int, metavar="N",
                   help="run N ranks on this machine under torchrun (standalone)")
    p.add_argument("--rank", type=int, default=None, help="default: $RANK")
    p.add_argument("--world-size", type=int, default=None, help="default: $WORLD_SIZE")
    p.add_argument("--master-addr", default=None, help="default: $MASTER_ADDR")
    p.add_argument("--master-port", type=int, default=None, help="default: $MASTER_PORT")
    args = p.parse_args(argv)
    if args.local is None:
        env = {"rank": "RANK", "world_size": "WORLD_SIZE", "master_addr": "MASTER_ADDR",
               "master_port": "MASTER_PORT"}  # fmt: skip
        for attr, var in env.items():
            if getattr(args, attr) is None:
                if var not in os.environ:
                    p.error(f"--{attr.replace('_', '-')} not given and ${var} not set")
                value = os.environ[var]
                setattr(args, attr, value if attr == "master_addr" else int(value))
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.local is not None:
        try:
            status = run_local(args.config, args.local)
            if status == 0:
                print(local_summary(args.config))
            return status
        except ConfigError as e:
            print(f"aqsgd.train.worker: {e}", file=sys.stderr)
            return 2
    where = f"rank {args.rank}"
    try:
        cfg = load_config(args.config)
        topo = Topology(cfg.pipeline.stages, cfg.pipeline.replicas, args.rank)
        where = f"rank {args.rank} (stage {topo.stage}, replica {topo.replica})"
        # a rank log's first line is the suite's own: which rank, which config
        print(f"aqsgd.train.worker: {where} of {args.world_size} starting: {args.config}",
              file=sys.stderr, flush=True)
        run_worker(cfg, args.rank, args.world_size, args.master_addr, args.master_port)
    except BaseException as e:  # noqa: BLE001 - every failure must end the process
        if isinstance(e, SystemExit) and not e.code:
            raise
        # the traceback, then the one line last, where a cell's log tail ends: the
        # exception's notes name a compressor's mode and its plug-in (aqsgd.compress)
        traceback.print_exc(file=sys.stderr)
        notes = "".join(f" [{note}]" for note in getattr(e, "__notes__", ()))
        print(f"aqsgd.train.worker: {where} failed: {type(e).__name__}: {e}{notes}",
              file=sys.stderr)
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(1)  # Note [failure handling]
    return 0


def cli() -> None:
    sys.exit(main())


if __name__ == "__main__":
    cli()
