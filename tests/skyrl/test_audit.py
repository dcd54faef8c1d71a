"""``gmpo-plugins audit`` in the skyrl environment: the live verdicts of SkyRL's own losses and
rollout corrections against the committed cells of the installed release."""

from __future__ import annotations

import math

import pytest
import torch

from gmpo_plugins.adapters.skyrl.releases import installed

from ..audit_cells import assert_cells_unchanged, assert_corrections_identical

SESSIONS = {"0.3": ("skyrl", "skyrl"), "0.4": ("skyrl04", "skyrl-0.4")}
"""SkyRL release -> (the nox session that tests it, its cells docs/audit/<cells>.json)."""


def test_verdicts_match_committed_cells():
    assert_cells_unchanged(*SESSIONS[installed().minor])


def test_skyrls_rollout_corrections_equal_the_registrys():
    """SkyRL's own off-policy correction (``compute_off_policy_correction``)."""
    assert_corrections_identical("skyrl", *SESSIONS[installed().minor])


def test_section_settings_reach_skyrls_nested_configs():
    """A translation's ``<section>.<field>`` (a dotted name) sets SkyRL's nested algorithm config."""
    from skyrl.train.config import AlgorithmConfig

    from gmpo_plugins.compare.audit.callers.skyrl import algorithm_config

    config = algorithm_config(AlgorithmConfig, "sapo", {"sapo.tau_pos": 2.5, "eps_clip_low": 0.3})
    assert (config.policy_loss_type, config.sapo.tau_pos, config.eps_clip_low) == ("sapo", 2.5, 0.3)


def _skyrl_loss(call, fields, log_probs, old, advantages, mask):
    """SkyRL's ``call`` as its trainer runs it with token_mean: advantages pre-scaled over the
    mini-batch (A / valid tokens), then the loss's masked sum."""
    from skyrl.backends.skyrl_train.utils.ppo_utils import (
        PolicyLossRegistry,
        apply_loss_reduction_to_advantages_minibatch,
    )
    from skyrl.train.config import AlgorithmConfig

    from gmpo_plugins.compare.audit.callers.skyrl import algorithm_config

    config = algorithm_config(AlgorithmConfig, call, {"loss_reduction": "token_mean", **fields})
    scaled = apply_loss_reduction_to_advantages_minibatch(
        advantages=advantages[:, None] * mask,
        loss_mask=mask,
        loss_reduction="token_mean",
        micro_batch_size=mask.shape[0],
        max_seq_len=mask.shape[1],
    )
    loss, _ = PolicyLossRegistry.get(call)(log_probs, old, scaled, config=config, loss_mask=mask, rollout_logprobs=None)
    return loss


def test_upstream_kl_cov_penalty_is_summed_not_averaged():
    """One row of two tokens, A = 0, log ratio 0.5 on both; kl_cov_frac = 0.002 restrains
    k = max(1, int(2 * 0.002)) = 1 token with the penalty ppo_kl_coef * |0.5| = 0.5. SkyRL
    reduces token_mean by scaling the advantages and summing, which does not reach the penalty:
    its loss is 0.5, where the token mean (the registry's kl_cov) is 0.5 / 2 = 0.25; with n
    valid tokens the penalty is n times the method's. Fails once SkyRL averages it."""
    from gmpo_plugins import BatchInfo, LossInputs, get_loss

    log_probs, old = torch.full((1, 2), -1.0, dtype=torch.float64), torch.full((1, 2), -1.5, dtype=torch.float64)
    advantages, mask = torch.zeros(1, dtype=torch.float64), torch.ones(1, 2, dtype=torch.float64)
    fields = {"kl_cov.kl_cov_frac": 0.002, "kl_cov.ppo_kl_coef": 1.0}

    theirs = _skyrl_loss("kl_cov", fields, log_probs, old, advantages, mask)
    ours = get_loss("kl_cov")(LossInputs(log_probs, old, advantages, mask.bool()), BatchInfo(1, 1, 2))

    assert float(theirs) == 0.5
    assert float(ours.loss) == 0.25


def test_upstream_clip_cov_bounds_see_scaled_advantages():
    """Two rows of two tokens, A = +3 and -3, log-probs -1 (row 0) and -3 (row 1), ratio 1 (no
    PPO clip): every token's covariance is (A - 0) * (l - (-2)) = 3, inside (clip_cov_lb,
    clip_cov_ub) = (1, 5), so the method restrains k = 1 token (the registry: token (0, 0), its
    gradient 0; the others -A / 4 = -0.75, -0.75, 0.75, 0.75). SkyRL computes the covariance on
    the pre-scaled advantages A / 4: 0.75 < 1, no candidate, no token restrained. Fails once
    SkyRL compares the bounds with the covariance of the advantages as given."""
    from gmpo_plugins import BatchInfo, LossInputs, get_loss

    fields = {"clip_cov.clip_ratio": 2e-4, "clip_cov.clip_cov_lb": 1.0, "clip_cov.clip_cov_ub": 5.0}
    fields |= {"eps_clip_low": 0.2, "eps_clip_high": 0.2}
    old = torch.tensor([[-1.0, -1.0], [-3.0, -3.0]], dtype=torch.float64)
    advantages, mask = torch.tensor([3.0, -3.0], dtype=torch.float64), torch.ones(2, 2, dtype=torch.float64)
    theirs_lp, ours_lp = old.clone().requires_grad_(), old.clone().requires_grad_()

    _skyrl_loss("clip_cov", fields, theirs_lp, old, advantages, mask).backward()
    get_loss("clip_cov")(LossInputs(ours_lp, old, advantages, mask.bool()), BatchInfo(1, 2, 4)).loss.backward()

    assert theirs_lp.grad.tolist() == [[-0.75, -0.75], [0.75, 0.75]]
    assert ours_lp.grad.tolist() == [[0.0, -0.75], [0.75, 0.75]]


@pytest.mark.parametrize(
    ("call", "fields"),
    [("clip_cov", {"eps_clip_low": 0.2, "eps_clip_high": 0.2}), ("kl_cov", {}), ("importance_sampling", {})],
)
def test_upstream_losses_without_overflow_guard_float32(call, fields):
    """One float32 token, log ratio 89 (> ln(float32 max) = 88.72), A = -1 (one token: the
    token_mean scaling leaves it -1): SkyRL's clip_cov, kl_cov and importance_sampling take exp of
    the log ratio as it is (its regular, cispo, sapo, dppo and rollout_is clamp at 20 first),
    exp(89) = inf, the loss inf; the registry's bound keeps it e^20. Fails once SkyRL guards."""
    log_probs, old = torch.tensor([[-0.5]]), torch.tensor([[-89.5]])

    theirs = _skyrl_loss(call, fields, log_probs, old, -torch.ones(1), torch.ones(1, 1))

    assert math.isinf(float(theirs))
