"""Cells on links that change: the process-group timeout that survives a scenario's
outages, what the outages cost, a failed cell naming them (pure), and the dynamic sweep's
smoke size with the real worker on netns: every cell lives through outages, and a worker
failure names the outages before it."""

import dataclasses
import json

import pytest

from bench.harness.cells import run_config
from bench.harness.outages import (
    OUTAGE_SLACK_S,
    cell_timeout_s,
    outage_note,
    outages_applied,
    steps_beyond_median_s,
    survivable,
)
from bench.harness.run import run_sweep
from bench.harness.sweep import load_sweep
from bench.net.scenario import load_scenario, parse_scenario
from bench.report.timeline import phase_spans, phase_table, step_times, timeline_section
from bench.results.files import load_records, load_results, read_record

SMOKE_SWEEP = "scenarios/sweeps/dynamic-smoke.yaml"


def _outage_scenario(down_s: float):
    return parse_scenario({"description": "x", "layout": {"stages": 2},
                           "link": {"rate_mbit": 100, "schedule": {"loop": True, "phases": [
                               {"duration_s": 10}, {"duration_s": down_s, "down": True}]}}},
                          "x")


def test_an_outage_raises_the_process_group_timeout_to_survive_it(tmp_path):
    spec = load_sweep(SMOKE_SWEEP)
    config = run_config(spec.cells()[0], tmp_path)
    assert config.dist.timeout_s == 60
    assert survivable(config, _outage_scenario(5), 2).dist.timeout_s == 60  # 2 x 5 + 30
    long = survivable(config, _outage_scenario(40), 2)
    assert long.dist.timeout_s == 2 * 40 + OUTAGE_SLACK_S
    assert dataclasses.replace(long, dist=config.dist) == config  # nothing else changes
    assert survivable(config, load_scenario("100mbps"), 2) is config
    # the cell's own limit grows by twice the outages inside it: 6 of 40 s in 300 s
    assert cell_timeout_s(300, _outage_scenario(40), 2) == 300 + 2 * (6 * 40 * 2)


def test_outages_applied_and_the_note_a_failed_cell_carries():
    run = {"changes": [
        {"src": 0, "dst": 1, "phase": 0, "down": False, "applied_s": 0.0},
        {"src": 0, "dst": 1, "phase": 1, "down": True, "applied_s": 10.01},
        {"src": 0, "dst": 1, "phase": 0, "down": False, "applied_s": 12.0},
        {"src": 0, "dst": 1, "phase": 1, "down": True, "applied_s": 22.0},
        {"src": 0, "dst": 1, "phase": 1, "down": True, "applied_s": 40.0, "error": "x"}]}
    outages = outages_applied(run)
    assert outages == [{"src": 0, "dst": 1, "down_s": 10.01, "up_s": 12.0},
                       {"src": 0, "dst": 1, "down_s": 22.0, "up_s": None}]
    note = outage_note(outages, 90.0)
    assert "link 0 -> 1 down at 10.0 s for 2.0 s, link 0 -> 1 down at 22.0 s;" in note
    assert "dist.timeout_s 90 s survives outages up to 30 s, at most 300 s" in note
    assert outage_note([], 90.0) == "" and outages_applied(None) == []


def test_time_lost_is_the_slowest_ranks_steps_beyond_the_median(tmp_path):
    def write(rank, times):
        recs = [{"kind": "train", "step": k, "warmup": k == 0, "step_time_s": t}
                for k, t in enumerate(times)]
        (tmp_path / f"rank{rank}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))

    write(0, [9.0, 1.0, 1.0, 4.0, 1.0])
    write(1, [9.0, 1.2, 1.0, 1.0, 1.0])
    lost = steps_beyond_median_s([tmp_path / "rank0.jsonl", tmp_path / "rank1.jsonl"])
    assert lost == pytest.approx(4.0 - 1.1 + 0.1)  # median of 1.2, 1.0, 4.0, 1.0 is 1.1


@pytest.mark.slow
@pytest.mark.netns
@pytest.mark.workers
@pytest.mark.timeout(400)
def test_dynamic_smoke_sweep_lives_through_its_outages_and_a_failure_names_them(tmp_path):
    spec = load_sweep(SMOKE_SWEEP)
    out = tmp_path / "results"
    outcomes = run_sweep(spec, out, launcher="netns", quiet=True, echo=lambda s: None)
    assert [o.status for o in outcomes] == ["ok", "ok"], [o.reason for o in outcomes]
    for cell in spec.cells():
        meta = json.loads((out / cell.name / "meta.json").read_text())
        block = meta["schedule"]
        print(cell.name, json.dumps({k: v for k, v in block.items() if k != "outages"}),
              f"{len(block['outages'])} outages applied")
        assert block["outages"] and block["longest_outage_s"] == 1.5
        assert block["time_lost_s"] > 0 and block["survivable_outage_s"] >= 1.5
        run = meta["launcher"]["schedule"]["run"]
        assert run["error"] is None and run["changes"][-1]["phase"] == -1
        assert all(c["applied_s"] - c["t_s"] < 0.5 for c in run["changes"] if c["phase"] >= 0)
        # every measured step lies in a phase of the schedule's clock
        record = read_record(out / cell.name)
        steps = step_times(load_results([out / cell.name]), record)
        table = phase_table(steps, phase_spans(record))
        print(table.to_string())
        assert list(table["phase"]) == [0, 1, 2] and list(table["rate_mbit"][:2]) == [100, 25]
        assert table["steps"].sum() == (~steps["warmup"]).sum()
        assert (steps["start_s"] > 0).all() and steps["end_s"].max() < run["stopped_unix"] - \
            run["started_unix"]
    section = timeline_section(load_records([out]), out / "figures", out)
    assert section[0] == "## Links that change"
    assert sorted(p.name for p in (out / "figures").glob("timeline_*.png")) == sorted(
        f"timeline_{c.name}.png" for c in spec.cells())
    # a worker that fails after the first outage (at 6 s): the reason names the outages
    failing = dataclasses.replace(spec, modes=spec.modes[:1], workload=dataclasses.replace(
        spec.workload, steps=12, overrides={"train.fail_at_step": 8}))
    [outcome] = run_sweep(failing, tmp_path / "failing", launcher="netns", quiet=True,
                          echo=lambda s: None)
    assert outcome.status == "failed"
    assert "during the run's outages: link 0 -> 1 down at 6.0 s for 1.5 s" in outcome.reason
