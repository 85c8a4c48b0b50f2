"""The performance model costs a mode sized by data (aqsgd-sparse) at the size the mode
declares it expects, its length prefix included, never at a size from its shape alone."""

from pathlib import Path

from aqsgd.compress.message import message_spec
from aqsgd.compress.wire import spec_nbytes
from bench.harness.cells import run_config
from bench.harness.modes import parse_mode
from bench.harness.sweep import CellSpec, Workload
from bench.net.placement import place
from bench.net.scenario import load_scenario
from bench.perfmodel.profile import load_profile
from bench.perfmodel.workload import step_workload


def test_step_workload_takes_the_expected_size_of_aqsgd_sparse():
    work = {}
    for mode in ("aqsgd-sparse", "aqsgd:2/4"):
        config = run_config(CellSpec("s", parse_mode(mode), Workload()), Path("/out"))
        p, model = config.pipeline, config.model
        work[mode] = step_workload(config, place(load_scenario("100mbps"), p.stages, 1),
                                   load_profile("cpu-2core"))
        shape = (p.micro_batch_size, model.seq_len, model.n_embd)
        expected = spec_nbytes(message_spec(config.forward, shape, 0, expected=True))
        assert work[mode].act_bytes == expected
    # 2 bits: about 12% of the entries, 2.25 bytes each, against AQ-SGD's quarter byte
    ratio = work["aqsgd-sparse"].act_bytes / work["aqsgd:2/4"].act_bytes
    assert 1.0 < ratio < 1.2
    assert work["aqsgd-sparse"].grad_bytes == work["aqsgd:2/4"].grad_bytes
