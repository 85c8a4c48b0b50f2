"""bench.micro.kernels --smoke: the benchmark runs, its table is sane, and its naive
baseline is aqsgd.quant.reference: a real quantizer, whose bytes are aqsgd.quant's."""

from __future__ import annotations

import json

import pytest
import torch

from aqsgd import quant
from aqsgd.quant import bitpack, reference
from bench.micro import kernels


@pytest.mark.timeout(60)
def test_smoke_table_has_positive_numbers(tmp_path, capsys):
    out = tmp_path / "kernels.json"
    threads = torch.get_num_threads()
    rows = kernels.main(["--smoke", "--json", str(out)])
    assert torch.get_num_threads() == threads, "main() must restore the thread count"
    table = capsys.readouterr().out
    assert {(r.op, r.path) for r in rows} >= {(op, p) for op in kernels.OPS
                                              for p in ("naive", "torch")}
    for r in rows:
        assert r.bytes_moved > 0 and r.ms_median > 0
        assert 0 < r.gbps_p20 <= r.gbps_median * 1.0001 <= r.gbps_p80 * 1.0002
        assert (r.speedup_vs_naive is None) == (r.path == "naive")
        assert r.path != "naive" or r.speedup_vs_naive is None
        assert r.op in table
    saved = json.loads(out.read_text())
    assert len(saved["rows"]) == len(rows) and saved["meta"]["torch"] == torch.__version__


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
def test_naive_baseline_is_the_reference_quantizer(bits):
    x = torch.randn(2, 16, 64, generator=torch.Generator().manual_seed(bits))
    cfg = quant.QuantConfig(bits=bits)
    quantize, _ = kernels._op_calls("quantize+pack", "naive", x, cfg)  # what the bench times
    packed, scales = quantize()
    want_packed, want_scales = quant.quantize_packed(x, cfg)
    naive_codes = reference.unpack(packed, bits, x.numel())
    codes = bitpack.unpack(want_packed, bits, x.numel())
    # the baseline is a quantizer of the same kind: codes within one level, mostly equal ...
    assert (naive_codes.int() - codes.int()).abs().max() <= 1
    assert (naive_codes != codes).float().mean() < 0.2
    # ... and, being the contract's reference, the very same bytes
    assert torch.equal(packed, want_packed) and torch.equal(scales, want_scales)
    dequantize, _ = kernels._op_calls("unpack+dequantize", "naive", x, cfg)
    y = dequantize()
    step = scales.float() / 2 ** (bits - 1)
    # the reference grid clips values above its top level (Q - 1) * step: about one step
    assert ((y - x).abs() <= 1.1 * step).all()
