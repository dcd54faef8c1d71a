"""Rollout IS weights on sequence-level losses and the clamped k3 KL, against verl's own
functions: the core's defaults reproduce verl's geo_mean and gspo gradients, and
``kl_clamp=10`` reproduces verl's low_var_kl."""

from __future__ import annotations

import math

import pytest
import torch
from verl.trainer.ppo.core_algos import kl_penalty

from gmpo_plugins import BatchInfo, LossInputs, get_loss
from gmpo_plugins.compare.backends.base import PolicyLossCall
from gmpo_plugins.compare.parity import harness
from gmpo_plugins.compare.parity.references import verl_geo_mean, verl_gspo


def _grad(backend, name, log_probs, old, adv, mask, weights, hparams):
    log_probs = log_probs.clone().requires_grad_(True)
    loss, _ = backend.policy_loss(
        PolicyLossCall(
            log_probs=log_probs,
            old_log_probs=old,
            advantages=adv,
            mask=mask,
            loss_name=name,
            hparams=hparams,
            batch_info=BatchInfo(global_batch_size=int(mask.shape[0]), global_num_tokens=int(mask.sum())),
            rollout_is_weights=weights,
        )
    )
    (grad,) = torch.autograd.grad(loss, log_probs)
    return float(loss.detach()), grad


@pytest.mark.parametrize(
    "backend, name, loss, grad",
    [
        # one sequence, r = [0, 0], A = 1, w = [0.5, 1.5]
        # geo_mean: weight sqrt(0.5 * 1.5) = 0.8660: loss -0.8660, gradient -0.8660 / 2 = -0.4330 each
        (verl_geo_mean, "gmpo", -math.sqrt(0.75), [-math.sqrt(0.75) / 2] * 2),
        # gspo: value -1 * mean(w) = -1, token t gets -w_t / 2: [-0.25, -0.75]
        (verl_gspo, "gspo", -1.0, [-0.25, -0.75]),
    ],
)
def test_hand_example_verl_and_core_agree(backend, name, loss, grad):
    log_probs = torch.zeros(1, 2, dtype=torch.float64)
    args = (
        log_probs,
        log_probs.clone(),
        torch.ones(1, dtype=torch.float64),
        torch.ones(1, 2, dtype=torch.bool),
        torch.tensor([[0.5, 1.5]], dtype=torch.float64),
    )
    hparams = get_loss(name).resolve({})
    theirs = _grad(backend(), name, *args, hparams)
    from gmpo_plugins.compare.backends.base import CoreBackend

    ours = _grad(CoreBackend(), name, *args, hparams)
    for value, gradient in (theirs, ours):  # verl takes log(w + 1e-10): 4e-9 relative
        assert value == pytest.approx(loss, rel=1e-7)
        assert torch.allclose(gradient, torch.tensor([grad], dtype=torch.float64), rtol=1e-7)


@pytest.mark.parametrize("factory, name", [(verl_geo_mean, "gmpo"), (verl_gspo, "gspo")])
def test_parity_is_weights_case_matches_verl(factory, name):
    """On parity's is_weights case (near ratios, token weights in [0.2, 2]) the gradients of
    verl's geo_mean / gspo equal the core's (one micro-batch; the differences of the other
    cases, split and guard, are not in play)."""
    case = next(c for c in harness.parity_cases() if c.name == "is_weights")
    backend = factory()
    got = harness.evaluate(backend, name, case)
    base = harness.evaluate(harness.CoreBackend(), name, case)
    assert got.loss == pytest.approx(base.loss, rel=1e-6, abs=1e-7)
    assert float((got.grad - base.grad).abs().max()) <= 1e-6 * max(1.0, float(base.grad.abs().max()))
    # the other aggregations differ from verl: the knob matters on this case
    other = "arithmetic_mean" if name == "gmpo" else "geometric_mean"
    log_probs = case.log_probs.clone().requires_grad_(True)
    inputs = LossInputs(
        log_probs, case.old_log_probs, case.advantages, case.mask, rollout_is_weights=case.rollout_is_weights
    )
    out = get_loss(name)(inputs, BatchInfo(global_batch_size=8), rollout_is_aggregation=other)
    (grad,) = torch.autograd.grad(out.loss, log_probs)
    assert float((grad.double() - base.grad).abs().max()) > 1e-4


def test_kl_clamp_reproduces_verl_low_var_kl():
    """ref - new = d in {3, 0.5, -2}: verl's low_var_kl clamps k3 = e^d - d - 1 at 10 (e^3 - 4 = 16.09
    -> 10); the core's k3 with kl_clamp=10 gives the same per-token values and KL gradient."""
    new = torch.zeros(1, 3, dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[3.0, 0.5, -2.0]], dtype=torch.float64)
    theirs = kl_penalty(new, ref, "low_var_kl")
    assert theirs[0, 0].item() == 10.0
    mask = torch.ones(1, 3, dtype=torch.bool)
    inputs = LossInputs(new, new.detach(), torch.zeros(1, dtype=torch.float64), mask, ref_log_probs=ref)
    out = get_loss("grpo")(inputs, kl_beta=1.0, kl_clamp=10.0, reduction="token-mean")
    assert out.loss.item() == pytest.approx(theirs.mean().item(), rel=1e-12)
    (ours_grad,) = torch.autograd.grad(out.loss, new)
    (their_grad,) = torch.autograd.grad(theirs.mean(), new)
    assert torch.allclose(ours_grad, their_grad, rtol=1e-12)
    unclamped = get_loss("grpo")(inputs, kl_beta=1.0, reduction="token-mean")
    assert unclamped.loss.item() == pytest.approx((math.exp(3) - 4 + math.exp(0.5) - 1.5 + math.exp(-2) + 1) / 3)
