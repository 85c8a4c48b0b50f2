"""The performance model on replayed cells and shared host wires, and the contention term
of a CPU profile (docs/performance-model.md, "Replayed cells", "Contention")."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from aqsgd.train.replay import ComputeConfig, StageTimes
from bench.harness.paper import model_configs
from bench.net.placement import place
from bench.net.scenario import load_scenario
from bench.perfmodel import contention as contention_module
from bench.perfmodel.contention import fit_contention
from bench.perfmodel.predict import contended, predict
from bench.perfmodel.profile import ContentionProfile, load_profile
from bench.perfmodel.sim import simulate, transfer_s
from bench.perfmodel.workload import HostWire, StageWork, step_workload
from specfile import SpecError
from tests.bench.perfmodel.test_sim import _profile, _work

WAITED = (StageTimes(0.030, 0.050, 0.004), StageTimes(0.030, 0.050, 0.004))


def _replayed(schedule: str = "gpipe"):
    config = model_configs("tiny", 2, 1, 16, 4, ["fp32"], schedule=schedule)["fp32"]
    compute = ComputeConfig(source="replay:cpu-2core", profile="cpu-2core", precision="fp32",
                            stages=WAITED)
    return dataclasses.replace(config, compute=compute)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_a_replayed_step_costs_exactly_the_times_its_stages_waited(schedule):
    """Not the profile's cut (cpu-2core's tiny in 2 stages is 9-14 ms a pass), and the
    waits share no core: on unlimited links the step is the bubble formula of the waits."""
    profile = load_profile("cpu-2core")
    work = step_workload(_replayed(schedule), place(load_scenario("loopback"), 2, 1), profile)
    assert work.replayed
    assert [(w.forward_s, w.backward_s, w.optimizer_s) for w in work.stage] == [
        (t.forward_s, t.backward_s, t.optimizer_s) for t in WAITED]
    step = predict(work, profile.replace(cores=1), cores=True).step_s
    S, M, (f, b, o) = 2, 4, dataclasses.astuple(WAITED[0])
    assert step == pytest.approx((M + S - 1) * (f + b) + o, rel=0.02)


def test_a_scenarios_downlink_cap_is_one_wire_for_every_link_into_the_host():
    scenario = load_scenario("nanogpt-200mbps-inbound")
    caps = [(c.host, c.uplink_mbit, c.downlink_mbit) for c in scenario.host_caps]
    config = model_configs("tiny-4", 4, 1, 16, 4, ["fp32"])["fp32"]
    work = step_workload(config, place(scenario, 4, 1), load_profile("cpu-2core"), caps)
    assert work.wires[(0, 1)] == (HostWire(1, "down", 200.0),)
    assert work.wires[(2, 1)] == (HostWire(1, "down", 200.0),)  # the same wire
    per_link = step_workload(config, place(scenario, 4, 1), load_profile("cpu-2core"))
    assert per_link.wires == {}


def test_two_links_into_one_capped_downlink_take_turns():
    """1F1B on 3 stages, transfers only: the middle host receives activations from stage 0
    and gradients from stage 2; on one downlink wire all 2 M of them take turns, so the
    step is at least 2 M transfers, and longer than with a wire per link."""
    M, nbytes, rate = 4, 1_000_000, 100.0
    one = transfer_s(nbytes, rate)
    work = _work(3, M, f=0.0, b=0.0, act=nbytes, grad=nbytes, rate=rate, schedule="1f1b")
    wire = HostWire(1, "down", rate)
    shared = work.replace(wires={(0, 1): (wire,), (2, 1): (wire,)})
    apart = simulate(work).step_s
    together = simulate(shared).step_s
    assert together >= 2 * M * one - 1e-9
    assert together > apart + one / 2
    # a slower wire than the link sets the rate of what passes it
    slow = work.replace(wires={(0, 1): (HostWire(1, "down", rate / 2),)})
    assert simulate(slow).step_s > apart + M * one / 2


def test_the_contention_factor_multiplies_compute_when_ranks_share_cores():
    term = ContentionProfile(base=0.1, per_rank=0.2, fitted_on="test")
    assert term.factor(1) == pytest.approx(1.1) and term.factor(4) == pytest.approx(1.7)
    profile = _profile(cores=2).replace(contention=term)
    work = _work(2, 4, f=0.01, b=0.02)
    plain = predict(work, _profile(cores=2)).step_s
    assert predict(work, profile).step_s == pytest.approx(plain * term.factor(2), rel=1e-9)
    # in situ (compute measured with every rank running) and replayed: no factor
    assert predict(work, profile, cores=False).step_s == pytest.approx(
        predict(work, _profile()).step_s)
    assert predict(work.replace(replayed=True), profile).step_s == pytest.approx(
        predict(work, _profile()).step_s)


def test_a_contention_term_needs_shared_cores_and_names_what_it_was_fitted_on():
    term = ContentionProfile(base=0.1, per_rank=0.2, fitted_on="test")
    with pytest.raises(SpecError, match="contention"):
        _profile(cores=None).replace(contention=term)
    with pytest.raises(SpecError, match="fitted_on"):
        ContentionProfile(base=0.1, per_rank=0.2, fitted_on=" ")
    with pytest.raises(SpecError, match="per_rank"):
        ContentionProfile(base=0.1, per_rank=-0.2, fitted_on="x")


def test_the_shipped_cpu_profile_has_a_fitted_contention_term():
    profile = load_profile("cpu-2core")
    assert profile.contention is not None and profile.contention.factor(4) > 1.0
    assert "cells" in profile.contention.fitted_on


def test_the_fit_recovers_the_factor_that_made_the_step_times(monkeypatch):
    """Cells of 2 and 4 ranks whose measured step is the model's at factor 1.5 and 1.9
    (base 0.3, per_rank 0.2): the fit finds both."""
    profile = _profile(cores=2)
    works = {2: _work(2, 4, f=0.01, b=0.02), 4: _work(4, 4, f=0.01, b=0.02)}
    truth = ContentionProfile(0.3, 0.2, "truth")
    cells = [SimpleNamespace(ranks=n, step_s=predict(contended(w, truth.factor(n)),
                                                     profile).step_s)
             for n, w in works.items()]
    monkeypatch.setattr(contention_module, "step_workload_of", lambda c, p: works[c.ranks])
    monkeypatch.setattr(contention_module, "compute_source", lambda c: "real")
    fit = fit_contention(cells, profile, "two synthetic cells")
    assert (fit.base, fit.per_rank) == pytest.approx((0.3, 0.2), abs=0.011)
    assert fit.fitted_on == "two synthetic cells"
    # one rank count cannot tell base from per_rank: base held at 0
    one = fit_contention(cells[1:], profile, "one")
    assert one.base == 0.0 and one.factor(4) == pytest.approx(1.9, abs=0.02)


def test_the_fit_refuses_replayed_cells_only(monkeypatch):
    monkeypatch.setattr(contention_module, "compute_source", lambda c: "replay:cpu-2core")
    with pytest.raises(ValueError, match="no cell with real compute"):
        fit_contention([SimpleNamespace()], _profile(cores=2), "x")
    with pytest.raises(ValueError, match="cores null"):
        fit_contention([], _profile(cores=None), "x")


def test_stage_work_scaled_keeps_parameters():
    assert StageWork(1.0, 2.0, 3.0, 7).scaled(2.0) == StageWork(2.0, 4.0, 6.0, 7)
    assert np.isclose(contended(_work(), 1.0).stage[0].forward_s, _work().stage[0].forward_s)


def test_profile_refit_flags_are_checked_before_any_work(capsys):
    from bench.__main__ import main

    assert main(["profile", "--keep-comm", "--cells", "results"]) == 2
    assert "--keep-comm keeps the comm of the profile --from names" in capsys.readouterr().err
    assert main(["profile", "--from", "cpu-2core"]) == 2
    assert "name the --cells to refit it from" in capsys.readouterr().err
