"""The performance model's width of an adaptive direction (bench.perfmodel.workload.
adaptive_bits): the chooser's rule on the slowest link and the fastest stage."""

from aqsgd.compress.message import CompressionConfig, message_spec
from aqsgd.compress.wire import spec_nbytes
from bench.perfmodel.workload import LinkWork, StageWork, adaptive_bits

SHAPE = (4, 64, 128)  # (B, L, D)
CFG = CompressionConfig.from_dict({"mode": "aqsgd", "bits": 8, "widths": (2, 3, 4, 8)})


def mbit_for(bits: int, seconds: float) -> float:
    """The rate at which a `bits` message takes `seconds`."""
    return 8 * spec_nbytes(message_spec(CFG, SHAPE, 0, bits=bits)) / seconds / 1e6


def test_the_slowest_link_and_the_fastest_stage_decide():
    stages = (StageWork(0.01, 0.02, 0.0, 1), StageWork(0.02, 0.04, 0.0, 1))  # budgets 30, 60 ms
    links = {(0, 1): LinkWork(1000.0, 0.0), (1, 0): LinkWork(mbit_for(3, 0.03), 0.0)}
    assert adaptive_bits(CFG, SHAPE, stages, links) == 3
    links[(1, 0)] = LinkWork(mbit_for(8, 0.03), 0.0)
    assert adaptive_bits(CFG, SHAPE, stages, links) == 8
    links[(1, 0)] = LinkWork(0.001, 0.0)  # nothing fits: the narrowest
    assert adaptive_bits(CFG, SHAPE, stages, links) == 2


def test_unshaped_links_take_the_widest():
    stages = (StageWork(0.01, 0.02, 0.0, 1),)
    assert adaptive_bits(CFG, SHAPE, stages, {(0, 1): LinkWork(None, 0.0)}) == 8
