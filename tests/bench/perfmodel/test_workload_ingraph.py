"""The performance model costs a mode with an in-graph half at what its workers send:
k coordinates a token in bf16 both ways, and ssn's 2-byte token id forward
(tests/aqsgd/train/test_pipeline_ingraph.py measures the same formula)."""

from pathlib import Path

import pytest

from aqsgd.compress.message import HEADER_FIELDS
from bench.harness.cells import run_config
from bench.harness.modes import parse_mode
from bench.harness.sweep import CellSpec, Workload
from bench.net.placement import place
from bench.net.scenario import load_scenario
from bench.perfmodel.profile import load_profile
from bench.perfmodel.workload import step_workload


@pytest.mark.parametrize("mode, k, id_bytes", [("ssn:16", 16, 2), ("bottleneck:24", 24, 0)])
def test_step_workload_costs_k_coordinates_and_the_ids(mode, k, id_bytes):
    config = run_config(CellSpec("s", parse_mode(mode), Workload()), Path("/out"))
    p, model = config.pipeline, config.model
    work = step_workload(config, place(load_scenario("100mbps"), p.stages, 1),
                         load_profile("cpu-2core"))
    header = 8 * (HEADER_FIELDS + p.micro_batch_size)
    tokens = p.micro_batch_size * model.seq_len
    assert work.act_bytes == header + tokens * (2 * k + id_bytes)
    assert work.grad_bytes == header + tokens * 2 * k
