"""The compressor benchmark runs at its smoke size and reports every case."""

import json

from bench.micro import compressors


def test_smoke_run_reports_every_case(tmp_path, capsys):
    out = tmp_path / "compressors.json"
    result = compressors.main(["--smoke", "--out", str(out)])
    assert json.loads(out.read_text()) == result
    modes = [r["mode"] for r in result["compressors"]]
    assert modes == [m for m, _, _ in compressors.SMOKE_CASES]
    for row in result["compressors"]:
        assert row["wire_bytes"] > 0 and row["encode_decode_ms"] > 0
    none_fp32 = result["compressors"][0]
    assert none_fp32["wire_bytes"] == none_fp32["wire_bytes_fp32"] + 8 * (3 + 2)
    per_elem = {r["cache_dtype"]: r["bytes_per_element"] for r in result["cache"]}
    assert per_elem["fp16"] == 2.0 and per_elem["fp32"] == 4.0 and per_elem["quant4"] < 1.0
    assert "encode+decode" in capsys.readouterr().out


def test_a_data_sized_modes_bytes_count_its_length_prefix(monkeypatch):
    """aqsgd-sparse goes length-first (aqsgd.train.p2p): its wire bytes are the message's
    plus an int64 for every dim of every tensor; a fixed-size mode's are the message's."""
    real, seen = compressors.message_nbytes, []

    def spy(tensors):
        tensors = list(tensors)
        seen.append(tensors)
        return real(tensors)

    monkeypatch.setattr(compressors, "message_nbytes", spy)
    for mode, dtype, bits in compressors.SMOKE_CASES:
        if mode not in ("aqsgd-sparse", "aqsgd"):
            continue
        seen.clear()
        row = compressors.bench_compressor(mode, dtype, bits, (2, 8, 16), repeats=2)
        msg = seen[0]  # the last message encoded; a prefix is counted after it
        prefix = 8 * sum(t.dim() for t in msg) if mode == "aqsgd-sparse" else 0
        assert len(seen) == (2 if prefix else 1), mode
        assert row["wire_bytes"] == real(msg) + prefix > prefix, mode
