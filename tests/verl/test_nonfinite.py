"""A NaN advantage at a valid token, through verl's own actor loss call site (``ppo_loss``, as its
FSDP engine calls it: tests/verl/engine.py). On the default path (``GMPO_PLUGINS_VALIDATE=first``)
the first call of a loss in a process checks values and raises naming the input;
on every later call (here forced with ``never``) the registry's rule holds: the loss and the
gradient are NaN, so verl's engine, which skips the optimiser step on a non-finite grad norm,
skips it (run in verl's trainer: tests/verl_e2e/test_other_runs.py)."""

from __future__ import annotations

import math

import pytest
import torch

from gmpo_plugins.adapters import _common

from . import engine

# registry losses (verl's own gspo and cispo keep their names)
LOSS_MODES = ["gmpo", "grpo", "dapo", "gmpo_plugins.gspo", "gmpo_plugins.cispo"]


@pytest.fixture
def nan_batch(rollout):
    """The rollout with the advantage of row 0's first response token NaN."""
    td = rollout.td.clone()
    td["advantages"][0, 0] = float("nan")
    assert bool(td["response_mask"][0, 0])  # a valid position
    return engine.engine_batch(td)


@pytest.mark.parametrize("loss_mode", LOSS_MODES)
def test_the_first_call_raises_naming_the_input(model, actor_config, nan_batch, monkeypatch, loss_mode):
    monkeypatch.delenv(_common.VALIDATE_ENV, raising=False)
    monkeypatch.setattr(_common, "_value_checked", set())  # this process has not called the loss yet
    with pytest.raises(ValueError, match=r"^advantages: expected finite values at valid \(mask=True\) positions"):
        engine.train_step(model, actor_config(loss_mode), nan_batch, 1)


@pytest.mark.parametrize("loss_mode", LOSS_MODES)
def test_unchecked_the_loss_and_every_gradient_entry_are_nan(model, actor_config, nan_batch, monkeypatch, loss_mode):
    """Forced non-default path: ``GMPO_PLUGINS_VALIDATE=never`` (the state of every call of a process
    after its first)."""
    monkeypatch.setenv(_common.VALIDATE_ENV, "never")
    step = engine.train_step(model, actor_config(loss_mode), nan_batch, 1)
    assert math.isnan(step.loss)
    assert math.isnan(float(torch.linalg.vector_norm(step.grad)))  # what verl's clip_grad_norm_ returns
