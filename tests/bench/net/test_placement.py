"""Placement of a cell's ranks on a scenario's hosts: the rank -> host rule, the used
links and their traffic, the refusal of cells that do not fit, the record and the table.
Hand-made scenarios only (no namespaces)."""

import json
from dataclasses import replace

import pytest

from bench.net.placement import LinkUse, Placement, PlacementError, RankPlace, place
from bench.net.scenario import SCENARIO_DIR, load_scenario, parse_scenario


def scenario(stages, replicas=1, links=(), hosts=(), rate_mbit=100):
    raw = {"description": "hand-made", "layout": {"stages": stages, "replicas": replicas},
           "link": {"rate_mbit": rate_mbit}, "links": list(links), "hosts": list(hosts)}
    return parse_scenario(raw, "hand")


def traffic(p):
    return {(link.src, link.dst): link.traffic for link in p.links}


def test_four_stages_use_the_chain_both_ways_and_nothing_else():
    p = place(scenario(4), stages=4)
    assert [(r.rank, r.host, r.stage, r.replica) for r in p.ranks] == [
        (0, 0, 0, 0), (1, 1, 1, 0), (2, 2, 2, 0), (3, 3, 3, 0)]
    assert traffic(p) == {
        (0, 1): ("activations stage 0->1",), (1, 0): ("gradients stage 1->0",),
        (1, 2): ("activations stage 1->2",), (2, 1): ("gradients stage 2->1",),
        (2, 3): ("activations stage 2->3",), (3, 2): ("gradients stage 3->2",)}
    assert p.probe_links() == [(0, 1), (1, 0), (1, 2), (2, 1), (2, 3), (3, 2)]
    assert [(x.src, x.dst) for x in p.links_of(0)] == [(0, 1), (1, 0)]
    assert len(p.links_of(1)) == 4 and p.idle_hosts == ()


def test_two_by_two_probes_the_data_parallel_pairs_not_the_idle_middle_link():
    # rank = replica * stages + stage: replica 1's stage 0 is host 2
    p = place(scenario(4), stages=2, replicas=2)
    assert [(r.host, r.stage, r.replica) for r in p.ranks] == [
        (0, 0, 0), (1, 1, 0), (2, 0, 1), (3, 1, 1)]
    t = traffic(p)
    assert set(t) == {(0, 1), (1, 0), (2, 3), (3, 2), (0, 2), (2, 0), (1, 3), (3, 1)}
    assert (1, 2) not in t and (2, 1) not in t
    assert t[(0, 2)] == t[(2, 0)] == ("dp stage 0",)
    assert t[(1, 3)] == ("dp stage 1",)
    assert t[(2, 3)] == ("activations stage 0->1 (replica 1)",)


def test_three_replicas_exchange_between_every_pair_of_a_stage():
    p = place(scenario(2, replicas=3), stages=2, replicas=3)
    dp0 = sorted(k for k, v in traffic(p).items() if v == ("dp stage 0",))
    assert dp0 == [(0, 2), (0, 4), (2, 0), (2, 4), (4, 0), (4, 2)]


def test_links_carry_the_scenarios_rate_caps_and_delay():
    s = scenario(4, rate_mbit=1000,
                 links=[{"hosts": [1, 2], "rate_mbit": 100, "delay_ms": 10}],
                 hosts=[{"host": 3, "uplink_mbit": 50, "downlink_mbit": 200}])
    p = place(s, stages=4)
    by = {(x.src, x.dst): x for x in p.links}
    assert (by[(1, 2)].rate_mbit, by[(1, 2)].delay_ms) == (100, 10)
    assert (by[(0, 1)].rate_mbit, by[(0, 1)].delay_ms) == (1000, 0)
    assert by[(2, 3)].rate_mbit == 200 and by[(3, 2)].rate_mbit == 50  # host 3's caps
    assert p.slowest_link() == by[(3, 2)]


def test_slowest_link_ignores_unshaped_and_by_default_dp_only_links():
    s = scenario(2, replicas=2, links=[{"hosts": [0, 2], "rate_mbit": 10}])
    p = place(s, stages=2, replicas=2)
    assert p.slowest_link().rate_mbit == 100  # the 10 Mbit/s link carries only dp
    assert (p.slowest_link(pipeline_only=False).src,
            p.slowest_link(pipeline_only=False).dst) in {(0, 2), (2, 0)}
    assert place(scenario(2, rate_mbit=None), stages=2).slowest_link() is None
    assert place(scenario(2), stages=1).slowest_link() is None


def test_a_smaller_cell_leaves_the_last_hosts_idle():
    p = place(scenario(4), stages=2)
    assert [r.host for r in p.ranks] == [0, 1] and p.idle_hosts == (2, 3)
    assert p.probe_links() == [(0, 1), (1, 0)]
    assert place(scenario(4), stages=1).links == ()


@pytest.mark.parametrize("stages, replicas", [(8, 1), (4, 2), (5, 1)])
def test_a_cell_that_does_not_fit_is_refused_with_both_sides(stages, replicas):
    with pytest.raises(PlacementError) as e:
        place(scenario(4), stages=stages, replicas=replicas)
    msg = str(e.value)
    assert f"{stages} stages x {replicas} replica(s) needs {stages * replicas} hosts" in msg
    assert "'hand' has 4 (layout 4 stages x 1 replica(s))" in msg


@pytest.mark.parametrize("stages, replicas", [(0, 1), (2, 0), (True, 1), (2.0, 1)])
def test_bad_cell_shapes_are_refused(stages, replicas):
    with pytest.raises(PlacementError, match="place.(stages|replicas)"):
        place(scenario(4), stages=stages, replicas=replicas)


def test_placement_validates_what_it_is_given():
    p = place(scenario(4), stages=2, replicas=2)
    swapped = (p.ranks[1], p.ranks[0]) + p.ranks[2:]
    with pytest.raises(PlacementError, match="rank = replica"):
        replace(p, ranks=swapped)
    shared = p.ranks[:3] + (RankPlace(3, 0, 1, 1),)
    with pytest.raises(PlacementError, match="distinct hosts"):
        replace(p, ranks=shared)
    with pytest.raises(PlacementError, match="distinct links"):
        replace(p, links=p.links + p.links[:1])
    with pytest.raises(PlacementError, match="n_hosts"):
        replace(p, n_hosts=3)
    with pytest.raises(PlacementError, match="two different hosts"):
        LinkUse(1, 1, ("dp stage 0",), 100.0, 0.0)
    with pytest.raises(PlacementError, match="traffic"):
        LinkUse(0, 1, (), 100.0, 0.0)
    with pytest.raises(PlacementError, match="rate_mbit"):
        LinkUse(0, 1, ("dp stage 0",), 0.0, 0.0)
    with pytest.raises(PlacementError, match="host_of.rank"):
        p.host_of(4)


def test_to_dict_is_json_and_complete():
    p = place(scenario(4), stages=2, replicas=2)
    d = json.loads(json.dumps(p.to_dict()))
    assert (d["stages"], d["replicas"], d["n_hosts"], d["idle_hosts"]) == (2, 2, 4, [])
    assert d["ranks"][2] == {"rank": 2, "host": 2, "stage": 0, "replica": 1}
    assert {"src": 0, "dst": 2, "traffic": ["dp stage 0"], "rate_mbit": 100.0,
            "delay_ms": 0.0} in d["links"]
    rebuilt = Placement(d["scenario"], d["stages"], d["replicas"], d["n_hosts"],
                        tuple(RankPlace(**r) for r in d["ranks"]),
                        tuple(LinkUse(x["src"], x["dst"], tuple(x["traffic"]), x["rate_mbit"],
                                      x["delay_ms"]) for x in d["links"]))
    assert rebuilt == p


def test_table_lists_every_rank_and_every_used_link():
    p = place(load_scenario("heterogeneous"), stages=4)
    text = p.table()
    lines = text.splitlines()
    assert lines[0].startswith("placement: 4 stages x 1 replica on 'heterogeneous'")
    for link in p.links:
        row = next(x for x in lines if x.startswith(f"{link.src} -> {link.dst} "))
        assert "; ".join(link.traffic) in row
    assert any(x.split()[:4] == ["2", "2", "2", "0"] for x in lines)  # host rank stage replica
    assert "1 -> 2" in text and "100" in text and "10" in text
    assert all(line == line.rstrip() for line in lines)
    assert "idle hosts: 2, 3" in place(load_scenario("heterogeneous"), stages=2).table()


WAN = ["wan-datacenter", "wan-spot", "wan-multidc", "wan-regional", "wan-worldwide"]


@pytest.mark.parametrize("name", WAN)
def test_wide_area_files_cite_their_source_and_are_symmetric(name):
    s = load_scenario(name)
    text = (SCENARIO_DIR / f"{name}.yaml").read_text(encoding="utf-8")
    assert "NeurIPS 2022" in text and "DS3Lab/DT-FM" in text and "69f05e5" in text
    assert s.n_hosts == 8 and all(f"host {h}: " in text for h in range(8))
    for a in range(8):
        for b in range(8):
            if a != b:
                assert s.link_spec(a, b) == s.link_spec(b, a), (a, b)
    p = place(s, stages=8)
    assert p.probe_links() == [(h + d, h + 1 - d) for h in range(7) for d in (0, 1)]


@pytest.mark.parametrize("name, delay_ms, rate_mbit", [
    ("wan-regional", (10, 70), (1000, 1300)),    # the paper's ranges between regions
    ("wan-worldwide", (10, 250), (300, 1300))])
def test_wide_area_pairs_fall_in_the_papers_published_ranges(name, delay_ms, rate_mbit):
    s = load_scenario(name)
    text = (SCENARIO_DIR / f"{name}.yaml").read_text(encoding="utf-8")
    site = {h: text.split(f"host {h}: ")[1].split("\n")[0] for h in range(8)}
    cross = [(a, b) for a in range(8) for b in range(8) if a != b and site[a] != site[b]]
    assert len(cross) == (48 if name == "wan-regional" else 56)
    for a, b in cross:
        spec = s.link_spec(a, b)
        assert delay_ms[0] <= spec.delay_ms <= delay_ms[1], (site[a], site[b], spec)
        assert rate_mbit[0] <= spec.rate_mbit <= rate_mbit[1], (site[a], site[b], spec)


def test_worldwide_pipeline_hops_in_file_order():
    p = place(load_scenario("wan-worldwide"), stages=8)
    hops = [(x.delay_ms, x.rate_mbit) for x in p.links if x.traffic[0].startswith("activations")]
    # Oregon, Virginia, Ohio, Tokyo, Seoul, London, Frankfurt, Ireland
    assert hops == [(67, 790), (11, 1120), (130, 694), (34, 1100), (238, 342), (14, 1140),
                    (24, 1080)]
    assert p.slowest_link().rate_mbit == 342  # Seoul - London
