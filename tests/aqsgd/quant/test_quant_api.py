"""aqsgd.quant's arguments (a bad config or call names the field and the value) and its
import and dispatch without Triton; the codes against the reference are test_quant.py's."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from quant_helpers import SMALL, sample, seed_of

from aqsgd import quant
from aqsgd.quant import QuantConfig, cpu, reference

# ---------------------------------------------------------------------------
# Arguments
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("fields,error,words", [
    (dict(bits=0), ValueError, ["bits", "0"]),
    (dict(bits=9), ValueError, ["bits", "9"]),
    (dict(bits=4.0), TypeError, ["bits", "4.0"]),
    (dict(bits=True), TypeError, ["bits", "True"]),
    (dict(granularity="row"), ValueError, ["granularity", "'row'"]),
    (dict(scale_method="rms"), ValueError, ["scale_method", "'rms'"]),
    (dict(rounding="up"), ValueError, ["rounding", "'up'"]),
    (dict(grid="asymmetric"), ValueError, ["grid", "'asymmetric'"]),
    (dict(group_size=0), ValueError, ["group_size", "0"]),
], ids=str)
def test_bad_config_names_field_and_value(fields, error, words):
    with pytest.raises(error) as info:
        QuantConfig(**fields)
    for word in words:
        assert word in str(info.value)


def test_bad_call_arguments_name_argument_and_value():
    x = sample(SMALL)
    cfg = QuantConfig()

    def raises(error, words, fn, *args, **kw):
        with pytest.raises(error) as info:
            fn(*args, **kw)
        for word in words:
            assert word in str(info.value), (word, str(info.value))

    raises(ValueError, ["group_size=7", "5550"], quant.quantize_packed, x,
           QuantConfig(granularity="group", group_size=7))
    raises(TypeError, ["x", "torch.int32"], quant.quantize_packed, x.int(), cfg)
    raises(TypeError, ["x", "torch.int64"], quant.aqsgd_encode, x.long(), x.clone(), cfg)
    raises(ValueError, ["m", "(3, 37, 49)"], quant.aqsgd_encode, x, torch.zeros(3, 37, 49), cfg)
    raises(ValueError, ["m", "meta"], quant.aqsgd_encode, x, torch.zeros(SMALL, device="meta"),
           cfg)
    raises(TypeError, ["m", "torch.int16"], quant.aqsgd_encode, x, x.short(), cfg)
    raises(ValueError, ["generator", "None"], quant.quantize_packed, x,
           QuantConfig(rounding="stochastic"))
    raises(ValueError, ["backend", "'cuda'"], quant.quantize_packed, x, cfg, backend="cuda")
    raises(ValueError, ["channel", "(5,)"], quant.quantize_packed, torch.ones(5), cfg)
    raises(TypeError, ["cfg", "dict"], quant.quantize_packed, x, {"bits": 4})
    packed, scales = quant.quantize_packed(x, cfg)
    raises(ValueError, ["packed", str(packed.numel())], quant.dequantize_packed, packed[:-1],
           scales, SMALL, cfg)
    raises(ValueError, ["scales", "(50,)", "(49,)"], quant.dequantize_packed, packed,
           scales[:-1], SMALL, cfg)
    raises(ValueError, ["m", "(3, 37, 49)"], quant.aqsgd_decode, packed, scales,
           torch.zeros(3, 37, 49), cfg)


# ---------------------------------------------------------------------------
# Import and dispatch without Triton
# ---------------------------------------------------------------------------


def test_import_and_run_without_triton():
    """`import aqsgd` and the torch path must work where Triton cannot be imported; on CPU
    `auto` never touches the Triton path; forcing Triton then fails with ImportError."""
    code = textwrap.dedent("""
        import sys
        sys.modules["triton"] = None  # any `import triton` now raises ImportError
        import torch, aqsgd
        from aqsgd import quant
        x = torch.randn(4, 8, 16)
        for backend in ("auto", "torch"):
            p, s = aqsgd.quantize_packed(x, aqsgd.QuantConfig(bits=3), backend=backend)
        assert "aqsgd.quant.triton_launch" not in sys.modules
        assert "aqsgd.quant.triton_kernels" not in sys.modules
        try:
            quant.quantize_packed(x, quant.QuantConfig(), backend="triton")
        except ImportError:
            print("OK")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "OK"


def test_dispatch_passes_one_seed_to_the_triton_side(monkeypatch):
    """Dispatch logic only (a stand-in records the calls; the real kernels are tested in
    tests/aqsgd/quant/test_triton_kernels.py): backend="triton" goes to
    aqsgd.quant.triton_launch with the seed drawn once from the generator, "auto" on CPU and
    "torch" never do."""
    calls = []
    fake = type(sys)("aqsgd.quant.triton_launch")
    fake.quantize_packed = lambda x, cfg, seed: calls.append(("q", seed)) or ("p", "s")
    fake.aqsgd_encode = lambda x, m, cfg, seed: calls.append(("e", seed)) or ("p", "s")
    fake.dequantize_packed = lambda p, s, shape, cfg, dtype: calls.append(("d", dtype)) or "v"
    fake.aqsgd_decode = lambda p, s, m, cfg: calls.append(("D", None)) or m
    monkeypatch.setitem(sys.modules, "aqsgd.quant.triton_launch", fake)
    monkeypatch.setattr(quant, "triton_launch", fake, raising=False)
    x, cfg = sample(SMALL), QuantConfig(rounding="stochastic")
    want = seed_of(9)
    assert quant.quantize_packed(x, cfg, torch.Generator().manual_seed(9), "triton") == ("p", "s")
    quant.aqsgd_encode(x, torch.zeros(SMALL), cfg, torch.Generator().manual_seed(9), "triton")
    quant.quantize_packed(x, QuantConfig(), backend="triton")
    packed, scales = quant.quantize_packed(x, cfg, torch.Generator().manual_seed(9), "auto")
    quant.quantize_packed(x, cfg, torch.Generator().manual_seed(9), "torch")
    quant.dequantize_packed(packed, scales, SMALL, cfg, torch.float16, backend="triton")
    quant.aqsgd_decode(packed, scales, torch.zeros(SMALL), cfg, backend="triton")
    assert calls == [("q", want), ("e", want), ("q", 0), ("d", torch.float16), ("D", None)]


def test_one_table_resolves_every_backend_and_reference_is_one():
    """aqsgd.quant.backends.TABLE resolves both quantizers; backend="reference" runs the
    contract itself, with the bytes every other backend gives."""
    x, cfg = sample(SMALL), QuantConfig(bits=3, rounding="stochastic")
    cpu_dev = torch.device("cpu")
    assert quant.backend_for(cfg, "reference", cpu_dev) is reference
    assert quant.backend_for(cfg, "torch", cpu_dev) is cpu
    tah = quant.backend_for(quant.TahConfig(), "torch", cpu_dev)
    assert tah.__name__ == "aqsgd.quant.tah_torch"
    got = quant.quantize_packed(x, cfg, torch.Generator().manual_seed(5), backend="reference")
    want = quant.quantize_packed(x, cfg, torch.Generator().manual_seed(5))
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_auto_means_torch_inside_the_block_only():
    from aqsgd.quant import backends

    cpu_device = torch.device("cpu")
    with backends.auto_means("torch"):
        assert backends.backend_for(QuantConfig(bits=2), "auto", cpu_device) is cpu
    assert backends.backend_for(QuantConfig(bits=2), "torch", cpu_device) is cpu
    with pytest.raises(ValueError, match="backend must be one of"):
        with backends.auto_means("auto"):
            pass


def test_filling_the_registry_builds_no_kernels(tmp_path):
    # the registry checks every mode on one message: on the torch path, so that the fused
    # kernels are built by the harness before the first cell, with their time printed
    code = ("from aqsgd.compress.registry import COMPARISONS; assert len(COMPARISONS) > 5")
    env = {**os.environ, "AQSGD_CACHE_DIR": str(tmp_path)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)
    assert not (tmp_path / "quant-fused").exists()
