"""Splitting a mini-batch into micro-batches or data-parallel ranks accumulates exactly
the whole-batch gradient, for every built-in loss and reduction."""

from __future__ import annotations

import itertools

import pytest
import torch

from gmpo_plugins import BatchInfo, LossInputs, get_loss, list_losses

from .batches import complete, random_batch
from .reference import gmpo_reference

SPLIT_INVARIANT = [spec.name for spec in list_losses() if spec.provider == "gmpo-plugins" and spec.split_invariant]
CASES = (
    [(name, {}) for name in SPLIT_INVARIANT]
    + [
        ("grpo", {"reduction": reduction})
        for reduction in ("token-mean", "seq-mean-token-sum-norm", "token-sum", "seq-mean-token-sum")
    ]
    + [("gpg", {"reduction": reduction}) for reduction in ("seq-mean-token-mean", "token-sum", "seq-mean-token-sum")]
    + [("gmpo", {"kl_beta": 0.1}), ("dro", {"kl_beta": 0.1, "reduction": "seq-mean-token-sum"})]
)


def whole_batch() -> LossInputs:
    inputs = random_batch(14, 10, seed=21, spread=0.6, empty_rows=(5, 11))
    inputs.ref_log_probs = inputs.old_log_probs - 0.2
    return inputs


def shard(inputs: LossInputs, rows: slice) -> LossInputs:
    return LossInputs(
        inputs.log_probs[rows],
        inputs.old_log_probs[rows],
        inputs.advantages[rows],
        inputs.mask[rows],
        ref_log_probs=inputs.ref_log_probs[rows],
        rollout_log_probs=None if inputs.rollout_log_probs is None else inputs.rollout_log_probs[rows],
        rewards=None if inputs.rewards is None else inputs.rewards[rows],
    )


def global_info(inputs: LossInputs, dp_size: int) -> BatchInfo:
    return BatchInfo(
        dp_size=dp_size, global_batch_size=int(inputs.mask.any(-1).sum()), global_num_tokens=int(inputs.mask.sum())
    )


def chunks(n: int, parts: int) -> list[slice]:
    bounds = [round(k * n / parts) for k in range(parts + 1)]
    return [slice(a, b) for a, b in itertools.pairwise(bounds)]


def accumulated_grad(name: str, hparams: dict, inputs: LossInputs, ranks: int, micro: int) -> torch.Tensor:
    """Each rank accumulates its micro-batches; rank gradients are averaged as DDP does."""
    info = global_info(inputs, ranks)
    total = torch.zeros_like(inputs.log_probs)
    for rank_rows in chunks(inputs.log_probs.shape[0], ranks):
        rank_grad = torch.zeros_like(inputs.log_probs)
        start = rank_rows.start
        for piece in chunks(rank_rows.stop - rank_rows.start, micro):
            rows = slice(start + piece.start, start + piece.stop)
            out = get_loss(name)(shard(inputs, rows), info, **hparams)
            (grad,) = torch.autograd.grad(out.loss, inputs.log_probs)
            rank_grad += grad
        total += rank_grad
    return total / ranks


@pytest.mark.parametrize("name, hparams", CASES)
@pytest.mark.parametrize("micro", [2, 3, 7])
def test_micro_batch_split_accumulates_whole_batch_gradient(name, hparams, micro):
    inputs = complete(whole_batch(), name)
    whole = accumulated_grad(name, hparams, inputs, ranks=1, micro=1)
    assert whole.abs().sum() > 0
    torch.testing.assert_close(
        accumulated_grad(name, hparams, inputs, ranks=1, micro=micro), whole, rtol=1e-6, atol=1e-12
    )


@pytest.mark.parametrize("name, hparams", CASES)
@pytest.mark.parametrize("ranks, micro", [(2, 1), (4, 1), (2, 3)])
def test_data_parallel_split_averages_to_whole_batch_gradient(name, hparams, ranks, micro):
    inputs = complete(whole_batch(), name)
    whole = accumulated_grad(name, hparams, inputs, ranks=1, micro=1)
    torch.testing.assert_close(
        accumulated_grad(name, hparams, inputs, ranks=ranks, micro=micro), whole, rtol=1e-6, atol=1e-12
    )


def test_local_fallback_is_a_plain_mean_and_not_split_invariant():
    """Without global counts each micro-batch is its own mean: documented, and pinned here
    against the loop reference (so two halves give the sum of two half means)."""
    inputs = whole_batch()
    halves = []
    for part in chunks(14, 2):
        piece = shard(inputs, part)
        local = get_loss("gmpo")(LossInputs(piece.log_probs, piece.old_log_probs, piece.advantages, piece.mask))
        rows = int(piece.mask.any(-1).sum())
        expected = gmpo_reference(piece.log_probs, piece.old_log_probs, piece.advantages, piece.mask, n=rows)
        assert local.loss.item() == pytest.approx(expected.item(), rel=1e-12)
        halves.append(local.loss.item())
    whole = gmpo_reference(
        inputs.log_probs, inputs.old_log_probs, inputs.advantages, inputs.mask, n=int(inputs.mask.any(-1).sum())
    )
    assert abs(sum(halves) - whole.item()) > 0.1  # accumulating local means is not the batch mean
