"""The launchers' common body (bench.launch.hosts): prefix, host limit and check, and a
shaped launcher that gives only its transport, plan and record."""

from __future__ import annotations

import re

import pytest

from bench.launch.hosts import MAX_HOSTS, ShapedHosts, check_host, new_prefix
from bench.net.scenario import parse_scenario
from bench.net.shaping import Interface, shaping_plan


def _scenario():
    return parse_scenario({"description": "x", "layout": {"stages": 2},
                           "link": {"rate_mbit": 50}}, "x")


class TransportOnly(ShapedHosts):
    """A shaped launcher giving its transport, plan, framing and record, nothing else."""

    name, shaped = "fake", True

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.ran: list[tuple[int, tuple]] = []

    def _run_on_host(self, i, argv):
        self._check_host(i)
        self.ran.append((i, tuple(argv)))

    def helper_argv(self, i, argv):
        return ["on", f"h{i}", *argv]

    def _schedule_plan(self):
        ifaces = tuple(Interface(f"eth{i}", ("10.0.0.1", "10.0.0.2")) for i in range(2))
        return shaping_plan(self.scenario, 2, factor=1.0, netem=False), ifaces

    def _framing(self):
        return 1.5

    def _commands(self):
        return [" ".join(a) for _, a in self.ran]

    def _record(self):
        return {"hosts": [{"host": i} for i in range(self.n_hosts)]}


def test_a_run_prefix_is_its_stem_and_five_new_hex_digits():
    a, b = new_prefix("r1"), new_prefix("r1")
    assert re.fullmatch(r"aq[0-9a-f]{5}", a) and a != b
    assert re.fullmatch(r"aqd[0-9a-f]{5}", new_prefix("r1", "aqd"))


def test_every_launcher_refuses_a_host_count_and_index_out_of_range():
    with pytest.raises(ValueError, match=rf"n_hosts: expected 1..{MAX_HOSTS}, got 0"):
        TransportOnly(_scenario(), 0)
    with pytest.raises(IndexError, match=r"host index 2 out of range \[0, 2\)"):
        check_host(2, 2)
    with pytest.raises(IndexError, match=r"host index -1 out of range \[0, 2\)"):
        TransportOnly(_scenario(), 2)._run_on_host(-1, ["tc"])


def test_lifted_limits_ratio_and_record_come_from_the_transport(tmp_path):
    hosts = TransportOnly(_scenario(), run_id="r", state_dir=tmp_path,
                          payload_correction=False)
    hosts._lift_limits(0, 1, True)
    assert hosts.ran and {i for i, _ in hosts.ran} <= {0, 1}
    assert all(a[0] == "tc" and "change" in a for _, a in hosts.ran)
    assert hosts._payload_ratio() == pytest.approx(1 / 1.5)
    assert hosts.state_path == tmp_path / f"{hosts.prefix}.json"
    rec = hosts.record()
    assert (rec["launcher"], rec["shaped"], rec["run_id"], rec["n_hosts"]) == ("fake", True,
                                                                            "r", 2)
    assert rec["prefix"] == hosts.prefix and rec["probe"] == [] and rec["hosts"][1] == {"host": 1}
    assert rec["commands"] == hosts._commands() and rec["links"][0]["src"] == 0
    assert rec["schedule"] is None and rec["allow_drop"] is False
