"""Competing flows as data: their bounds, the intervals of a link between the flows'
starts and stops, the training's share of a link, and tc's byte counter read."""

import pytest

from bench.net.competing import CompetingFlow, link_intervals, sent_bytes, training_share
from specfile import SpecError


def test_a_flow_checks_its_hosts_and_times():
    f = CompetingFlow(0, 1, 5, 10)
    assert (f.start_s, f.end_s, f.max_rate_mbit) == (5.0, 15.0, None)
    for args, field in (((0, 0, 0, 1), "dst"), ((True, 1, 0, 1), "src"),
                        ((0, 1, -1, 1), "start_s"), ((0, 1, 0, 0), "duration_s")):
        with pytest.raises(SpecError) as info:
            CompetingFlow(*args)
        assert info.value.field == field
    with pytest.raises(SpecError, match="max_rate_mbit"):
        CompetingFlow(0, 1, 0, 1, max_rate_mbit=0.0)


def test_intervals_split_a_link_at_every_start_and_stop_of_its_flows():
    flows = (CompetingFlow(0, 1, 10, 20), CompetingFlow(0, 1, 20, 20),
             CompetingFlow(1, 0, 0, 5), CompetingFlow(0, 1, 50, 10))
    got = [(i.src, i.dst, i.start_s, i.end_s, i.flows) for i in link_intervals(flows)]
    # 30-40: only flow 1; 40-50: none, left out
    assert got == [(0, 1, 10, 20, (0,)), (0, 1, 20, 30, (0, 1)), (0, 1, 30, 40, (1,)),
                   (0, 1, 50, 60, (3,)), (1, 0, 0, 5, (2,))]
    # two flows alike share each interval
    same = link_intervals((CompetingFlow(0, 1, 0, 5), CompetingFlow(0, 1, 0, 5)))
    assert [i.flows for i in same] == [(0, 1)]


def test_training_share_counts_the_flows_frames_on_the_wire():
    # 1000 payload bytes of competing flow are 1050 on the wire; the class sent 2100
    assert training_share(2100, 1000, framing=1.05) == pytest.approx(0.5)
    assert training_share(2100, 0, framing=1.05) == 1.0
    assert training_share(0, 0, framing=1.05) is None
    assert training_share(1000, 1000, framing=1.05) == 0.0  # never below 0


def test_the_byte_counter_of_one_class_is_read_from_tc_output():
    out = ("class htb 1:10 parent 1:1 leaf 10: prio 0 rate 20Mbit ceil 20Mbit\n"
           " Sent 11679136 bytes 7735 pkt (dropped 0, overlimits 0 requeues 0)\n"
           " backlog 0b 0p requeues 0\n")
    assert sent_bytes(out) == 11679136
    with pytest.raises(ValueError, match="got 0"):
        sent_bytes("")
    with pytest.raises(ValueError, match="got 2"):
        sent_bytes(out + out)
