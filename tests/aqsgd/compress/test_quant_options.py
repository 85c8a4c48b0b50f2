"""The quantizer's options (granularity, group size, rounding, grid, scale statistic) are a
sweep's to set: a workload's `overrides` reach the cell's CompressionConfig.quant, the
config file keeps them flat (`forward.granularity`), and a compressor pair codes with them
(docs/compressors.md, "The quantizer's options")."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from aqsgd.compress.activation import make_compressor
from aqsgd.compress.message import CompressionConfig
from aqsgd.quant import QuantConfig
from aqsgd.train.config import ConfigError, config_from_dict
from bench.harness.cells import run_config
from bench.harness.modes import parse_mode
from bench.harness.sweep import CellSpec, Workload

OPTIONS = {"granularity": "group", "group_size": 64, "rounding": "stochastic",
           "grid": "symmetric", "scale_method": "l2"}


def test_a_sweeps_overrides_reach_the_quantizer_and_the_file_keeps_them_flat():
    overrides = {f"forward.{k}": v for k, v in OPTIONS.items()}
    config = run_config(CellSpec("s", parse_mode("directq:4/8"), Workload(overrides=overrides)),
                        Path("/out"))
    assert config.forward.quant == QuantConfig(bits=4, **OPTIONS)
    assert config.backward.quant == QuantConfig(bits=8)
    tree = config.to_dict()
    assert {k: tree["forward"][k] for k in OPTIONS} == OPTIONS
    assert config_from_dict(yaml.safe_load(yaml.safe_dump(tree))) == config


@pytest.mark.parametrize("mode", ["directq", "aqsgd"])
def test_every_option_codes_a_message(mode):
    cfg = CompressionConfig(mode=mode, quant=QuantConfig(bits=3, **OPTIONS), warmup_epochs=0,
                            first_visit="zero")
    send, recv = (make_compressor(cfg, role, (8, 32), 4, seed=0) for role in ("send", "recv"))
    for c in (send, recv):
        c.set_epoch(1)
    x, ids = torch.randn(2, 8, 32), torch.tensor([0, 1])
    y = recv.decode(send.encode(x, ids), ids)
    assert float((y - x).norm() / x.norm()) < 0.5


@pytest.mark.parametrize(("direction", "message"), [
    ({"bits": 9}, r"forward: bits must be in 1\.\.8, got 9"),
    ({"bits": 4.0}, r"forward: bits must be an integer, got 4\.0"),
    ({"granularity": "row"}, r"forward: granularity must be one of .*got 'row'"),
])
def test_a_files_bad_quantizer_key_is_named_as_the_file_writes_it(direction, message):
    with pytest.raises(ConfigError, match=message):
        config_from_dict({"forward": {"mode": "directq", **direction}})
