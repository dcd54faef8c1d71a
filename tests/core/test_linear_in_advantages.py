"""``LossSpec.linear_in_advantages`` is what the loss computes: for a declared-linear loss,
scaling the advantages by c > 0 scales the loss and its gradient by c (what lets SkyRL fold
the batch normalisation into pre-scaled advantages); for the others it does not."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from gmpo_plugins import BatchInfo, list_losses

from .batches import complete, random_batch

SCALE = 0.125  # SkyRL divides by a count: 1/8 as for N = 8 sequences


def _loss_and_grad(spec, inputs, params):
    log_probs = inputs.log_probs.detach().clone().requires_grad_()
    batch = dataclasses.replace(inputs, log_probs=log_probs)
    loss = spec(batch, BatchInfo(global_batch_size=6, global_num_tokens=30), **params).loss
    (grad,) = torch.autograd.grad(loss, log_probs)
    return float(loss.detach()), grad


def _params(spec):
    # clip_cov: a covariance band the unscaled batch reaches, so the thresholds select tokens
    return {"clip_cov_lb": 0.0, "clip_cov_ub": 0.5, "clip_cov_ratio": 0.5} if "clip_cov_lb" in spec.defaults else {}


@pytest.mark.parametrize("spec", list_losses(), ids=lambda spec: spec.name)
def test_linear_in_advantages_is_what_the_loss_computes(spec):
    inputs = complete(random_batch(seed=3, spread=0.4, token_advantages=not spec.sequence_level), spec.name)
    scaled = dataclasses.replace(inputs, advantages=inputs.advantages * SCALE)
    params = _params(spec)
    loss, grad = _loss_and_grad(spec, inputs, params)
    got, got_grad = _loss_and_grad(spec, scaled, params)
    linear = abs(got - SCALE * loss) <= 1e-12 * max(1.0, abs(loss)) and torch.allclose(
        got_grad, SCALE * grad, rtol=1e-10, atol=1e-14
    )
    assert linear == spec.linear_in_advantages, (spec.name, got, SCALE * loss)


def test_the_non_linear_losses_are_named():
    assert sorted(spec.name for spec in list_losses() if not spec.linear_in_advantages) == [
        *("clip_cov", "dro", "kl_cov", "prime_ipo", "prime_rl", "real")
    ]
