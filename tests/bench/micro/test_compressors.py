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
