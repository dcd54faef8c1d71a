"""Our gmpo against TRL's own GMPO math (``trl_gmpo_reference`` runs the installed
``GMPOTrainer._compute_loss`` on given tensors), in float64.

Where semantics coincide (every row has a valid token, |log ratio| < 20) loss, gradient
and clip/KL metrics are equal (1e-12; 1e-7 for TRL's float32 clip counts). The differences
by design are pinned with numbers:
empty rows (loss value only), the overflow guard, the metrics each side logs, and the
MoE router loss that TRL's GMPOTrainer drops."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gmpo_plugins import BatchInfo, LossInputs, get_loss
from gmpo_plugins.compare.backends.base import PolicyLossCall
from gmpo_plugins.compare.backends.trl_gmpo import trl_gmpo_reference

from .tiny import micro_batch, run_loss

GMPO = get_loss("gmpo")


def _ours(log_probs, old, advantages, mask, eps_low, eps_high, beta=0.0, ref=None):
    batch = BatchInfo(dp_size=1, global_batch_size=log_probs.shape[0])  # TRL: mean over all B rows
    return GMPO(
        LossInputs(log_probs, old, advantages, mask, ref_log_probs=ref),
        batch,
        eps_low=eps_low,
        eps_high=eps_high,
        kl_beta=beta,
    )


def _loss_and_grad(out, log_probs):
    (grad,) = torch.autograd.grad(out.loss, log_probs)
    return out.loss.detach(), grad


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    batch=st.integers(1, 6),
    length=st.integers(1, 9),
    eps_low=st.floats(0.05, 1.0),
    eps_high=st.floats(0.05, 1.0),
    beta=st.sampled_from([0.0, 0.1]),
)
def test_equal_to_trl_gmpo_math_where_semantics_coincide(seed, batch, length, eps_low, eps_high, beta):
    generator = torch.Generator().manual_seed(seed)
    log_probs = (torch.randn(batch, length, generator=generator, dtype=torch.float64) - 2).requires_grad_()
    old = log_probs.detach() + 0.5 * torch.randn(batch, length, generator=generator, dtype=torch.float64)
    ref = log_probs.detach() + 0.5 * torch.randn(batch, length, generator=generator, dtype=torch.float64)
    advantages = torch.randn(batch, generator=generator, dtype=torch.float64)
    mask = torch.rand(batch, length, generator=generator) < 0.7
    mask[:, 0] = True  # every row has a valid token
    ref_or_none = ref if beta else None
    theirs = trl_gmpo_reference(
        log_probs, old, advantages, mask, eps_low=eps_low, eps_high=eps_high, beta=beta, ref_log_probs=ref_or_none
    )
    ours = _ours(log_probs, old, advantages, mask, eps_low, eps_high, beta, ref_or_none)
    loss_t, grad_t = _loss_and_grad(theirs, log_probs)
    loss_o, grad_o = _loss_and_grad(ours, log_probs)
    assert torch.allclose(loss_o, loss_t, rtol=0, atol=1e-12)
    assert torch.allclose(grad_o, grad_t, rtol=0, atol=1e-12)
    for name, value in theirs.metrics.items():  # TRL counts clipped tokens in float32
        assert abs(ours.metrics[name].item() - value.item()) <= 1e-7, name


def test_empty_row_changes_trl_loss_value_not_gradient():
    """A row without valid tokens (mask_truncated_completions): TRL adds -A_i * exp(0) / B to
    the loss value, we add nothing; both give it zero gradient and divide by the same B."""
    log_probs = torch.tensor(
        [[-1.0, -2.0], [-0.5, -0.7], [-1.5, -1.1], [-0.3, -0.9]], dtype=torch.float64, requires_grad=True
    )
    old = log_probs.detach() + torch.tensor([[0.1, -0.2], [0.0, 0.0], [0.3, 0.5], [-0.6, 0.2]], dtype=torch.float64)
    advantages = torch.tensor([1.0, 0.7, -0.5, 2.0], dtype=torch.float64)
    mask = torch.tensor([[1, 1], [0, 0], [1, 0], [1, 1]], dtype=torch.bool)
    loss_t, grad_t = _loss_and_grad(trl_gmpo_reference(log_probs, old, advantages, mask), log_probs)
    loss_o, grad_o = _loss_and_grad(_ours(log_probs, old, advantages, mask, 0.4, 0.4), log_probs)
    assert math.isclose((loss_t - loss_o).item(), -0.7 / 4, abs_tol=1e-15)
    assert torch.equal(grad_o[1], torch.zeros(2, dtype=torch.float64))
    assert torch.allclose(grad_o, grad_t, rtol=0, atol=1e-15)


def test_overflow_guard_bounds_the_unclipped_side():
    """A < 0 leaves r > 0 unclipped. TRL's weight grows as exp(r); ours clamps r to 20 and
    gives that token zero gradient. One token with r = 25 in a batch of two:
    TRL loss - ours = (e^25 - e^20) / 2, TRL gradient e^25 / 2, ours 0."""
    log_probs = torch.tensor([[-1.0, 0.0], [-2.0, -3.0]], dtype=torch.float64, requires_grad=True)
    old = torch.tensor([[-26.0, 0.0], [-2.1, -3.0]], dtype=torch.float64)
    advantages = torch.tensor([-1.0, 1.0], dtype=torch.float64)
    mask = torch.tensor([[1, 0], [1, 1]], dtype=torch.bool)
    loss_t, grad_t = _loss_and_grad(trl_gmpo_reference(log_probs, old, advantages, mask), log_probs)
    loss_o, grad_o = _loss_and_grad(_ours(log_probs, old, advantages, mask, 0.4, 0.4), log_probs)
    assert math.isclose((loss_t - loss_o).item(), (math.exp(25) - math.exp(20)) / 2, rel_tol=1e-12)
    assert math.isclose(grad_t[0, 0].item(), math.exp(25) / 2, rel_tol=1e-12)
    assert grad_o[0, 0].item() == 0.0
    assert torch.allclose(grad_o[1], grad_t[1], rtol=0, atol=1e-15)  # the other sequence agrees


def test_reference_requires_ref_log_probs_with_beta():
    log_probs = torch.zeros(1, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match="ref_log_probs: required when beta != 0"):
        trl_gmpo_reference(log_probs, log_probs, torch.ones(1, dtype=torch.float64), torch.ones(1, 2), beta=0.1)


def test_logged_metric_names_differ_as_documented(model_dir, tmp_path, tokenizer, prompts):
    """Ours adds policy_loss (TRL's GMPOTrainer logs none, trl #7005), the importance-ratio
    spread and the count of non-finite log ratios; TRL's per-sequence clip_ratio/low_min and
    high_max are not logged by us."""
    from trl.experimental.gmpo import GMPOConfig, GMPOTrainer

    from gmpo_plugins.adapters.trl import RegistryGRPOTrainer

    from .tiny import count_digits_reward, grpo_config

    common = dict(reward_funcs=count_digits_reward, train_dataset=prompts, processing_class=tokenizer)
    theirs = GMPOTrainer(model=model_dir, args=grpo_config(tmp_path / "t", GMPOConfig), **common)
    ours = RegistryGRPOTrainer(model=model_dir, args=grpo_config(tmp_path / "o", epsilon=0.4), loss="gmpo", **common)
    inputs = micro_batch(ours, seed=2)
    names_t, names_o = set(run_loss(theirs, inputs)[2]), set(run_loss(ours, inputs)[2])
    assert names_t - names_o == {"clip_ratio/low_min", "clip_ratio/high_max"}
    assert names_o - names_t == {
        "policy_loss",
        "ppo_kl",
        "log_ratio_min",
        "log_ratio_max",
        "seq_weight_min",
        "seq_weight_mean",
        "seq_weight_max",
        "nonfinite_tokens",
    }


def test_moe_router_aux_loss_is_added_unlike_trl_gmpo(moe_model_dir, tmp_path, tokenizer, prompts):
    """TRL's GMPOTrainer drops GRPOTrainer's MoE load-balancing term; we keep it, so on a
    Qwen2-MoE ours - TRL's GMPO = router_aux_loss_coef * aux_loss / G exactly."""
    from trl.experimental.gmpo import GMPOConfig, GMPOTrainer

    from gmpo_plugins.adapters.trl import RegistryGRPOTrainer

    from .tiny import count_digits_reward, grpo_config

    common = dict(reward_funcs=count_digits_reward, train_dataset=prompts, processing_class=tokenizer)
    theirs = GMPOTrainer(model=moe_model_dir, args=grpo_config(tmp_path / "t", GMPOConfig), **common)
    ours = RegistryGRPOTrainer(
        model=moe_model_dir, args=grpo_config(tmp_path / "o", epsilon=0.4), loss="gmpo", **common
    )
    inputs = micro_batch(ours, seed=7, spread=0.35)
    loss_o, _, metrics_o = run_loss(ours, inputs, accumulation=2)
    loss_t, _, metrics_t = run_loss(theirs, inputs, accumulation=2)
    assert "aux_loss" not in metrics_t and metrics_o["aux_loss"] > 0
    expected = ours.router_aux_loss_coef * metrics_o["aux_loss"] / 2
    assert abs((loss_o - loss_t).item() - expected) <= 1e-6 and expected > 1e-4


@pytest.mark.parametrize("splits", [1, 2, 3])
def test_parity_backend_accumulates_like_trl(splits):
    """TrlGMPOBackend (the ``gmpo-plugins parity`` reference) with the batch split into equal
    micro-batches of a global batch: TRL's mean / G accumulates to our whole-batch gmpo."""
    from gmpo_plugins.compare.backends.trl_gmpo import TrlGMPOBackend

    generator = torch.Generator().manual_seed(3)
    log_probs = (torch.randn(6, 5, generator=generator, dtype=torch.float64) - 1).requires_grad_()
    old = log_probs.detach() + 0.5 * torch.randn(6, 5, generator=generator, dtype=torch.float64)
    advantages = torch.randn(6, generator=generator, dtype=torch.float64)
    mask = torch.rand(6, 5, generator=generator) < 0.7
    mask[:, 0] = True
    hparams = GMPO.resolve({})
    info = BatchInfo(dp_size=1, global_batch_size=6)
    backend, total = TrlGMPOBackend(), 0.0
    assert backend.supports("gmpo") and not backend.supports("grpo")
    for rows in torch.arange(6).chunk(splits):
        loss, metrics = backend.policy_loss(
            PolicyLossCall(
                log_probs=log_probs[rows],
                old_log_probs=old[rows],
                advantages=advantages[rows],
                mask=mask[rows],
                loss_name="gmpo",
                hparams=hparams,
                batch_info=info,
            )
        )
        loss.backward()
        total += loss.item()
    ours = GMPO(LossInputs(log_probs, old, advantages, mask), info)
    (expected,) = torch.autograd.grad(ours.loss, log_probs)
    assert abs(total - ours.loss.item()) <= 1e-12
    assert torch.allclose(log_probs.grad, expected, rtol=0, atol=1e-12)
    if splits == 1:
        assert set(metrics) == {"clip_frac_low", "clip_frac_high", "clip_frac"}
        assert all(abs(metrics[k].item() - ours.metrics[k].item()) <= 1e-7 for k in metrics)
