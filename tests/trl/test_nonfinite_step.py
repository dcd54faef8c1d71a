"""What TRL's trainer does with a non-finite input to the registry loss, run rather than read:
one real ``RegistryGRPOTrainer.train()`` step in float32 whose batch has a NaN advantage on a
row with valid tokens. The loss and its gradient are NaN (the non-finite rule), the logged
grad norm is NaN, and the transformers ``Trainer`` under TRL steps on it: every parameter
becomes NaN (it skips a step only under fp16's grad scaler; docs/api.md). That is every call
after the first of each loss in a process (``GMPO_PLUGINS_VALIDATE=never`` here): the first,
value-checked call (or every call with ``always``) and ``GMPO_PLUGINS_NONFINITE=raise`` stop the
step at the loss call instead, naming the input, the parameters untouched."""

from __future__ import annotations

import math

import pytest
import torch

from gmpo_plugins.adapters.trl import RegistryGRPOTrainer
from gmpo_plugins.core import validation

from .tiny import count_digits_reward, grpo_config


class NaNAdvantageTrainer(RegistryGRPOTrainer):
    """Stand-in for a corrupted batch (a reward pipeline that produced a NaN): after TRL has
    computed the advantages, the row with the most completion tokens gets a NaN advantage."""

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        row = int(output["completion_mask"].sum(-1).argmax())
        assert int(output["completion_mask"][row].sum()) > 0
        output["advantages"] = output["advantages"].clone()
        output["advantages"][row] = float("nan")
        return output


def _trainer(model_dir, tmp_path, tokenizer, prompts, loss="gmpo") -> RegistryGRPOTrainer:
    config = grpo_config(tmp_path, max_steps=1, num_iterations=1, per_device_train_batch_size=2)
    return NaNAdvantageTrainer(model_dir, count_digits_reward, config, prompts, processing_class=tokenizer, loss=loss)


@pytest.mark.parametrize("loss", ["gmpo", "grpo"])
def test_trls_trainer_steps_on_a_nan_gradient(loss, model_dir, tmp_path, tokenizer, prompts, monkeypatch):
    monkeypatch.setenv("GMPO_PLUGINS_VALIDATE", "never")  # as every call after a loss's first in a process
    trainer = _trainer(model_dir, tmp_path, tokenizer, prompts, loss)
    assert all(bool(torch.isfinite(p).all()) for p in trainer.model.parameters())
    trainer.train()
    (step,) = [entry for entry in trainer.state.log_history if "grad_norm" in entry]
    assert math.isnan(step["grad_norm"])
    poisoned = [name for name, p in trainer.model.named_parameters() if not bool(torch.isfinite(p).all())]
    assert len(poisoned) == len(list(trainer.model.parameters()))  # the step was taken, on NaN


@pytest.mark.parametrize(
    ("validate", "raise_mode", "message"),
    [
        ("always", False, r"^advantages: expected finite values at valid \(mask=True\) positions"),
        ("never", True, r"^advantages: nan at row \d+, column \d+, a valid \(mask=True\) position"),
    ],
    ids=["value-check", "raise-mode"],
)
def test_a_check_stops_the_step_naming_the_input(
    validate, raise_mode, message, model_dir, tmp_path, tokenizer, prompts, monkeypatch
):
    monkeypatch.setenv("GMPO_PLUGINS_VALIDATE", validate)
    monkeypatch.setitem(validation._NONFINITE_MODE, "raise", raise_mode)  # GMPO_PLUGINS_NONFINITE, read once
    trainer = _trainer(model_dir, tmp_path, tokenizer, prompts)
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    with pytest.raises(ValueError, match=message):
        trainer.train()
    assert all(torch.equal(p.detach(), before[name]) for name, p in trainer.model.named_parameters())
