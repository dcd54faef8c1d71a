"""For any finite inputs (log ratios up to +-1e4, empty masks, all-zero advantages,
length-1 sequences, bf16, empty micro-batches with B = 0 or T = 0, with and without value
checks) loss, metrics and gradient are finite."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gmpo_plugins import BatchInfo, LossInputs, get_loss, list_losses
from gmpo_plugins.core.kernels.dispatch import triton_importable, triton_interpreter
from gmpo_plugins.core.kl import KL_ESTIMATORS
from gmpo_plugins.core.prepared import IS_AGGREGATIONS

from .batches import complete

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
    inputs = complete(inputs, name)
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
        complete(inputs, name),
        BatchInfo(dp_size=2, global_batch_size=4, global_num_tokens=9),
        kl_beta=0.1,
        validate=validate,
    )
    assert out.loss.item() == 0.0 and out.loss.requires_grad
    (grad,) = torch.autograd.grad(out.loss, log_probs)
    assert grad.shape == shape and not grad.any()
    assert set(out.metrics) >= {"policy_loss", "clip_frac", "ppo_kl", "seq_weight_mean", "kl"}
    assert all(bool(torch.isfinite(value)) and value.item() == 0.0 for value in out.metrics.values())


# Padding is inert: whatever a masked position (or a row without a valid token) holds, the
# loss, the metrics and the gradient are those of finite inputs, on every path of every loss.

TRITON_RUNS = triton_importable() and (torch.cuda.is_available() or triton_interpreter())
TRITON_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
NOT_FINITE = st.sampled_from([math.nan, math.inf, -math.inf])
PADDING = st.one_of(NOT_FINITE, st.floats(-1e4, 1e4, width=32))
DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _paths() -> list:
    """(loss, impl) for every impl each built-in loss lists (None for a loss with one
    formulation); Triton where it can run."""
    needs_triton = pytest.mark.skipif(
        not TRITON_RUNS, reason="triton not installed, or neither CUDA nor TRITON_INTERPRET=1"
    )
    return [
        pytest.param(spec.name, impl, marks=[needs_triton] if impl == "triton" else [], id=f"{spec.name}-{impl}")
        for spec in list_losses()
        if spec.provider == "gmpo-plugins"
        for impl in spec.impls or (None,)
    ]


@st.composite
def padded_with_garbage(draw, *, sequence_level: bool, triton: bool):
    """LossInputs whose valid positions are finite and whose masked positions (every (B, T)
    input) and empty rows ((B,) advantages and IS weights) hold NaN, +-inf or any float;
    row 0 is empty unless hypothesis keeps it, every dtype, (B,) or (B, T) advantages and IS weights."""
    batch_size, length = draw(st.integers(1, 4)), draw(st.integers(1, 5))
    n = batch_size * length
    mask = torch.tensor(draw(st.lists(st.booleans(), min_size=n, max_size=n))).view(batch_size, length)
    if draw(st.booleans()):
        mask[0] = False  # a row without a valid token
    dtype = draw(st.sampled_from(DTYPES[:3] if triton else DTYPES))

    def matrix(low: float, high: float) -> torch.Tensor:
        valid = torch.tensor(draw(st.lists(st.floats(low, high), min_size=n, max_size=n)), dtype=torch.float64)
        padding = torch.tensor(draw(st.lists(PADDING, min_size=n, max_size=n)), dtype=torch.float64)
        return torch.where(mask, valid.view(batch_size, length), padding.view(batch_size, length))

    def vector(low: float, high: float) -> torch.Tensor:
        valid = torch.tensor(draw(st.lists(st.floats(low, high), min_size=batch_size, max_size=batch_size)))
        padding = torch.tensor(draw(st.lists(PADDING, min_size=batch_size, max_size=batch_size)))
        return torch.where(mask.any(-1), valid.to(torch.float64), padding.to(torch.float64))

    old = matrix(-5.0, 0.0)
    log_probs = torch.where(mask, old + matrix(-3.0, 3.0), matrix(-1.0, 0.0))
    if draw(st.booleans()):
        advantages = vector(-2.0, 2.0)
    elif sequence_level:  # row-constant over valid tokens
        advantages = torch.where(mask, vector(-2.0, 2.0)[:, None].expand(-1, length), matrix(0.0, 0.0))
    else:
        advantages = matrix(-2.0, 2.0)
    weights = draw(st.sampled_from([None, "rows", "tokens"]))
    if weights is not None:
        weights = vector(0.0, 2.0) if weights == "rows" else matrix(0.0, 2.0)
    return LossInputs(
        log_probs.to(dtype).requires_grad_(),
        old.to(dtype),
        advantages.to(dtype),
        mask,
        ref_log_probs=matrix(-5.0, 0.0).to(dtype),
        rollout_is_weights=None if weights is None else weights.to(dtype),
    )


@pytest.mark.parametrize(("name", "impl"), _paths())
@settings(max_examples=40, deadline=None)
@given(data=st.data(), estimator=st.sampled_from(KL_ESTIMATORS), validate=st.booleans(), counts=st.booleans())
def test_padding_and_empty_rows_are_inert(name, impl, data, estimator, validate, counts):
    """NaN, +-inf or any value at masked positions of every (B, T) input and on rows without
    a valid token of every (B,) input: a finite loss, finite metrics, a finite gradient that
    is exactly 0 at masked positions (every loss, impl, KL estimator, dtype)."""
    spec = get_loss(name)
    inputs = complete(data.draw(padded_with_garbage(sequence_level=spec.sequence_level, triton=impl == "triton")), name)
    if impl == "triton":
        inputs = LossInputs(*(None if t is None else t.detach().to(TRITON_DEVICE) for t in vars(inputs).values()))
        inputs.log_probs.requires_grad_()
    hparams = {"kl_beta": 0.1, "kl_estimator": estimator}
    if "rollout_is_aggregation" in spec.defaults:
        hparams["rollout_is_aggregation"] = data.draw(st.sampled_from(IS_AGGREGATIONS))
    if "dual_clip" in spec.defaults:
        hparams["dual_clip"] = data.draw(st.sampled_from([None, 3.0]))
    if spec.reductions:
        hparams["reduction"] = data.draw(st.sampled_from(spec.reductions))
    batch = BatchInfo(global_batch_size=6, global_num_tokens=20) if counts else BatchInfo()
    out = spec(inputs, batch, validate=validate, impl=impl, **hparams)
    out.loss.backward()
    grad = inputs.log_probs.grad
    assert torch.isfinite(out.loss), out.loss
    assert torch.isfinite(grad).all(), grad
    assert torch.all(grad[~inputs.mask] == 0), grad
    for key, value in out.metrics.items():
        assert torch.isfinite(value), key
