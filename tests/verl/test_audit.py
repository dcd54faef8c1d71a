"""``gmpo-plugins audit`` in the verl environment: the live verdicts of verl's own losses and
rollout corrections against the committed cells of the installed release (docs/audit/verl.json,
verl-0.8.json), and the smallest reproducer of verl's geo_mean micro-batch mean
(verl-project/verl#7913)."""

from __future__ import annotations

import math

import pytest
import torch

from gmpo_plugins.compare.audit.callers.verl import actor_config

from ..audit_cells import assert_cells_unchanged, assert_corrections_identical
from .releases import RELEASE

SESSIONS = {"0.8": ("verl08", "verl-0.8"), "0.9": ("verl", "verl")}
"""verl release -> (the nox session that tests it, its cells docs/audit/<cells>.json)."""


def test_verdicts_match_committed_cells():
    assert_cells_unchanged(*SESSIONS[RELEASE.minor])


def test_verls_rollout_corrections_equal_the_registrys():
    """verl's own rollout correction (``compute_rollout_correction_and_rejection_mask``)."""
    assert_corrections_identical("verl", *SESSIONS[RELEASE.minor])


def test_upstream_geo_mean_scales_with_micro_batches():
    """Two identical one-token rows, A = 1, log ratio 0 (ratio 1, inside the clip): the
    whole-batch loss is -mean_i A_i * 1 = -1 and d/dl per token = -1/2. As verl's engine
    runs it in two micro-batches (each loss back-propagated unscaled, global_batch_info set
    to the global counts) each micro-batch gives -1 with gradient -1: accumulated loss -2
    and gradient -1 per token, twice the whole batch. Fails once geo_mean honours
    global_batch_info."""
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    config = actor_config("geo_mean", {"clip_ratio_low": 0.4, "clip_ratio_high": 0.4, "loss_agg_mode": "token-mean"})
    config.global_batch_info.update(dp_size=1, global_batch_size=2, batch_num_tokens=2, loss_scale_factor=None)
    log_prob = torch.full((2, 1), -1.0, dtype=torch.float64, requires_grad=True)
    old, advantages, mask = log_prob.detach().clone(), torch.ones(2, 1, dtype=torch.float64), torch.ones(2, 1)
    geo_mean = get_policy_loss_fn("geo_mean")

    whole, _ = geo_mean(old, log_prob, advantages, mask, "token-mean", config, None)
    (whole_grad,) = torch.autograd.grad(whole, log_prob)
    accumulated = 0.0
    for row in (slice(0, 1), slice(1, 2)):
        part, _ = geo_mean(old[row], log_prob[row], advantages[row], mask[row], "token-mean", config, None)
        part.backward()
        accumulated += float(part.detach())

    assert float(whole.detach()) == -1.0 and whole_grad.flatten().tolist() == [-0.5, -0.5]
    assert accumulated == -2.0 and log_prob.grad.flatten().tolist() == [-1.0, -1.0]


def test_policy_loss_section_settings_reach_verls_policy_loss_config():
    """A translation's ``policy_loss.<field>`` (a dotted name) sets verl's PolicyLossConfig."""
    config = actor_config("clip_cov", {"policy_loss.clip_cov_ratio": 0.5, "clip_ratio_low": 0.3})
    assert (config.policy_loss.loss_mode, config.policy_loss.clip_cov_ratio, config.clip_ratio_low) == (
        "clip_cov",
        0.5,
        0.3,
    )


def test_vanilla_dual_clip_is_on_by_default_and_off_at_inf():
    """The note of verl's grpo translation: one token, A = -1, log ratio 2 (ratio e^2 = 7.39,
    above 1 + eps): PPO's loss is -min(r A, clip(r) A) = e^2; verl's default clip_ratio_c = 3
    caps it at -A * 3 = 3 (dual clip, zero gradient); clip_ratio_c = inf leaves e^2."""
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    log_prob = torch.tensor([[0.0]], dtype=torch.float64)
    old, advantages = torch.tensor([[-2.0]], dtype=torch.float64), -torch.ones(1, 1, dtype=torch.float64)
    mask = torch.ones(1, 1, dtype=torch.bool)
    fields = {"clip_ratio_low": 0.2, "clip_ratio_high": 0.2, "loss_agg_mode": "token-mean"}
    default = actor_config("vanilla", fields)
    off = actor_config("vanilla", fields | {"clip_ratio_c": float("inf")})
    vanilla = get_policy_loss_fn("vanilla")

    capped, _ = vanilla(old, log_prob, advantages, mask, "token-mean", default, None)
    plain, _ = vanilla(old, log_prob, advantages, mask, "token-mean", off, None)

    assert default.clip_ratio_c == 3.0
    assert float(capped) == 3.0
    assert float(plain) == float(torch.tensor(2.0, dtype=torch.float64).exp())


def test_upstream_geo_mean_no_overflow_guard_float32():
    """One float32 token, log ratio 89 (> ln(float32 max) = 88.72), A = -1: GMPO's one-sided clip
    leaves the high side of A < 0 open, verl's geo_mean does not clamp the log ratio (its clamp is
    commented out), exp(89) = inf and the loss -A * inf = inf. The registry's gmpo bounds the
    log ratio at 20: loss e^20. Fails once verl guards."""
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    from gmpo_plugins import BatchInfo, LossInputs, get_loss

    config = actor_config("geo_mean", {"clip_ratio_low": 0.4, "clip_ratio_high": 0.4, "loss_agg_mode": "token-mean"})
    config.global_batch_info.update(dp_size=1, global_batch_size=1, batch_num_tokens=1, loss_scale_factor=None)
    log_prob, old = torch.tensor([[-0.5]], requires_grad=True), torch.tensor([[-89.5]])
    advantages, mask = torch.tensor([-1.0]), torch.tensor([[True]])
    theirs, _ = get_policy_loss_fn("geo_mean")(
        old, log_prob, advantages[:, None] * mask, mask, "token-mean", config, None
    )
    ours = get_loss("gmpo")(LossInputs(log_prob, old, advantages, mask), BatchInfo(1, 1, 1))

    assert math.isinf(float(theirs.detach()))
    assert float(ours.loss.detach()) == pytest.approx(math.exp(20.0), rel=1e-6)


@pytest.mark.parametrize("call", ["clip_cov", "kl_cov"])
def test_upstream_covariance_losses_no_overflow_guard_float32(call):
    """One float32 token, log ratio 89 (> ln(float32 max) = 88.72), A = -1: verl's clip_cov and
    kl_cov take exp of the log ratio as it is, exp(89) = inf; clip_cov's PPO term
    max(-A * inf, -A * 1.2) = inf, kl_cov's -A * inf + coef * 89 = inf. Fails once verl guards."""
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    config = actor_config(call, {"clip_ratio_low": 0.2, "clip_ratio_high": 0.2, "loss_agg_mode": "token-mean"})
    config.global_batch_info.update(dp_size=1, global_batch_size=1, batch_num_tokens=1, loss_scale_factor=None)
    log_prob, old = torch.tensor([[-0.5]], requires_grad=True), torch.tensor([[-89.5]])
    advantages, mask = -torch.ones(1, 1), torch.ones(1, 1)

    theirs, _ = get_policy_loss_fn(call)(old, log_prob, advantages, mask, "token-mean", config, None)

    assert math.isinf(float(theirs.detach()))
