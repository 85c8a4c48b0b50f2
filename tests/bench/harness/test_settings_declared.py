"""Each setting of the worker's config has one declaration with one default
(aqsgd.train.settings), and the harness's Workload uses the same one."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from aqsgd.model.config import ModelConfig
from aqsgd.train.config import DataConfig, DistConfig, PipelineConfig, RunConfig, TrainConfig
from bench.harness.workload import Workload
from specfile import declaration, declared_default, description

SECTIONS = (PipelineConfig, TrainConfig, DataConfig, DistConfig)
# The worker's field -> the Workload field of the same meaning (flat names in sweep files)
WORKLOAD_NAME = {"data.path": "data_path", "dist.timeout_s": "dist_timeout_s"}
# Test hooks of the worker (not settings: never in a sweep, docs say so)
TEST_HOOKS = {"fail_at_step", "fail_rank", "dump_grads"}


def _section(cls: type) -> str:
    return next(f.name for f in dataclasses.fields(RunConfig) if f.type == cls.__name__)


@pytest.mark.parametrize("cls", SECTIONS, ids=lambda c: c.__name__)
def test_every_field_of_the_worker_config_has_one_declaration_and_its_default(cls):
    workload = {f.name: f for f in dataclasses.fields(Workload)}
    for f in dataclasses.fields(cls):
        if f.name in TEST_HOOKS:
            continue
        decl = declaration(cls, f.name)
        assert decl is not None, f"{cls.__name__}.{f.name} is not a declared setting"
        assert description(decl), f"{cls.__name__}.{f.name} has no help line"
        assert f.default == declared_default(decl), f"{cls.__name__}.{f.name}"
        name = WORKLOAD_NAME.get(f"{_section(cls)}.{f.name}", f.name)
        if name in workload:  # the harness's field of the same meaning: the same declaration
            assert declaration(Workload, name) is decl, f"Workload.{name}"
            assert workload[name].default == f.default, f"Workload.{name}"


def test_the_settings_both_sides_share_are_the_ones_they_used_to_disagree_on():
    shared = {name for name in ("micro_batch_size", "lr", "init_from", "eval_samples",
                                "precision", "schedule", "seed", "threads")
              if declaration(Workload, name) is not None}
    assert shared == {"micro_batch_size", "lr", "init_from", "eval_samples", "precision",
                      "schedule", "seed", "threads"}
    assert Workload().micro_batch_size == PipelineConfig().micro_batch_size == 16
    assert Workload().lr == TrainConfig().lr
    assert Workload().init_from == TrainConfig().init_from == "pretrained"


def test_measured_and_total_steps_are_two_names():
    assert "total_steps" in {f.name for f in dataclasses.fields(TrainConfig)}
    assert "steps" not in {f.name for f in dataclasses.fields(TrainConfig)}
    hints = typing.get_type_hints(Workload, include_extras=True)
    assert "measured" in description(hints["steps"])


def test_the_model_shape_is_declared_once_and_offered_by_the_workload():
    hints = typing.get_type_hints(ModelConfig, include_extras=True)
    workload = typing.get_type_hints(Workload, include_extras=True)
    for name in ("n_layer", "n_embd", "n_head", "vocab_size", "seq_len", "n_inner"):
        assert description(workload[name]).startswith(description(hints[name])), name
        assert Workload().__getattribute__(name) is None  # the preset's
