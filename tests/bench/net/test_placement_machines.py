"""Several ranks per machine in the scenario and the placement: which host each rank
runs on (a machine holds one stage's replicas by default, or one replica's stages), the
kind of each link (inside a machine or between two) in the table and the dict, the
named machine rates, the refusals; a one-rank-per-machine scenario unchanged."""

from __future__ import annotations

import pytest

from bench.launch.docker.compose import compose_dict
from bench.net.placement import LinkUse, Placement, PlacementError, RankPlace, place
from bench.net.scenario import ScenarioError, available_scenarios, load_scenario, parse_scenario


def machines(within: str = "replicas", k: int = 2, **extra) -> dict:
    return {"description": "x", "layout": {"stages": 2, "replicas": 2, "ranks_per_machine": k,
                                           "within_machine": within},
            "link": {"rate_mbit": 100}, **extra}


def test_by_default_a_machine_holds_one_stage_of_every_replica():
    p = place(parse_scenario(machines(), "m"), stages=2, replicas=2)
    assert [(r.rank, r.stage, r.replica, r.host, r.machine) for r in p.ranks] == \
        [(0, 0, 0, 0, 0), (1, 1, 0, 2, 1), (2, 0, 1, 1, 0), (3, 1, 1, 3, 1)]
    kinds = {(x.src, x.dst): (x.kind, x.rate_mbit, x.traffic[0]) for x in p.links}
    assert kinds[(0, 2)] == ("network", 100.0, "activations stage 0->1 (replica 0)")
    assert kinds[(0, 1)] == ("machine", None, "dp stage 0")  # unshaped when not given
    assert {k for k, _, _ in kinds.values()} == {"machine", "network"}


def test_within_machine_stages_keeps_the_pipeline_inside_a_machine():
    p = place(parse_scenario(machines("stages"), "m"), stages=2, replicas=2)
    assert [(r.host, r.machine) for r in p.ranks] == [(0, 0), (1, 0), (2, 1), (3, 1)]
    kinds = {(x.src, x.dst): x.kind for x in p.links}
    assert kinds[(0, 1)] == "machine" and kinds[(0, 2)] == "network"


def test_named_machine_rates_and_the_dict_and_table_show_both_kinds():
    s = parse_scenario(machines(machine_link={"rate_mbit": "pcie4-x16", "delay_ms": 0.01}),
                       "m")
    assert s.link_spec(0, 1).rate_mbit == 252_062.0 and s.link_spec(0, 1).delay_ms == 0.01
    assert s.to_dict()["machine_link"]["rate"] == "pcie4-x16"
    p = place(s, 2, 2)
    d = p.to_dict()
    assert (d["ranks_per_machine"], d["within_machine"]) == (2, "replicas")
    assert d["ranks"][1] == {"rank": 1, "host": 2, "stage": 1, "replica": 0, "machine": 1}
    assert {x["kind"] for x in d["links"]} == {"machine", "network"}
    rebuilt = Placement(d["scenario"], d["stages"], d["replicas"], d["n_hosts"],
                        tuple(RankPlace(**r) for r in d["ranks"]),
                        tuple(LinkUse(x["src"], x["dst"], tuple(x["traffic"]), x["rate_mbit"],
                                      x["delay_ms"], x["kind"]) for x in d["links"]),
                        d["ranks_per_machine"], d["within_machine"])
    assert rebuilt == p
    lines = p.table().splitlines()
    assert "2 ranks per machine, a machine holding replicas" in lines[0]
    assert any(x.split()[:5] == ["2", "1", "1", "0", "1"] for x in lines)  # host rank .. machine
    assert any(x.startswith("0 -> 1  machine") and "252062" in x for x in lines)
    assert any(x.startswith("0 -> 2  network") for x in lines)


def test_one_rank_per_machine_scenarios_are_as_before():
    for name in available_scenarios():
        s = load_scenario(name)
        if s.layout.ranks_per_machine > 1:
            continue
        assert set(s.to_dict()["layout"]) == {"stages", "replicas"}, name
        assert "machine_link" not in s.to_dict()
        p = place(s, s.layout.stages, s.layout.replicas)
        assert all(r.host == r.rank and r.machine is None for r in p.ranks)
        assert "machine" not in p.table().splitlines()[1]
        assert "ranks_per_machine" not in p.to_dict()
    assert [r.host for r in place(load_scenario("100mbps-2x2"), 2, 2).ranks] == [0, 2, 1, 3]


@pytest.mark.parametrize(("raw", "field"), [
    (machines(k=3), "layout.ranks_per_machine"),
    ({**machines(k=1), "machine_link": {"rate_mbit": None}}, "machine_link"),
    (machines(machine_link={"rate_mbit": "pcie9"}), "machine_link.rate_mbit"),
    (machines(links=[{"hosts": [0, 1], "rate_mbit": 10}]), "links"),
    (machines(hosts=[{"host": 0, "uplink_mbit": 10}]), "hosts"),
    (machines(within="both"), "layout.within_machine"),
])
def test_a_layout_that_cannot_be_is_refused_naming_the_field(raw, field):
    with pytest.raises(ScenarioError, match=f"field '{field}'"):
        parse_scenario(raw, "m")


def test_a_placement_whose_machines_disagree_with_its_hosts_is_refused():
    p = place(parse_scenario(machines(), "m"), 2, 2)
    wrong = tuple(RankPlace(r.rank, r.host, r.stage, r.replica, 0) for r in p.ranks)
    with pytest.raises(PlacementError, match="machines must be host // 2"):
        Placement(p.scenario, 2, 2, 4, wrong, p.links, 2)


def test_compose_runs_each_rank_on_its_placed_host(tmp_path):
    s = parse_scenario(machines(), "m")
    rank_on = {r.host: r.rank for r in place(s, 2, 2).ranks}
    services = compose_dict(s, config=tmp_path / "c.yaml",
                            ranks=tuple(rank_on[h] for h in range(4)))["services"]
    command = services["host2"]["command"]
    assert command[command.index("--rank") + 1] == "1"
    with pytest.raises(ValueError, match="each of ranks 0..3 once"):
        compose_dict(s, config=tmp_path / "c.yaml", ranks=(0, 0, 1, 2))


def test_the_reports_placement_and_probe_sections_name_machines_and_link_kinds(tmp_path):
    from report_fixtures import fixture_record

    from bench.report.tables import _carried, _placement_lines

    p = place(parse_scenario(machines(), "m"), 2, 2).to_dict()
    meta = fixture_record(tmp_path, placement=p, cell={"scenario": "m"})
    lines = _placement_lines([meta])
    assert "2 ranks per machine, a machine holding replicas" in lines[2]
    assert "machine" in lines[4].split("|")[5]
    carried = _carried([meta], "m")
    assert carried[(0, 1)] == ["inside a machine", "dp stage 0"]
    assert carried[(0, 2)][0] == "between machines"
    one = place(load_scenario("100mbps"), 2, 2).to_dict()
    assert "rank = replica * stages + stage" in _placement_lines(
        [fixture_record(tmp_path, placement=one)])[2]
