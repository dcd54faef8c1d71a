"""For any finite inputs (log ratios up to +-1e4, empty masks, all-zero advantages,
length-1 sequences, bf16, empty micro-batches with B = 0 or T = 0, with and without value
checks) loss, metrics and gradient are finite."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gmpo_plugins import BatchInfo, LossInputs, get_loss, list_losses

BUILTIN = [spec.name for spec in list_losses() if spec.provider == "gmpo-plugins"]
finite = st.floats(min_value=-1e4, max_value=1e4, allow_nan=False, allow_infinity=False, width=32)


@st.composite
def micro_batches(draw):
    batch_size = draw(st.integers(0, 5))
    length = draw(st.integers(0, 6))
    n = batch_size * length
    log_ratio = torch.tensor(draw(st.lists(finite, min_size=n, max_size=n))).view(batch_size, length)
    old = torch.tensor(draw(st.lists(st.floats(-30, 0), min_size=n, max_size=n)), dtype=torch.float32)
    mask = torch.tensor(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=torch.bool).view(
        batch_size, length
    )
    advantages = torch.tensor(
        draw(st.lists(st.sampled_from([0.0, 1.0, -1.0, 1e3, -2.5]), min_size=batch_size, max_size=batch_size))
    )
    dtype = draw(st.sampled_from([torch.float32, torch.bfloat16]))
    log_probs = (old.view(batch_size, length) + log_ratio).to(dtype).requires_grad_()
    return LossInputs(
        log_probs,
        old.view(batch_size, length).to(dtype),
        advantages.to(dtype),
        mask,
        ref_log_probs=old.view(batch_size, length).to(dtype),
    )


@settings(max_examples=150, deadline=None)
@given(inputs=micro_batches(), name=st.sampled_from(BUILTIN), dp=st.sampled_from([1, 4]), validate=st.booleans())
def test_loss_metrics_and_gradient_are_finite(inputs, name, dp, validate):
    batch = BatchInfo(dp_size=dp, global_batch_size=8 * dp, global_num_tokens=40 * dp)
    out = get_loss(name)(inputs, batch, kl_beta=0.1, validate=validate)
    out.loss.backward()
    assert torch.isfinite(out.loss)
    assert torch.isfinite(inputs.log_probs.grad).all()
    for key, value in out.metrics.items():
        assert torch.isfinite(value), key
        assert not value.requires_grad, key
    assert torch.all(inputs.log_probs.grad[~inputs.mask] == 0)
    if not inputs.mask.any():
        assert out.loss.item() == 0.0


@pytest.mark.parametrize("shape", [(0, 5), (3, 0), (0, 0)])
@pytest.mark.parametrize("validate", [True, False])
@pytest.mark.parametrize("name", BUILTIN)
def test_empty_micro_batch_gives_a_zero_loss_on_the_graph(name, shape, validate):
    """Frameworks produce empty micro-batches (padding ranks, dynamic batch sizes)."""
    log_probs = torch.zeros(shape, requires_grad=True)
    inputs = LossInputs(
        log_probs,
        torch.zeros(shape),
        torch.zeros(shape[0]),
        torch.zeros(shape, dtype=torch.bool),
        ref_log_probs=torch.zeros(shape),
        rollout_is_weights=torch.ones(shape),
    )
    out = get_loss(name)(
        inputs, BatchInfo(dp_size=2, global_batch_size=4, global_num_tokens=9), kl_beta=0.1, validate=validate
    )
    assert out.loss.item() == 0.0 and out.loss.requires_grad
    (grad,) = torch.autograd.grad(out.loss, log_probs)
    assert grad.shape == shape and not grad.any()
    assert set(out.metrics) >= {"policy_loss", "clip_frac", "ppo_kl", "seq_weight_mean", "kl"}
    assert all(bool(torch.isfinite(value)) and value.item() == 0.0 for value in out.metrics.values())
