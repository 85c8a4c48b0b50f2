"""Length-first messages between two real gloo processes (aqsgd.train.p2p): a message
whose size only the sender knows arrives whole, an empty part included, both ends count
its prefix, and a prefix that contradicts a fixed dim is refused naming both shapes."""

import subprocess
import sys

import pytest

from bench.launch.process import free_port

SCRIPT = r'''
import sys, torch, torch.distributed as dist
from aqsgd.train.p2p import P2P
from aqsgd.train.metrics import StepMeter
from aqsgd.compress.wire import DATA_SIZED
rank, port, fixed, thread = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
p2p = P2P(StepMeter(rank), torch.device("cpu"), 20)
assert p2p.prefix_thread  # gloo: the watcher posts; NCCL's way, in wait_recv, when told
p2p.prefix_thread = thread == "thread"
spec = [((fixed,), torch.int64), ((DATA_SIZED,), torch.int16), ((2, 2), torch.float16)]
for k in (5, 0, 7):
    if rank == 0:
        p2p.send(1, "activation", [torch.arange(3), torch.arange(k, dtype=torch.int16),
                                   torch.ones(2, 2, dtype=torch.float16)], length_first=True)
    else:
        got = p2p.wait_recv(p2p.post_recv(0, "activation", f"m{k}", spec, length_first=True))
        assert got[1].tolist() == list(range(k)), got
        print("got", [tuple(t.shape) for t in got], flush=True)
if rank == 0:
    p2p.wait_sends()
print("bytes", p2p.meter.bytes_sent["activation"], p2p.meter.bytes_recv["activation"], flush=True)
'''


def _run(fixed: int, thread: str = "thread") -> list[subprocess.CompletedProcess]:
    port = str(free_port())
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT, str(r), port, str(fixed), thread],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in (0, 1)]
    return [(p.wait(timeout=120), p.stdout.read()) for p in procs]


@pytest.mark.workers
@pytest.mark.timeout(150)
@pytest.mark.parametrize("thread", ["thread", "inline"])
def test_a_message_sized_by_data_arrives_whole_and_both_ends_count_its_prefix(thread):
    (code0, out0), (code1, out1) = _run(3, thread)
    assert code0 == code1 == 0, out0 + out1
    assert "got [(3,), (5,), (2, 2)]\ngot [(3,), (0,), (2, 2)]\ngot [(3,), (7,), (2, 2)]" in out1
    # each message: prefix of 4 dims (32 B), 3 int64 (24 B), k int16, 4 fp16 (8 B)
    total = sum(32 + 24 + 2 * k + 8 for k in (5, 0, 7))
    assert f"bytes {total} 0" in out0 and f"bytes 0 {total}" in out1


@pytest.mark.workers
@pytest.mark.timeout(150)
def test_a_prefix_that_contradicts_a_fixed_dim_is_refused():
    (_, _), (code1, out1) = _run(4)  # the receiver expects 4 where 3 are sent
    assert code1 != 0
    assert "receiving m5 from rank 0: length prefix: shape (3,) where the spec says (4,)" in out1
