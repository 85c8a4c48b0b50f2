"""bench.micro.coding --smoke: the benchmark runs, its rows are sane, its copy limit moves
the bytes each op must read and write, and its two paths are the two CPU backends."""

from __future__ import annotations

import json

import pytest
import torch

from aqsgd import quant
from aqsgd.quant import fused
from bench.micro import coding


@pytest.mark.timeout(120)
def test_smoke_table_has_positive_numbers(tmp_path, capsys):
    out = tmp_path / "coding.json"
    threads = torch.get_num_threads()
    rows = coding.main(["--smoke", "--json", str(out)])
    assert torch.get_num_threads() == threads, "main() must restore the thread count"
    table = capsys.readouterr().out
    paths = {"torch", "copy"} | ({"fused"} if fused.available() else set())
    for mode in coding.MODES:
        for op in ("encode", "decode"):
            got = {r.path for r in rows if r.mode == mode and r.op == op}
            assert got == (paths - {"fused"} if mode == "fp32" else paths), (mode, op, got)
        assert mode in table
    for r in rows:
        assert r.bytes_read > 0 and r.bytes_written > 0
        assert 0 < r.ns_p10 <= r.ns_median <= r.ns_p90
    saved = json.loads(out.read_text())
    assert len(saved["rows"]) == len(rows) and saved["meta"]["torch"] == torch.__version__
    assert saved["meta"]["fused"] == fused.status()


def test_bytes_each_op_must_move():
    """AQ-SGD 2-bit on (2, 16, 64) with an fp16 cache: encode reads x (fp32) and m and
    writes m, the stream and the fp16 scales; decode reads the stream, scales and m and
    writes m. DirectQ reads x or writes the values instead of the cache."""
    shape, n = (2, 16, 64), 2 * 16 * 64
    coded = quant.packed_nbytes(n, 2) + 2 * 64  # per-channel scales: 64 of them
    aq = coding.op_cases(shape, "aqsgd", 2, "nearest", torch.float16, ("torch",))
    assert [(c.op, c.bytes_read, c.bytes_written) for c in aq] == [
        ("encode", 4 * n + 2 * n, 2 * n + coded), ("decode", coded + 2 * n, 2 * n)]
    dq = coding.op_cases(shape, "directq", 2, "nearest", torch.float32, ("torch",))
    assert [(c.op, c.bytes_read, c.bytes_written) for c in dq] == [
        ("encode", 4 * n, coded), ("decode", coded, 4 * n)]


def test_paths_are_the_two_cpu_backends(monkeypatch):
    """"torch" is backend="torch" (aqsgd.quant.cpu), "fused" backend="auto"."""
    seen = []
    real = quant.aqsgd_encode

    def spy(x, m, cfg, generator=None, backend="auto"):
        seen.append(backend)
        return real(x, m, cfg, generator, backend)

    monkeypatch.setattr(quant, "aqsgd_encode", spy)
    enc, _ = coding.op_cases((2, 16, 64), "aqsgd", 4, "stochastic", torch.float32,
                             ("torch", "fused"))
    for path in ("torch", "fused", "torch"):
        enc.calls[path]()
    assert seen == ["torch", "auto", "torch"]
