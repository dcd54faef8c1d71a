"""Micro-batch and data-parallel invariance through the patched PolicyLoss, normalised by
OpenRLHF's own ``iter_grad_accum_global_norm`` (``/ gas`` counts) and DeepSpeed's scaling.

DeepSpeed multiplies each micro-batch loss by 1/gas and averages gradients over the dp
ranks; with OpenRLHF's normalisers the accumulated gradient of any split must equal the
whole batch's (the core's rule ``sum_i L_i / N * dp_size``, N the whole-step count).
"""

from __future__ import annotations

import pytest
import torch
from openrlhf.utils.loss_utils import _optimizer_step_loss_norm, iter_grad_accum_global_norm

from tests.openrlhf.batches import ROWS, openrlhf_batch

LOSSES = [
    ("gmpo", True),
    ("gmpo", False),
    ("gmpo_plugins.gspo", False),
    ("grpo", True),
    ("grpo", False),
]
ALL = list(range(len(ROWS)))


class _Strategy:  # what iter_grad_accum_global_norm reads without torch.distributed
    ds_device_mesh = None


def _gradient(policy_loss, batch, ranks):
    """Gradient w.r.t. the log-probs after every rank ran its micro-batches (``ranks``: a list
    per rank of row-index lists), then DeepSpeed's 1/gas scaling and the dp average."""
    leaf = batch.leaf.detach().clone().requires_grad_(True)
    dp_size, gas = len(ranks), len(ranks[0])
    all_masks = [batch.action_mask[rows] for micro in ranks for rows in micro]
    total = leaf.new_zeros(())
    for micro_batches in ranks:
        if dp_size == 1:
            pairs = iter_grad_accum_global_norm(micro_batches, _Strategy(), gas, lambda rows: batch.action_mask[rows])
        else:  # the all-reduced counts of every rank's micro-batches, dp_size ranks
            info = _optimizer_step_loss_norm(all_masks, None, dp_size, gas)
            pairs = [(rows, info) for rows in micro_batches]
        for rows, info in pairs:
            mask = batch.action_mask[rows]
            loss = policy_loss(
                leaf[rows] * mask, batch.old_log_probs[rows], batch.advantages[rows], action_mask=mask, **info
            )[0]
            total = total + loss / gas / dp_size  # DeepSpeed: 1/gas; DDP: mean over ranks
    total.backward()
    return total.detach(), leaf.grad


@pytest.mark.parametrize(("loss_type", "token_level_loss"), LOSSES)
def test_split_and_data_parallel_gradients_equal_the_whole_batch(loss_module, loss_type, token_level_loss):
    batch = openrlhf_batch(7, torch.float64)
    low, high = (0.03, 0.04) if loss_type.endswith("gspo") else (0.3, 0.3)
    policy_loss = loss_module.PolicyLoss(low, high, token_level_loss=token_level_loss, policy_loss_type=loss_type)
    whole_loss, whole = _gradient(policy_loss, batch, [[ALL]])
    assert whole.abs().max() > 0
    splits = {
        "2 micro-batches": [[ALL[:4], ALL[4:]]],
        "4 micro-batches": [[ALL[0:2], ALL[2:4], ALL[4:6], ALL[6:8]]],
        "uneven 2": [[ALL[:1], ALL[1:]]],
        "2 ranks x 2 micro-batches": [[ALL[0:2], ALL[2:4]], [ALL[4:6], ALL[6:8]]],
    }
    for name, ranks in splits.items():
        loss, grad = _gradient(policy_loss, batch, ranks)
        assert abs(float(loss - whole_loss)) <= 1e-12, name
        assert (grad - whole).abs().max() <= 1e-12, name
