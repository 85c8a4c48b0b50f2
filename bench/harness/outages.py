"""Cells on links that change: the timeouts that let a worker survive a scenario's
outages, what an outage cost a run, and the words a failed cell uses for an outage.

    config = survivable(config, scenario, n_hosts)    # dist.timeout_s raised where needed
    block = schedule_block(config, scenario, n_hosts, launcher_record, metrics_paths)

Note [surviving an outage]: while a link is down, TCP retransmits into it with doubling
timeouts (200 ms, 400 ms, ... capped at 120 s), so after an outage of S seconds the next
retransmission, and with it the connection, comes back up to about S seconds later
(measured on netns: a 2 s outage cost 1.3 s more, bench/launch tests). A worker waits for
every p2p message and collective at most `dist.timeout_s` (aqsgd.train.config.DistConfig:
torch.distributed's process-group timeout and the p2p wait): a wait that spans an outage
lasts up to 2 S plus a step, so a cell whose scenario has outages gets
`dist.timeout_s >= 2 x longest outage + OUTAGE_SLACK_S`, and its cell timeout grows by
2 x the outages that fall inside it. The limit is scenario_file.MAX_OUTAGE_S (300 s):
beyond it, the kernel's own give-up on an unacknowledged connection (tcp_retries2, about
15 minutes) comes near. A cell that still fails names the outages that happened before.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable
from pathlib import Path

from aqsgd.train.config import RunConfig
from bench.net.scenario import NetworkScenario
from bench.net.scenario_file import MAX_OUTAGE_S
from bench.results.files import read_rank_jsonl

__all__ = ["OUTAGE_SLACK_S", "cell_timeout_s", "outage_note", "outages_applied",
           "schedule_block", "steps_beyond_median_s", "survivable", "survivable_timeout_s"]

OUTAGE_SLACK_S = 30.0  # a step's work and a rank's start-up beside the outage's own wait


def survivable_timeout_s(outage_s: float) -> float:
    """The process-group timeout that survives an outage of `outage_s` (the Note)."""
    return 2.0 * outage_s + OUTAGE_SLACK_S if outage_s > 0 else 0.0


def survivable(config: RunConfig, scenario: NetworkScenario, n_hosts: int) -> RunConfig:
    """`config` with dist.timeout_s raised to survive the scenario's longest outage
    (unchanged when it already does, or the scenario has none)."""
    need = survivable_timeout_s(scenario.longest_outage_s(n_hosts))
    if need <= config.dist.timeout_s:
        return config
    return dataclasses.replace(config, dist=dataclasses.replace(config.dist, timeout_s=need))


def cell_timeout_s(timeout_s: float, scenario: NetworkScenario, n_hosts: int) -> float:
    """A cell's wall-clock limit with 2 x every outage that starts inside it added."""
    lost = sum(2.0 * length for _, _, spec in scenario.scheduled_links(n_hosts)
               for _, length in spec.schedule.outages(timeout_s))
    return timeout_s + lost


def outages_applied(schedule_run: dict | None) -> list[dict]:
    """The outages a schedule run applied (the launcher record's schedule `run`): per
    down change, its link, when it went down and when back up (s after the start; None:
    still down when the run stopped)."""
    if not schedule_run:
        return []
    out, open_ = [], {}
    for c in schedule_run["changes"]:
        link = (c["src"], c["dst"])
        if "error" in c:
            continue  # not applied
        if c["down"]:
            open_[link] = {"src": c["src"], "dst": c["dst"], "down_s": c["applied_s"],
                           "up_s": None}
            out.append(open_[link])
        elif link in open_:
            open_.pop(link)["up_s"] = c["applied_s"]
    return out


def outage_note(outages: list[dict], dist_timeout_s: float) -> str:
    """What a failed cell says of the outages before it failed ('' without any)."""
    if not outages:
        return ""
    said = ", ".join(f"link {o['src']} -> {o['dst']} down at {o['down_s']:.1f} s"
                     + ("" if o["up_s"] is None else f" for {o['up_s'] - o['down_s']:.1f} s")
                     for o in outages)
    return (f" (during the run's outages: {said}; dist.timeout_s {dist_timeout_s:g} s "
            f"survives outages up to {max(0.0, (dist_timeout_s - OUTAGE_SLACK_S) / 2):g} s, "
            f"at most {MAX_OUTAGE_S:g} s)")


def steps_beyond_median_s(paths: Iterable[Path]) -> float | None:
    """Time the measured steps took beyond the median step: per step the slowest rank's
    step_time_s, summed over steps of (t - median) where positive. On a scenario whose
    only change is an outage this is the time the outage cost the run."""
    slowest: dict[int, float] = {}
    for path in paths:
        for rec in read_rank_jsonl(path):
            if rec.get("kind") == "train" and not rec["warmup"]:
                slowest[rec["step"]] = max(slowest.get(rec["step"], 0.0), rec["step_time_s"])
    if not slowest:
        return None
    median = statistics.median(slowest.values())
    return sum(max(0.0, t - median) for t in slowest.values())


def schedule_block(config: RunConfig, scenario: NetworkScenario, n_hosts: int,
                   schedule_run: dict | None, metrics_paths: list[Path]) -> dict | None:
    """meta.json's `schedule` block of a cell whose scenario has schedules (None
    otherwise): the outages applied, the process-group timeout and the outage it
    survives, and the steps' time beyond the median (`time_lost_s`)."""
    if not scenario.scheduled_links(n_hosts):
        return None
    present = [p for p in metrics_paths if p.is_file()]
    return {
        "outages": outages_applied(schedule_run),
        "longest_outage_s": scenario.longest_outage_s(n_hosts),
        "dist_timeout_s": config.dist.timeout_s,
        "survivable_outage_s": max(0.0, (config.dist.timeout_s - OUTAGE_SLACK_S) / 2),
        "time_lost_s": steps_beyond_median_s(present) if present else None,
        "changes_applied": 0 if not schedule_run else len(schedule_run["changes"]),
    }
