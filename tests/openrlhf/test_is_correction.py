"""OpenRLHF's train/rollout IS correction through a registry loss equals OpenRLHF's own ppo
with the same correction: every level, mode and gating, as the loss's rollout IS weights
(``adapters/openrlhf/is_correction.py``), for the grpo settings OpenRLHF's ppo computes
(``gmpo_plugins.grpo`` with the same eps: token-mean, and seq-mean-token-mean)."""

from __future__ import annotations

import pytest
import torch

from gmpo_plugins.adapters.openrlhf import OpenRLHFConfigError
from tests.openrlhf.batches import counts, openrlhf_batch

# (level, mode, gating, threshold): bands that drop or clamp some units of the batch and keep others
CORRECTIONS = [
    ("token", "mask", "ratio", (0.97, 1.03)),
    ("seq", "mask", "ratio", (0.995, 1.005)),
    ("token", "clip", "ratio", (0.97, 1.03)),
    ("token", "mask", "binary_kl", (0.0, 3e-4)),
    ("seq", "mask", "binary_kl", (0.0, 3e-4)),
    ("token", "mask", "tv", (0.0, 0.01)),
    ("seq", "mask", "tv", (0.0, 0.01)),
]


def _run(cls, policy_loss_type, token_level, correction, batch):
    level, mode, gating, threshold = correction
    module = cls(
        clip_eps_low=0.2,
        clip_eps_high=0.2,
        token_level_loss=token_level,
        policy_loss_type=policy_loss_type,
        is_correction_level=level,
        is_correction_mode=mode,
        is_correction_gating=gating,
        is_correction_threshold=list(threshold),
    )
    leaf = batch.leaf.detach().clone().requires_grad_(True)
    log_probs = leaf * batch.action_mask
    loss, clip_ratio, ppo_kl, vllm_kl, filtered = module(
        log_probs,
        batch.old_log_probs,
        batch.advantages,
        action_mask=batch.action_mask,
        rollout_log_probs=batch.rollout_log_probs,
        **counts(batch),
    )
    loss.backward()
    return loss.detach(), leaf.grad, clip_ratio, vllm_kl, filtered


@pytest.mark.parametrize("token_level", [True, False], ids=["token-mean", "seq-mean-token-mean"])
@pytest.mark.parametrize("correction", CORRECTIONS, ids=lambda c: "-".join(map(str, c[:3])))
def test_registry_grpo_with_the_correction_equals_openrlhfs_ppo(loss_module, correction, token_level):
    batch = openrlhf_batch(seed=3, dtype=torch.float64)
    want = _run(loss_module.PolicyLoss, "ppo", token_level, correction, batch)
    got = _run(loss_module.PolicyLoss, "gmpo_plugins.grpo", token_level, correction, batch)
    assert 0.0 < float(want[4]) < 1.0 or correction[1] == "clip"  # the band acts on this batch
    torch.testing.assert_close(got[0], want[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got[1], want[1], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got[3], want[3], rtol=1e-12, atol=1e-12)  # vllm_kl
    torch.testing.assert_close(got[4].to(want[4].dtype), want[4], rtol=0, atol=0)  # is_filter_ratio


def test_the_correction_changes_the_loss(loss_module):
    batch = openrlhf_batch(seed=3, dtype=torch.float64)
    on = _run(loss_module.PolicyLoss, "gmpo_plugins.grpo", True, CORRECTIONS[0], batch)
    off = _run(loss_module.PolicyLoss, "gmpo_plugins.grpo", True, ("off", "mask", "ratio", (0.5, 5.0)), batch)
    assert abs(float(on[0]) - float(off[0])) > 1e-6


def test_a_correction_without_rollout_log_probs_names_the_flag(loss_module):
    batch = openrlhf_batch(seed=3, dtype=torch.float64)
    module = loss_module.PolicyLoss(
        clip_eps_low=0.2, clip_eps_high=0.2, policy_loss_type="gmpo_plugins.sapo", is_correction_level="token"
    )
    with pytest.raises(OpenRLHFConfigError, match="--algo.advantage.is_correction_level token needs the rollout"):
        module(batch.log_probs, batch.old_log_probs, batch.advantages, action_mask=batch.action_mask, **counts(batch))
