"""Link schedules as data: the file schema (phases, CSV and Mahimahi traces; errors name
file, field and value), the domain checks, and the phase changes rendered from the host
shaping plan (pure: no root, no command runs)."""

import math

import pytest

from bench.net.scenario import ScenarioError, load_scenario, parse_scenario
from bench.net.schedule import LinkSchedule, Phase, read_mahimahi_trace
from bench.net.shaping import Interface, shaping_plan
from bench.net.tc import Capabilities, mechanisms_for


def _file(tmp_path, schedule, **link):
    """A scenario file with `schedule` on its default link; its path."""
    import yaml

    path = tmp_path / "dyn.yaml"
    path.write_text(yaml.safe_dump({"description": "a link that changes",
                                    "layout": {"stages": 2},
                                    "link": {"rate_mbit": 50, **link, "schedule": schedule}}))
    return path


def _error(path) -> str:
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    return str(err.value)


def test_phases_are_read_with_the_links_own_values_where_left_out(tmp_path):
    s = load_scenario(_file(tmp_path, {"loop": True, "phases": [
        {"duration_s": 2, "rate_mbit": 20, "delay_ms": 10},
        {"duration_s": 1, "down": True}, {"duration_s": 3}]}, delay_ms=4))
    sched = s.link.schedule
    assert sched.loop and sched.duration_s == 6 and sched.longest_outage_s == 1
    assert s.link.in_phase(sched.phases[0]).rate_mbit == 20
    assert s.link.in_phase(sched.phases[0]).delay_ms == 10
    assert s.link.in_phase(sched.phases[2]).rate_mbit == 50
    assert s.link.in_phase(sched.phases[2]).delay_ms == 4
    # every directed link of the default inherits it; the record keeps it
    assert len(s.scheduled_links(2)) == 2
    assert s.to_dict()["link"]["schedule"]["phases"][1] == {"duration_s": 1.0, "down": True}
    starts = [(p.t_s, p.index, p.lap) for p in sched.starts(13)]
    assert starts == [(0, 0, 0), (2, 1, 0), (3, 2, 0), (6, 0, 1), (8, 1, 1), (9, 2, 1),
                      (12, 0, 2)]
    assert sched.outages(10) == [(2.0, 1.0), (8.0, 1.0)]


def test_one_link_may_have_a_schedule_and_another_none(tmp_path):
    s = parse_scenario({"description": "x", "layout": {"stages": 3},
                        "link": {"rate_mbit": 10, "schedule": {"phases": [{"duration_s": 1}]}},
                        "links": [{"hosts": [1, 2], "schedule": None}]}, "x")
    assert [(a, b) for a, b, _ in s.scheduled_links(3)] == [(0, 1), (0, 2), (1, 0), (2, 0)]


@pytest.mark.parametrize(("schedule", "field", "value"), [
    ({"phases": [{"duration_s": 0}]}, "link.schedule.phases[0].duration_s", "0"),
    ({"phases": [{"duration_s": 1, "rate_mbit": "fast"}]},
     "link.schedule.phases[0].rate_mbit", "'fast'"),
    ({"phases": [{"duration_s": 1, "rate_mbit": 0.001}]},
     "link.schedule.phases[0].rate_mbit", "0.001"),
    ({"phases": [{"duration_s": 1, "jitter_ms": 9}]}, "link.schedule.phases[0].jitter_ms", "9"),
    ({"phases": [{"duration_s": 1, "down": True, "rate_mbit": 5}, {"duration_s": 1}]},
     "link.schedule.phases[0].rate_mbit", "5"),
    ({"phases": [{"duration_s": 1}, {"duration_s": 400, "down": True}], "loop": True},
     "link.schedule.phases[1].duration_s", "400"),
    ({"phases": [{"duration_s": 1}, {"duration_s": 1, "down": True}]},
     "link.schedule.phases[1].down", "True"),
    ({"phases": [{"duration_s": 1, "speed": 3}]}, "link.schedule.phases[0].speed", "speed"),
    ({"phases": []}, "link.schedule.phases", "0"),
    ({"phases": [{"duration_s": 1}], "trace": "t.csv"}, "link.schedule", "trace"),
    ({"trace": "t.csv", "bin_ms": 10}, "link.schedule.bin_ms", "10"),
])
def test_bad_phases_name_file_field_and_value(tmp_path, schedule, field, value):
    message = _error(_file(tmp_path, schedule))
    assert str(tmp_path / "dyn.yaml") in message and f"'{field}'" in message \
        and value in message, message


def test_a_schedule_needs_a_rate_on_its_link(tmp_path):
    message = _error(_file(tmp_path, {"phases": [{"duration_s": 1}]}, rate_mbit=None))
    assert "'link.rate_mbit'" in message and "schedule" in message


def test_csv_trace_is_read_relative_to_the_scenario_file(tmp_path):
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "halving.csv").write_text(
        "# a link that halves every minute\nt_s,rate_mbit,delay_ms,loss_pct\n"
        "0,40\n60,20,5\n120,0\n130,10,5,1\n")
    s = load_scenario(_file(tmp_path, {"trace": "traces/halving.csv", "loop": True}))
    phases = s.link.schedule.phases
    assert s.link.schedule.source == "traces/halving.csv"
    assert [p.duration_s for p in phases] == [60, 60, 10, 10]  # the last as the one before
    assert [p.rate_mbit for p in phases] == [40, 20, None, 10]
    assert phases[2].down and phases[1].delay_ms == 5 and phases[3].loss_pct == 1


@pytest.mark.parametrize(("text", "where", "value"), [
    ("0,40\n10,fast\n", "line 2, column rate_mbit", "'fast'"),
    ("0,40\n10,20,1,2,3\n", "line 2, column (all)", "10,20,1,2,3"),
    ("5,40\n10,20\n", "line 1, column t_s", "'5'"),
    ("0,40\n10,20\n10,30\n", "line 3, column t_s", "'10'"),
    ("0,40\n10,-3\n", "line 2, column rate_mbit", "'-3'"),
    ("0,40\n10,0.01\n", "line 2, column rate_mbit", "0.01"),
    ("0,40\n10,20,5,120\n", "line 2, column loss_pct", "120"),
    ("0,40\n", "at least 2 rows", "1"),
    # a cell the header does not name (it would be read as the loss)
    ("t_s,rate_mbit,delay_ms\n0,40,5\n4,50,10,7\n", "line 3, column (all)", "4,50,10,7"),
    ("t_s,rate_mbit\n0,40\n4,50,10\n", "at most the header's 2 columns", "4,50,10"),
])
def test_bad_csv_traces_name_the_trace_line_column_and_value(tmp_path, text, where, value):
    (tmp_path / "bad.csv").write_text(text)
    message = _error(_file(tmp_path, {"trace": "bad.csv"}))
    assert str(tmp_path / "dyn.yaml") in message and "'link.schedule.trace'" in message
    assert "bad.csv" in message and where in message and value in message, message


def test_missing_trace_file_is_named(tmp_path):
    message = _error(_file(tmp_path, {"mahimahi": "nowhere.up"}))
    assert "'link.schedule.mahimahi'" in message and "nowhere.up" in message


def test_mahimahi_trace_becomes_phases_per_bin(tmp_path):
    # 3 s period: 100 deliveries in the first second (1.2 Mbit/s of 1500-byte packets),
    # none in the second (an outage), one in the third (the stamp at the period, 0.012
    # Mbit/s: raised to the floor); the trace loops like mm-link's
    stamps = [k * 10 for k in range(100)] + [3000]
    (tmp_path / "cell.up").write_text("\n".join(map(str, stamps)) + "\n")
    sched = read_mahimahi_trace(tmp_path / "cell.up", 1000)
    assert sched.loop and [p.duration_s for p in sched.phases] == [1.0, 1.0, 1.0]
    assert math.isclose(sched.phases[0].rate_mbit, 100 * 1500 * 8 / 1e6)
    assert sched.phases[1].down and sched.phases[1].rate_mbit is None
    assert sched.phases[2].rate_mbit == 0.05
    (tmp_path / "bad.up").write_text("0\n10\n5\n")
    message = _error(_file(tmp_path, {"mahimahi": "bad.up"}))
    assert "bad.up line 3, column ms" in message and "5" in message


def test_domain_types_check_values_given_in_code():
    with pytest.raises(ValueError, match="duration_s"):
        Phase(-1)
    with pytest.raises(ValueError, match="phases"):
        LinkSchedule(())


# -- rendering: the plan's tc changes ----------------------------------------------------
def _plan(netem: bool, **link):
    s = parse_scenario({"description": "x", "layout": {"stages": 2},
                        "link": {"rate_mbit": 50, **link, "schedule": {"phases": [
                            {"duration_s": 1, "rate_mbit": 20, "delay_ms": 8},
                            {"duration_s": 1, "down": True}, {"duration_s": 1}]}}}, "x")
    plan = shaping_plan(s, 2, factor=1.0, netem=netem)
    ifaces = [Interface(f"veth{i}", ("10.0.0.1", "10.0.0.2"), f"ns{i}") for i in range(2)]
    return s, plan, ifaces


def test_phase_changes_render_class_changes_and_outages_from_the_plan():
    s, plan, ifaces = _plan(netem=False)
    spec = s.link_spec(0, 1)
    phases = spec.schedule.phases
    slow = plan.phase_argvs(0, 1, spec.in_phase(phases[0]), down=False, was_down=False,
                            interfaces=ifaces)
    assert slow == [(0, ("tc", "-n", "ns0", "class", "change", "dev", "veth0", "parent", "1:1",
                         "classid", "1:10", "htb", "rate", "20000000bit", "ceil",
                         "20000000bit", "burst", "16384", "cburst", "16384"))]
    down = plan.phase_argvs(0, 1, spec.in_phase(phases[1]), down=True, was_down=False,
                            interfaces=ifaces)
    assert [a[3:] for _, a in down] == [
        ("qdisc", "del", "dev", "veth0", "parent", "1:10", "handle", "10:"),
        ("qdisc", "add", "dev", "veth0", "parent", "1:10", "handle", "10:", "blackhole")]
    up = plan.phase_argvs(0, 1, spec.in_phase(phases[2]), down=False, was_down=True,
                          interfaces=ifaces)
    assert [a[3:6] for _, a in up] == [("class", "change", "dev"), ("qdisc", "del", "dev"),
                                       ("qdisc", "add", "dev")]
    assert "50000000bit" in up[0][1] and up[2][1][-3:] == ("pfifo", "limit", "1000")
    # host 1's class towards host 0 is its own
    assert plan.phase_argvs(1, 0, spec, down=False, was_down=False,
                            interfaces=ifaces)[0][1][2] == "ns1"


def test_with_netem_a_scheduled_delay_gets_a_netem_leaf_from_the_start_and_changes_it():
    s, plan, ifaces = _plan(netem=True)
    setup = plan.setup_argvs(0, ifaces[0])
    assert any("netem" in a for a in setup)  # the link's own values have no delay
    spec = s.link_spec(0, 1)
    change = plan.phase_argvs(0, 1, spec.in_phase(spec.schedule.phases[0]), down=False,
                              was_down=False, interfaces=ifaces)
    assert change[1][1][3:5] == ("qdisc", "change") and "8ms" in change[1][1]


def test_scheduled_impairments_choose_their_mechanism():
    s, _, _ = _plan(netem=False)
    chosen = mechanisms_for(s, 2, Capabilities(netem=False, delay_line=True), allow_drop=False)
    assert chosen["delay"] == "delayline" and chosen["loss"] == "none"
