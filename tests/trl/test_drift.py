"""TRL drift: a GRPOTrainer that does not back-propagate the registry loss is refused on the
first training step, naming the TRL version, before its backward pass (so before any weight
changes, also where the optimizer steps inside ``accelerator.backward``, as DeepSpeed's does).

The drift is simulated in TRL's own class (``trl.GRPOTrainer.compute_loss`` replaced for the
test), in real ``trainer.train()`` runs on CPU:

    routed around   compute_loss never calls ``_compute_loss`` and trains TRL's own loss
                    (what TRL releases before 1.x did for ``use_liger_kernel``)
    other tensor    compute_loss calls ``_compute_loss`` (the registry loss is computed and
                    logged) but returns TRL's own loss, which is what gets back-propagated
"""

from __future__ import annotations

import pytest
import torch
import trl
from trl import GRPOTrainer

from gmpo_plugins.adapters.trl import RegistryGRPOTrainer
from gmpo_plugins.adapters.upstream import TESTED, UpstreamDriftError

from .tiny import count_digits_reward, grpo_config

TRL_OWN_LOSS = GRPOTrainer._compute_loss  # TRL's own loss (the method the adapter overrides)


def routed_around(self, model, inputs, return_outputs=False, num_items_in_batch=None):
    return TRL_OWN_LOSS(self, model, inputs)


def other_tensor(self, model, inputs, return_outputs=False, num_items_in_batch=None):
    self._compute_loss(model, inputs)
    return TRL_OWN_LOSS(self, model, inputs)


def _trainer(model_dir, tmp_path, tokenizer, prompts, **config):
    return RegistryGRPOTrainer(
        model_dir,
        count_digits_reward,
        grpo_config(tmp_path, max_steps=2, **config),
        prompts,
        processing_class=tokenizer,
        loss="gmpo",
    )


@pytest.mark.parametrize(
    ("drift", "what"),
    [
        (routed_around, "GRPOTrainer.compute_loss never called RegistryGRPOTrainer._compute_loss"),
        (other_tensor, "the tensor TRL back-propagates does not depend on the registry loss"),
    ],
)
def test_a_loss_routed_around_the_registry_is_refused_naming_the_version(
    drift, what, monkeypatch, model_dir, tmp_path, tokenizer, prompts
):
    trainer = _trainer(model_dir, tmp_path, tokenizer, prompts, epsilon=0.4)
    monkeypatch.setattr(GRPOTrainer, "compute_loss", drift)
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    with pytest.raises(UpstreamDriftError) as error:
        trainer.train()
    message = str(error.value)
    assert message.startswith(f"gmpo_plugins: in the first training step of trl {trl.__version__}, {what}")
    assert "TRL's own loss would train instead of the registry loss 'gmpo'" in message
    assert f"trl{TESTED['trl'].specifier}" in message
    assert all(torch.equal(p.detach(), before[name]) for name, p in trainer.model.named_parameters())
    print(message)


def step_inside_backward(trainer) -> None:
    """Stands in for accelerate's DeepSpeed path, which needs DeepSpeed (not installed here, and
    accelerate selects it only for GPU-like devices): ``Accelerator.backward`` there runs
    ``DeepSpeedEngineWrapper.backward``, the engine's backward pass and then, at the accumulation
    boundary, ``engine.step()``, so the update is applied inside ``accelerator.backward``. Here the
    trainer's own optimizer steps inside it the same way."""
    backward = trainer.accelerator.backward

    def backward_then_step(loss, **kwargs):
        backward(loss, **kwargs)
        if trainer.accelerator.sync_gradients:
            trainer.optimizer.step()

    trainer.accelerator.backward = backward_then_step


@pytest.mark.parametrize("drift", [routed_around, other_tensor])
def test_the_refusal_comes_before_an_update_applied_inside_backward(
    drift, monkeypatch, model_dir, tmp_path, tokenizer, prompts
):
    """gradient_accumulation_steps=1: every backward pass is at the boundary, so an engine that
    steps inside ``accelerator.backward`` would apply the first update of TRL's own loss before
    a check made after the backward pass. The proof decides before the backward pass: no weight
    changes."""
    trainer = _trainer(model_dir, tmp_path, tokenizer, prompts, epsilon=0.4, optim="sgd")
    step_inside_backward(trainer)
    monkeypatch.setattr(GRPOTrainer, "compute_loss", drift)
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    with pytest.raises(UpstreamDriftError, match="Refused before the backward pass and any optimizer step"):
        trainer.train()
    assert all(torch.equal(p.detach(), before[name]) for name, p in trainer.model.named_parameters())
    assert all(p.grad is None or not p.grad.any() for p in trainer.model.parameters())  # no backward pass ran


@pytest.mark.parametrize("config", [{}, {"gradient_accumulation_steps": 2}])
def test_the_installed_trl_back_propagates_the_registry_loss(config, model_dir, tmp_path, tokenizer, prompts):
    trainer = _trainer(model_dir, tmp_path, tokenizer, prompts, epsilon=0.4, **config)
    step_inside_backward(trainer)
    stand_in = trainer.accelerator.backward
    trainer.train()
    assert trainer._loss_proven and trainer.state.global_step == 2
    assert trainer.accelerator.backward is stand_in  # the proof's interception ended with the first step
