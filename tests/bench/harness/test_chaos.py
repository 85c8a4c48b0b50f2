"""The chaos sweep (bench.harness.chaos): its sweep and its checks on made-up events, then
the smoke size for real: real workers on netns, a worker and the harness killed, a link
down, files cut, the results folder full, every cell checked and nothing left."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from bench.harness.chaos import SIZES, run_chaos
from bench.harness.chaos_check import After, Event, check_sweep_after
from bench.harness.preflight import load_checked_sweep
from bench.launch.choice import choose_launcher

# A killed harness's workers and links end on their own (bench.launch's watchdog,
# docs/watchdog.md): the smoke run holds it to 10 s and 30 s, before any cleanup.
STRICT = True


def test_the_smoke_sweep_has_twelve_cells_and_a_timeout_from_the_warm_up(tmp_path):
    size = SIZES["smoke"]
    path = tmp_path / "chaos.yaml"
    path.write_text(yaml.safe_dump(size.sweep_file(timeout_s=42)))
    spec = load_checked_sweep(path)
    cells = spec.cells()
    assert len(cells) == 12 and {c.scenario for c in cells} == {"10mbps"}
    assert {c.workload.timeout_s for c in cells} == {42}
    # the harness's timeout, not the workers' own, ends a cell whose link is down
    assert {c.workload.dist_timeout_s for c in cells} == {84}


def _after(tmp_path: Path, events: list[Event], **change) -> After:
    (tmp_path / "sweep").mkdir(exist_ok=True)
    logs = [tmp_path / f"harness-{i}.log" for i in (1, 2, 3)]
    for log in logs:
        log.write_text(change.pop(f"log{logs.index(log) + 1}", ""))
    path = tmp_path / "chaos.yaml"
    path.write_text(yaml.safe_dump(SIZES["smoke"].sweep_file(timeout_s=30)))
    fields = dict(spec=load_checked_sweep(path), results=tmp_path / "sweep",
                  choice=choose_launcher("local"), events=events, finished_before={},
                  commits=["a", "a", "a"], logs=logs, final_code=0,
                  final_left="0 processes, 0 namespaces, 0 qdiscs", timeout_s=30.0,
                  strict=True)
    return After(**{**fields, **change})


def _faults(after: After) -> list[str]:
    return [p for p in check_sweep_after(after) if "not complete at the end" not in p]


def test_each_fault_is_held_to_what_the_harness_promises(tmp_path):
    events = [
        Event("worker killed (kill -9 of rank 1, pid 5)", 1, "c1", 3.0,
              "failed: rank 1 exited with code -9", left="0 of its workers running"),
        Event("link down (ip -n x link set y down)", 1, "c2", 9.0,
              "failed: timeout after 30 s; ranks [0, 1] still running", down_s=35.0,
              left="0 of its workers running; the link up again (the driver)"),
        Event("harness killed (kill -9 of pid 7)", 1, "c3", 50.0, "nothing",
              left_detail={"at_deadline": {"processes": [], "namespaces": [], "qdiscs": []}}),
        Event("metrics.csv truncated between runs (10 -> 5 bytes)", 0, "c4", 51.0, ""),
        Event("results folder full (64 KiB filler)", 2, "c5", 60.0, "nothing",
              left="0 processes, 0 namespaces, 0 qdiscs"),
    ]
    second = ("x: took over the lock left by pid 7\n"
              "measure c4 again: unreadable: c4/metrics.csv: 5 bytes\n")
    assert _faults(_after(tmp_path, events, log2=second)) == []
    broken = [
        Event("worker killed (kill -9 of rank 1, pid 5)", 1, "c1", 3.0, "ok",
              left="1 of its workers running"),
        Event("link down (ip -n x link set y down)", 1, "c2", 9.0, "failed: rank 0 exited",
              down_s=20.0),
        Event("harness killed (kill -9 of pid 7)", 1, "c3", 50.0, "nothing", left="2 left",
              left_detail={"at_deadline": {"processes": ["pid 9"], "namespaces": [],
                                           "qdiscs": []}}),
        Event("meta.json truncated between runs (10 -> 5 bytes)", 0, "c4", 51.0, ""),
        Event("results folder full (64 KiB filler)", 2, "c5", 60.0, "nothing",
              left="1 processes, 0 namespaces, 0 qdiscs"),
    ]
    problems = "\n".join(_faults(_after(tmp_path, broken, final_code=1,
                                        final_left="1 processes, 0 namespaces, 0 qdiscs")))
    for expected in ("c1: the cell recorded 'ok', not a failed rank",
                     "c1: 1 of its workers running after it was recorded",
                     "c2: the cell recorded 'failed: rank 0 exited', not a timeout",
                     "c2: down 20.0 s, not longer than the cell's timeout 30 s",
                     "c3: the resumed run did not take over its lock",
                     "c3: left before any cleanup: 2 left",
                     "c4: the resumed run did not measure it again",
                     "c5: the stopped run left 1 processes",
                     "the last harness run exited 1",
                     "left after the last run: 1 processes"):
        assert expected in problems, problems


@pytest.mark.slow
@pytest.mark.netns
@pytest.mark.workers
@pytest.mark.timeout(1800)  # 11 min 45 s on 2 cores at a load of 15-20
def test_the_smoke_chaos_sweep_keeps_every_promise(tmp_path):
    out = tmp_path / "chaos"
    lines: list[str] = []
    code = run_chaos(out, SIZES["smoke"], seed=1, strict=STRICT, echo=lines.append)
    report = json.loads((out / "chaos.json").read_text())
    print("\n".join(lines))  # the table, in the test's output
    assert code == 0 and report["problems"] == [], report["problems"]
    kinds = [e["fault"].split(" (")[0] for e in report["events"]]
    assert kinds == ["worker killed", "link down", "harness killed",
                     "metrics.csv truncated between runs", "meta.json truncated between runs",
                     "results folder full", "resumed sweep to its end"]
    assert not (out / "results").is_mount() and not any((out / "results").iterdir())
    assert len([d for d in (out / "results-kept").iterdir() if (d / "meta.json").is_file()]) \
        == 12
