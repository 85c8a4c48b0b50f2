"""The starting checkpoints shipped with the repository (aqsgd.model.shipped): used where
the cache has none, and rebuilt bit for bit by their recipe."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from aqsgd.model.config import PRESETS
from aqsgd.model.pretrain import SHIPPED_DIR, starting_checkpoint_path
from aqsgd.model.shipped import _tensor_difference, check, check_one


def test_tiny4_is_shipped_and_used_where_the_cache_has_none(tmp_path):
    path, built = starting_checkpoint_path(PRESETS["tiny-4"], tmp_path / "cache")
    assert not built
    assert path.parent == SHIPPED_DIR and path.is_file()
    assert path.with_suffix(".json").is_file()
    assert not (tmp_path / "cache" / "checkpoints").exists()


def test_a_recipe_that_names_another_file_is_reported(tmp_path):
    shipped = next(SHIPPED_DIR.glob("*.pt"))
    renamed = tmp_path / "gpt2-0000000000000000-tok0-pre0.pt"
    shutil.copyfile(shipped, renamed)
    shutil.copyfile(shipped.with_suffix(".json"), renamed.with_suffix(".json"))
    problem = check_one(renamed, log=lambda _: None)
    assert problem is not None and f"now names {shipped.name}" in problem


def test_a_missing_or_broken_recipe_names_the_file(tmp_path):
    pt = tmp_path / "gpt2-x.pt"
    torch.save({"w": torch.zeros(1)}, pt)
    with pytest.raises(ValueError, match=r"gpt2-x\.pt: its recipe gpt2-x\.json is missing"):
        check_one(pt, log=lambda _: None)
    pt.with_suffix(".json").write_text(json.dumps({"model": {"n_layer": 0}}))
    with pytest.raises(ValueError, match=r"gpt2-x\.json: not a checkpoint recipe"):
        check_one(pt, log=lambda _: None)


def test_a_difference_is_named_by_tensor(tmp_path):
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    torch.save({"w": torch.zeros(3), "v": torch.ones(2)}, a)
    torch.save({"w": torch.tensor([0.0, 0.5, 0.0]), "v": torch.ones(2)}, b)
    assert _tensor_difference(a, b) == "1 of 2 tensors differ, most w (max |diff| 0.5)"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_every_shipped_checkpoint_is_rebuilt_bit_for_bit_by_its_recipe():
    results = check(log=lambda _: None)
    assert results and all(problem is None for problem in results.values()), results
