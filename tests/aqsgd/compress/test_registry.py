"""The compressor registries (aqsgd.compress.registry): every registered activation mode
round-trips and sends exactly the bytes its rule says, every gradient codec's byte rule
is what its exchange counts, and every list of modes in the harness, the reports, the
performance model and the micro-benchmarks is the registry's.
"""

import math
import types
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from aqsgd.compress import gradient, message
from aqsgd.compress.activation import make_compressor
from aqsgd.compress.codecs.base import DataParallel
from aqsgd.compress.gradient import GradCompressionConfig, exchange_nbytes, make_data_parallel
from aqsgd.compress.message import CompressionConfig, message_spec, steady_raw_rows
from aqsgd.compress.modes.base import FMT_RAW, ActivationMode, Comparison
from aqsgd.compress.modes.directq import DirectQ
from aqsgd.compress.registry import (
    ACTIVATION_MODES,
    COMPARISONS,
    GRAD_CODECS,
    RegistryError,
    build_registries,
)
from aqsgd.compress.wire import (
    message_nbytes,
    resolve_spec,
    shape_prefix,
    sized_by_data,
    spec_nbytes,
)
from aqsgd.quant import QuantConfig
from bench.harness import modes as harness_modes
from bench.harness.cells import run_config
from bench.harness.modes import parse_mode
from bench.harness.sweep import CellSpec, Workload
from bench.launch.process import free_port
from bench.micro import compressors as micro
from bench.perfmodel import profile as perf_profile
from bench.report.summary import MODE_RANK

SHAPE = (5, 12)  # one sample (L, D): irregular, and 60 elements divide into groups of 12
PROFILES = Path(__file__).resolve().parents[3] / "profiles"


# --- activation modes ---------------------------------------------------------------------------
def _resolved(spec, msg):
    """A spec sized by data with the sizes its length prefix carries (fixed dims checked)."""
    return resolve_spec(spec, shape_prefix(msg)) if sized_by_data(spec) else spec


def _message(send, recv, x, ids):
    """One message as the pipeline sends it; returns (decoded, message, n_raw)."""
    spec = recv.wire_spec(tuple(x.shape), ids)
    msg = send.encode(x, ids)
    spec = _resolved(spec, msg)
    assert [(tuple(t.shape), t.dtype) for t in msg] == [(tuple(s), d) for s, d in spec]
    return recv.decode(msg, ids), msg, int(msg[0][2])


@pytest.mark.parametrize("granularity", ["channel", "token", "group"])
@pytest.mark.parametrize("name", list(ACTIVATION_MODES))
def test_every_activation_mode_round_trips_and_sends_what_its_byte_rule_says(name, granularity):
    cfg = CompressionConfig(mode=name,
                            quant=QuantConfig(bits=8, granularity=granularity, group_size=12),
                            warmup_epochs=1)
    send = make_compressor(cfg, "send", SHAPE, 8, seed=0)
    recv = make_compressor(cfg, "recv", SHAPE, 8, seed=1)
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(8, *SHAPE, generator=gen)
    # warm-up visit of samples 0..3; then 2..5 (two of them first visits); then 0..3 again
    for epoch, ids in ((0, [0, 1, 2, 3]), (1, [2, 3, 4, 5]), (1, [0, 1, 2, 3])):
        send.set_epoch(epoch)
        recv.set_epoch(epoch)
        ids = torch.tensor(ids)
        x = base[ids] + 0.05 * torch.randn(len(ids), *SHAPE, generator=gen)
        y, msg, n_raw = _message(send, recv, x, ids)
        assert message_nbytes(msg) == spec_nbytes(_resolved(message_spec(cfg, x.shape, n_raw),
                                                            msg))
        assert y.shape == x.shape and y.dtype == torch.float32
        if n_raw == len(ids):
            assert torch.equal(y, x)  # raw rows in fp32 arrive as they were
        else:  # 8 bits: within a few hundredths of the largest value coded
            assert float((y - x).abs().max()) <= 0.02 * float(x.abs().max())
    # the last message is the steady state: every sample visited, warm-up over
    assert n_raw == steady_raw_rows(cfg, len(ids))
    send.close()
    recv.close()


@pytest.mark.parametrize("name", list(ACTIVATION_MODES))
def test_only_modes_that_code_gradients_build_a_gradient_compressor(name):
    cfg = CompressionConfig(mode=name, quant=QuantConfig(bits=4))
    if ACTIVATION_MODES[name].codes_gradients:
        make_compressor(cfg, "send", SHAPE, 4, kind="gradient").close()
    else:
        with pytest.raises(ValueError, match="gradient compressors support modes"):
            make_compressor(cfg, "send", SHAPE, 4, kind="gradient")


def test_only_a_mode_that_codes_rows_has_a_wire_format_and_a_quantized_cache_is_a_cache():
    for mode in ACTIVATION_MODES.values():
        assert (mode.wire_format is None) == (not mode.codes_rows)
        assert mode.uses_cache or not mode.quantized_cache


# --- comparisons --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(COMPARISONS))
def test_every_comparison_builds_the_run_config_it_declares(name):
    c = COMPARISONS[name]
    mode = parse_mode(name)
    assert mode.takes_bits == c.takes_bits and mode.compresses_dp == c.data_parallel
    if c.takes_bits:
        assert (mode.fw_bits, mode.bw_bits) == c.default_bits
    config = run_config(CellSpec("s", mode, Workload(replicas=2 if c.data_parallel else 1)),
                        Path("/out"))
    assert (config.forward.mode, config.backward.mode) == (c.forward, c.backward)
    assert config.forward.dtype == config.backward.dtype == c.dtype
    assert (config.grad.mode != "fp32") == c.data_parallel


def test_every_list_of_modes_is_the_registrys():
    assert message.MODES == tuple(ACTIVATION_MODES)
    assert message.GRADIENT_MODES == tuple(n for n, m in ACTIVATION_MODES.items()
                                              if m.codes_gradients)
    assert gradient.GRAD_MODES == tuple(GRAD_CODECS)
    assert harness_modes.MODE_NAMES == tuple(COMPARISONS)
    assert harness_modes.GRAD_COMPRESSORS == tuple(n for n, c in GRAD_CODECS.items()
                                                   if c.compresses)
    assert harness_modes.DEFAULT_BITS == {n: c.default_bits for n, c in COMPARISONS.items()
                                          if c.default_bits is not None}
    assert MODE_RANK == {n: c.rank for n, c in COMPARISONS.items()}
    assert perf_profile.ACTIVATION_MODES == tuple(ACTIVATION_MODES)
    assert perf_profile.GRAD_MODES == tuple(GRAD_CODECS)
    assert micro.FULL_CASES == [(n, d, b) for n, m in ACTIVATION_MODES.items()
                                for d, b in m.bench_cases]
    assert [case[0] for case in micro.SMOKE_CASES] == list(ACTIVATION_MODES)


def test_registries_are_ordered_by_rank_and_read_only():
    for table in (ACTIVATION_MODES, COMPARISONS, GRAD_CODECS):
        ranks = [entry.rank for entry in table.values()]
        assert ranks == sorted(ranks)
        with pytest.raises(TypeError):
            table["new"] = None


@pytest.mark.parametrize("path", sorted(PROFILES.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_profile_costs_every_registered_mode(path):
    compress = perf_profile.load_profile(path).compress
    assert set(compress.encode_s_per_element) == set(ACTIVATION_MODES)
    assert set(compress.decode_s_per_element) == set(ACTIVATION_MODES)
    assert set(compress.grad_s_per_element) == set(GRAD_CODECS)


# --- gradient codecs ----------------------------------------------------------------------------
SIZES = [(37,), (13, 11)]  # 180 parameters: no multiple of 2 x 8 or of the default bucket


def _codec_config(name: str) -> GradCompressionConfig:
    # freeze after one step: step 0 exchanges exactly, the next ones compressed
    return GradCompressionConfig(mode=name, bits=4, bucket_size=8, topk_ratio=0.1,
                                 freeze_after_steps=1, seed=3)


def _bytes_per_step(rank: int, out_dir: str, port: int) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2, timeout=timedelta(seconds=60))  # fmt: skip
    try:
        sent = {}
        for name in GRAD_CODECS:
            params = [torch.nn.Parameter(torch.zeros(s)) for s in SIZES]
            dp = make_data_parallel(_codec_config(name), params, None, {"lr": 0.01})
            steps = []
            for step in range(3):
                g = torch.Generator().manual_seed(100 * rank + step)
                for p in params:
                    p.grad = torch.randn(p.shape, generator=g)
                before = dp.bytes_sent
                dp.synchronize()
                dp.optimizer.step()
                steps.append(dp.bytes_sent - before)
            sent[name] = steps
        torch.save(sent, f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_every_gradient_codec_sends_what_its_byte_rule_says(tmp_path):
    # The first optimizer built in a process imports torch._dynamo (seconds); do it once
    # here so the forked ranks inherit it.
    torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))])
    mp.start_processes(_bytes_per_step, args=(str(tmp_path), free_port()), nprocs=2,
                       join=True, start_method="fork")
    numel = sum(math.prod(s) for s in SIZES)
    for rank in range(2):
        sent = torch.load(tmp_path / f"rank{rank}.pt")
        for name in GRAD_CODECS:
            cfg = _codec_config(name)
            want = [exchange_nbytes(cfg, numel, 2, frozen=step > 0) for step in range(3)]
            assert sent[name] == want, name


@pytest.mark.parametrize("name", list(GRAD_CODECS))
def test_every_gradient_codec_is_a_plain_optimizer_on_one_replica(name):
    params = [torch.nn.Parameter(torch.zeros(s)) for s in SIZES]
    dp = make_data_parallel(_codec_config(name), params, None, {"lr": 0.1})
    assert isinstance(dp, GRAD_CODECS[name]) and dp.exchanges_in_step == (
        GRAD_CODECS[name].exchanges_in_step)
    for p in params:
        p.grad = torch.ones_like(p)
    dp.synchronize()
    dp.optimizer.step()
    assert dp.world_size == 1 and dp.bytes_sent == 0 and dp.bytes_recv == 0
    assert float(params[0].detach().abs().sum()) > 0


@pytest.mark.parametrize("name", list(GRAD_CODECS))
def test_every_compressing_codec_has_the_coding_work_the_profile_times(name):
    codec = GRAD_CODECS[name]
    x = torch.randn(1024, generator=torch.Generator().manual_seed(0))
    if codec.compresses:
        codec.round_trip(GradCompressionConfig(mode=name), x, torch.Generator())
    else:
        with pytest.raises(NotImplementedError, match="codes nothing"):
            codec.round_trip(GradCompressionConfig(mode=name), x, torch.Generator())


# --- what the registry refuses ------------------------------------------------------------------
def _module(name: str, **attrs) -> types.ModuleType:
    module = types.ModuleType(name)
    for key, value in attrs.items():
        setattr(module, key, value)
    return module


class _Fresh(DirectQ):
    name = "fresh"
    rank = 9
    wire_format = 99


def _registries(*mode_modules, codec_modules=()):
    real = [_module(f"real.{n}", MODE=m) for n, m in ACTIVATION_MODES.items()]
    return build_registries(real + list(mode_modules), codec_modules)


def test_a_new_mode_module_is_registered_with_its_comparison():
    act, comp, _ = _registries(_module("new.fresh", MODE=_Fresh, COMPARISONS=(
        Comparison("fresh", rank=1.5, forward="fresh", backward="directq",
                   default_bits=(3, 6)),)))
    assert list(act)[-1] == "fresh" and act["fresh"] is _Fresh
    assert list(comp) == ["fresh"]


@pytest.mark.parametrize(
    "modules, match",
    [
        ([_module("a", MODE=DirectQ)], r"activation mode 'directq' is declared by both "
                                       r"real.directq and a"),
        ([_module("a", MODE=object)], r"a.MODE must be an ActivationMode subclass"),
        ([_module("a", MODE=type("NoRank", (ActivationMode,), {"name": "x"}))],
         r"a: activation mode NoRank sets no rank"),
        ([_module("a", MODE=type("Raw", (_Fresh,), {"name": "raw", "wire_format": FMT_RAW}))],
         r"needs a wire_format other than 0 \(raw\)"),
        ([_module("a", COMPARISONS=(Comparison("c", 0, "nosuchmode", "directq"),))],
         r"a: comparison 'c' has forward mode 'nosuchmode', which is not registered"),
        ([_module("a", COMPARISONS=(Comparison("c", 0, "directq", "aqsgd"),))],
         r"backward mode 'aqsgd', which does not code activation gradients"),
        ([_module("a", COMPARISONS=("fp32",))], r"a.COMPARISONS must hold Comparison entries"),
    ],
)
def test_the_registry_refuses_conflicting_or_incomplete_modes(modules, match):
    with pytest.raises(RegistryError, match=match):
        _registries(*modules)


def test_the_registry_refuses_conflicting_or_incomplete_codecs():
    fp32 = GRAD_CODECS["fp32"]
    with pytest.raises(RegistryError, match="gradient codec 'fp32' is declared by both a and b"):
        _registries(codec_modules=[_module("a", CODEC=fp32), _module("b", CODEC=fp32)])
    with pytest.raises(RegistryError, match="b.CODEC must be a DataParallel subclass"):
        _registries(codec_modules=[_module("b", CODEC="fp32")])
    with pytest.raises(RegistryError, match="gradient codec Nameless sets no name"):
        _registries(codec_modules=[_module("c", CODEC=type("Nameless", (DataParallel,),
                                                           {"rank": 5}))])
