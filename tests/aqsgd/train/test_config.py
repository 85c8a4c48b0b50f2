"""The run config's evaluation, dropout-mask, TensorBoard and second-moment settings."""

import pytest

from aqsgd.train.config import ConfigError, config_from_dict


def test_new_settings_default_to_the_reference_behaviour_and_round_trip():
    cfg = config_from_dict({})
    assert (cfg.train.eval_at_start, cfg.train.dropout_masks, cfg.output.tensorboard) == (
        False, "random", False)  # fmt: skip
    assert cfg.grad.v_floor == 0.01
    changed = config_from_dict({"train": {"eval_at_start": True, "dropout_masks": "per_sample"},
                                "output": {"tensorboard": True},
                                "grad": {"mode": "qadam", "v_floor": 0}})  # fmt: skip
    assert changed.train.dropout_masks == "per_sample" and changed.grad.v_floor == 0
    assert config_from_dict(changed.to_dict()) == changed


@pytest.mark.parametrize(
    "data,message",
    [
        ({"train": {"dropout_masks": "per_batch"}},
         r"train\.dropout_masks: expected one of random\|per_sample, got 'per_batch'"),
        ({"train": {"eval_at_start": True, "eval_batches": 0}},
         r"train: eval_at_start must be false when eval_batches is 0"),
        ({"train": {"eval_at_start": "yes"}}, r"train\.eval_at_start: expected true/false"),
        ({"output": {"tensorboard": 1}}, r"output\.tensorboard: expected true/false, got 1"),
        ({"grad": {"v_floor": -1.0}}, r"grad: .*v_floor must be a finite number >= 0, got -1"),
    ],
)
def test_bad_values_name_the_key(data, message):
    with pytest.raises(ConfigError, match=message):
        config_from_dict(data)
