"""The shared loss tail (``core/tail.py``, ``reduce.row_weights``): hand values, the eager
path's row statistics against the fused pass's, the loss paths a spec declares, and the
operators one fused forward+backward dispatches."""

from __future__ import annotations

import math

import pytest
import torch

from gmpo_plugins import BatchInfo, LossInputs, LossSpec, get_loss
from gmpo_plugins.bench.ops import count_ops
from gmpo_plugins.core.clip import one_sided_clip
from gmpo_plugins.core.kernels.sequence_rows import PassOptions, fused_sequence_rows
from gmpo_plugins.core.prepared import clamp_or_nan, nonfinite_sentinel, prepare
from gmpo_plugins.core.reduce import SEQUENCE, row_weights
from gmpo_plugins.core.tail import RATIO_METRIC_KEYS, RowStats, eager_row_stats, metric_vector

from ..registry_names import builtin_losses
from .batches import random_batch

COUNT = torch.tensor([2.0, 0.0, 3.0], dtype=torch.float64)
ROWS = torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64)


@pytest.mark.parametrize(
    "reduction, batch, expected",
    [
        (SEQUENCE, BatchInfo(), [0.5, 0.0, 0.5]),
        (SEQUENCE, BatchInfo(dp_size=2, global_batch_size=8), [0.25, 0.0, 0.25]),
        ("token-mean", BatchInfo(), [0.2, 0.2, 0.2]),
        ("token-mean", BatchInfo(dp_size=2, global_num_tokens=20), [0.1, 0.1, 0.1]),
        ("seq-mean-token-mean", BatchInfo(), [0.25, 0.0, 1 / 6]),
        ("seq-mean-token-mean", BatchInfo(dp_size=4, global_batch_size=8), [0.25, 0.0, 1 / 6]),
        ("seq-mean-token-sum-norm", BatchInfo(), [0.125, 0.0, 0.125]),
    ],
)
def test_row_weights_hand_values(reduction, batch, expected):
    weights = row_weights(COUNT, ROWS, batch, reduction, norm_length=4)
    torch.testing.assert_close(weights, torch.tensor(expected, dtype=torch.float64), rtol=1e-15, atol=0)


@pytest.mark.parametrize("reduction, field", [(SEQUENCE, "global_batch_size"), ("token-mean", "global_num_tokens")])
def test_row_weights_refuse_a_local_mean_across_ranks(reduction, field):
    with pytest.raises(ValueError, match=f"batch.{field} is required when batch.dp_size > 1"):
        row_weights(COUNT, ROWS, BatchInfo(dp_size=2), reduction)


def test_row_weights_bad_reduction_and_missing_length():
    with pytest.raises(ValueError, match="reduction must be one of"):
        row_weights(COUNT, ROWS, BatchInfo(), "mean")
    with pytest.raises(ValueError, match="needs norm_length"):
        row_weights(COUNT, ROWS, BatchInfo(), "seq-mean-token-sum-norm")


def _stats(**rows: list[float]) -> RowStats:
    return RowStats(**{name: torch.tensor(values, dtype=torch.float64) for name, values in rows.items()})


def test_metric_vector_hand_values():
    # row 0: 4 tokens, r in [-0.3, 0.1], sum -0.4, one clipped low; row 1: empty; row 2: 1 token r = 0.2, clipped high
    stats = _stats(
        count=[4, 0, 1],
        rows=[1, 0, 1],
        sum_raw=[-0.4, 0, 0.2],
        raw_min=[-0.3, math.inf, 0.2],
        raw_max=[0.1, -math.inf, 0.2],
        clipped_low=[1, 0, 0],
        clipped_high=[0, 0, 1],
        nonfinite=[0, 0, 0],
    )
    w0, w2 = math.exp(-0.1), math.exp(0.2)
    expected = [0.2, 0.2, 0.4, 0.04, -0.3, 0.2, w0, (w0 + w2) / 2, w2, 0.0]
    got = metric_vector(stats)
    assert got.shape == (len(RATIO_METRIC_KEYS),)
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64), rtol=1e-14, atol=1e-15)


def test_metric_vector_without_valid_tokens_is_zero():
    stats = _stats(
        count=[0, 0],
        rows=[0, 0],
        sum_raw=[0, 0],
        raw_min=[math.inf, math.inf],
        raw_max=[-math.inf, -math.inf],
        clipped_low=[0, 0],
        clipped_high=[0, 0],
        nonfinite=[0, 0],
    )
    assert metric_vector(stats).tolist() == [0.0] * len(RATIO_METRIC_KEYS)


def test_metric_vector_reports_non_finite_values_as_they_are():
    # row 0: 2 tokens, r = [-inf, 0.1] (sum -inf, one non-finite token); row 1: empty; row 2: 1 token r = 0.3
    stats = _stats(
        count=[2, 0, 1],
        rows=[1, 0, 1],
        sum_raw=[-math.inf, 0, 0.3],
        raw_min=[-math.inf, math.inf, 0.3],
        raw_max=[0.1, -math.inf, 0.3],
        clipped_low=[0, 0, 0],
        clipped_high=[0, 0, 0],
        nonfinite=[1, 0, 0],
    )
    got = dict(zip(RATIO_METRIC_KEYS, metric_vector(stats).tolist(), strict=True))
    # ppo_kl = -(-inf + 0.3) / 3 = +inf; row 0's weight exp(clamp_or_nan(-inf / 2)) = NaN, and so the
    # weights' min, mean and max (not the guard's e^-20, not 0)
    assert got["ppo_kl"] == math.inf and got["log_ratio_min"] == -math.inf and got["log_ratio_max"] == 0.3
    assert all(math.isnan(got[key]) for key in ("seq_weight_min", "seq_weight_mean", "seq_weight_max"))
    assert got["nonfinite_tokens"] == 1.0 and got["clip_frac"] == 0.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_eager_row_stats_equal_the_fused_pass(dtype):
    """The eager path's per-row statistics are the fused pass's (gmpo's token clip), the
    non-finite count being the one the tail counts for the eager path (``nonfinite_sentinel``)."""
    inputs = random_batch(9, 13, seed=4, dtype=dtype, spread=0.6, empty_rows=(3,))
    eps, bound = 0.4, 20.0
    p = prepare(inputs, sequence_level=True)
    positive, negative = (p.advantages > 0)[:, None] & p.mask, (p.advantages < 0)[:, None] & p.mask
    _, low, high = one_sided_clip(clamp_or_nan(p.log_ratio, -bound, bound), positive, negative, eps, eps)
    eager = eager_row_stats(p.log_ratio, p.mask, low, high)
    eager = eager._replace(nonfinite=torch.isnan(nonfinite_sentinel(inputs, p.mask, dtype)).sum(-1).to(dtype))
    _, fused, metrics, _ = fused_sequence_rows(
        inputs.log_probs,
        inputs.old_log_probs,
        inputs.mask,
        p.advantages,
        PassOptions(
            low=eps, high=eps, bound=bound, count_low=True, count_high=True, normalise=True, metrics=True, impl="torch"
        ),
    )
    for name in RowStats._fields:
        torch.testing.assert_close(getattr(fused, name), getattr(eager, name), msg=name)
    torch.testing.assert_close(metrics, metric_vector(eager))
    assert fused.clipped_low.sum() > 0 and fused.clipped_high.sum() > 0  # both sides exercised


def test_the_fused_pass_counts_non_finite_inputs_as_the_tail_does():
    """nonfinite per row from the fused pass (log-probs, old log-probs, (B,) advantages) equals
    the tail's count over the same inputs: row 0 one NaN and one -inf log-prob (2), row 1 a
    +inf old log-prob at a padded position (0: padding), row 2 a NaN advantage (its 4 valid
    tokens), row 3 empty (0 whatever its advantage)."""
    g = torch.Generator().manual_seed(1)
    log_probs, old = -torch.rand(4, 5, generator=g), -torch.rand(4, 5, generator=g)
    mask = torch.ones(4, 5, dtype=torch.bool)
    mask[1, 4] = mask[2, 4] = False
    mask[3] = False
    log_probs[0, 1], log_probs[0, 3], old[1, 4] = math.nan, -math.inf, math.inf
    advantages = torch.tensor([1.0, -1.0, math.nan, math.inf])
    inputs = LossInputs(log_probs, old, advantages, mask)
    options = PassOptions(
        low=0.4, high=0.4, bound=20.0, count_low=True, count_high=True, normalise=True, metrics=True, impl="torch"
    )
    _, stats, metrics, _ = fused_sequence_rows(log_probs, old, mask, advantages, options)
    tail_count = torch.isnan(nonfinite_sentinel(inputs, mask, torch.float32)).sum(-1).float()
    assert stats.nonfinite.tolist() == tail_count.tolist() == [2.0, 0.0, 4.0, 0.0]
    assert metrics[RATIO_METRIC_KEYS.index("nonfinite_tokens")].item() == 6.0


def test_loss_paths_are_declared_by_the_spec():
    for name in builtin_losses(fused=True):
        spec = get_loss(name)
        assert {"auto", "eager", "torch"} <= set(spec.impls), name
        assert ("triton" in spec.impls) == spec.sequence_level, name
    for name in builtin_losses(fused=False):  # one eager formulation: no impl keyword at all
        assert get_loss(name).impls == (), name
    assert LossSpec(name="plain", fn=lambda inputs, batch: None, description="").impls == ()  # one formulation


def test_token_losses_refuse_triton_by_name():
    inputs = random_batch(3, 4)
    spec = get_loss("grpo")
    with pytest.raises(ValueError, match="impl='triton' has no kernel"):
        spec.fn(inputs, BatchInfo(), impl="triton", **spec.defaults)


@pytest.mark.parametrize("shape", [(8, 64), (64, 1024)])
def test_gmpo_forward_backward_dispatches_at_most_12_compute_ops(shape):
    """The fused epilogue: a fixed handful of operators per call, whatever the shape (the
    pass itself is one custom operator per direction)."""
    inputs = random_batch(*shape, seed=1, dtype=torch.float32)
    spec = get_loss("gmpo")

    def step() -> None:
        inputs.log_probs.grad = None
        spec(inputs, validate=False).loss.backward()

    step()
    ops = count_ops(step)
    assert ops.compute_ops <= 12, ops.by_name
    assert ops.by_name["gmpo_plugins.sequence_rows.default"] == 1
    assert ops.by_name["gmpo_plugins.sequence_rows_backward.default"] == 1
    assert ops.expanded_compute_ops > ops.compute_ops  # the pass and the epilogue run inside the operators


@pytest.mark.parametrize("reduction, field", [(SEQUENCE, "global_batch_size"), ("token-mean", "global_num_tokens")])
def test_row_weights_keep_the_rows_precision_with_a_float32_count(reduction, field):
    """A framework's count as a float32 tensor (OpenRLHF, TRL) must not round a float64 loss
    to float32: 1/3 is not a float32 number."""
    batch = BatchInfo(dp_size=1, **{field: torch.tensor(3.0)})
    expected = ROWS / 3 if reduction == SEQUENCE else torch.ones_like(COUNT) / 3
    torch.testing.assert_close(row_weights(COUNT, ROWS, batch, reduction), expected, rtol=1e-15, atol=0)
