"""Competing traffic, for real on network namespaces: a bulk TCP flow started and stopped
on the schedule's clock shares a shaped link with a stream standing in for the training;
the stream's own bytes and the link's class counter show the link shared, and the run
record says what the flow sent and the training's share of the interval.

Needs root and `ip netns` (the `netns` mark; CI runs them as root, tests/conftest.py).
"""

import pytest

from bench.launch.netns import NetnsLauncher
from bench.launch.schedules import probe_timeline
from bench.net.scenario import parse_scenario

pytestmark = [pytest.mark.netns, pytest.mark.slow]

RATE_MBIT = 20.0


def _mbit(reply: dict, started_unix: float, a_s: float, b_s: float) -> float:
    """The stream's payload rate over the bins that start in [a_s, b_s)."""
    t0, b = reply["t0_unix"] - started_unix, reply["bin_s"]
    inside = [n for k, n in enumerate(reply["bytes"]) if a_s <= t0 + k * b < b_s]
    return sum(inside) * 8 / 1e6 / (len(inside) * b)


@pytest.mark.timeout(180)
def test_a_competing_flow_shares_the_link_and_the_record_says_how(tmp_path):
    scenario = parse_scenario({
        "description": "a link shared with one bulk flow from 3 s to 7 s",
        "layout": {"stages": 2}, "link": {"rate_mbit": RATE_MBIT},
        "competing": [{"src": 0, "dst": 1, "start_s": 3, "duration_s": 4}]}, "competing")
    with NetnsLauncher(scenario, 2, state_dir=tmp_path / "state") as hosts:
        hosts.start_schedule()
        flow_logs = hosts.files.flow_logs
        assert (flow_logs / "flow0-recv.log").read_text().startswith("listening")
        # the training's stand-in: one stream 0 -> 1 through the whole run
        stream = probe_timeline(hosts, 0, 1, 11.0, tmp_path / "logs")
        run = hosts.stop_schedule()
        block = hosts.record()["schedule"]["competing"]
        senders = list(hosts._procs)
    assert not flow_logs.exists()  # removed with the run
    assert all(p.poll() is not None for p in senders)
    start = run["started_unix"]
    kinds = [(c["kind"], c["t_s"]) for c in run["changes"]]
    # the final read when the run stops ends an interval cut short (none here)
    assert kinds[:4] == [("counter", 3), ("flow_start", 3), ("flow_stop", 7), ("counter", 7)]
    assert [c["final"] for c in run["changes"] if c["kind"] == "counter"] == [False, False, True]
    assert all("error" not in c for c in run["changes"])
    assert 0 <= run["changes"][1]["applied_s"] - 3 < 0.5

    [flow] = block["flows"]
    print(f"flow: {flow}")
    assert flow["ran"] and flow["bytes_received"] > 100_000
    assert 3 <= flow["first_byte_s"] < 4.5 and 6 < flow["last_byte_s"] < 11
    [row] = block["intervals"]
    print(f"interval: {row}")
    assert (row["start_s"], row["end_s"], row["flows"], row["cut_at_s"]) == (3, 7, [0], None)
    # the class carried the link's rate (frames: payload x framing) through the interval
    wire_mbit = row["class_bytes"] * 8 / 1e6 / row["measured_s"]
    assert wire_mbit == pytest.approx(RATE_MBIT * block["framing"], rel=0.10)
    assert row["training_bytes"] + block["framing"] * row["competing_bytes"] == \
        pytest.approx(row["class_bytes"], abs=1)
    assert 0.05 < row["training_share"] < 0.97

    # the stand-in's own bytes: the full link before, less while the flow ran, and
    # together with the flow about the link's rate
    before = _mbit(stream, start, 1.0, 3.0)
    during = _mbit(stream, start, 4.0, 7.0)
    flow_during = flow["bytes_received"] * 8 / 1e6 / (flow["last_byte_s"] - flow["first_byte_s"])
    print(f"stand-in {before:.2f} Mbit/s before, {during:.2f} while the flow ran "
          f"(flow {flow_during:.2f})")
    assert before == pytest.approx(RATE_MBIT, rel=0.05)
    assert during < 0.97 * before
    assert during + flow_during == pytest.approx(RATE_MBIT, rel=0.15)
