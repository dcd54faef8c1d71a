"""The patched ``openrlhf.models.loss.PolicyLoss``: registry losses equal the core (values,
gradients, metrics), OpenRLHF's ppo/gspo stay byte-identical, refusals name the flag."""

from __future__ import annotations

import logging

import pytest
import torch

from gmpo_plugins import BatchInfo, LossInputs, get_loss
from gmpo_plugins.adapters.openrlhf import OpenRLHFConfigError, options
from tests.core.reference import gmpo_reference, grpo_reference
from tests.openrlhf.batches import counts, openrlhf_batch

NUMBERS = [None, "local", "dp2_gas3"]


def _info(batch, kind):
    if kind is None:
        return {}
    if kind == "local":
        return counts(batch)
    return counts(batch, dp_size=2, gas=3)  # as if 2 ranks x 3 micro-batches had the same counts


def _core_batch_info(info):
    if not info:
        return BatchInfo()
    return BatchInfo(info["dp_size"], info["global_batch_size"], info["batch_num_tokens"])


# (policy_loss_type, constructor kwargs, registry name, hyper-parameters the core must get)
PARITY = [
    ("gmpo", dict(clip_eps_low=0.4, clip_eps_high=0.3, token_level_loss=True), "gmpo", dict(eps_low=0.4, eps_high=0.3)),
    (
        "gmpo",
        dict(clip_eps_low=0.4, clip_eps_high=0.4, token_level_loss=False),
        "gmpo",
        dict(eps_low=0.4, eps_high=0.4),
    ),
    ("gmpo_plugins.gmpo", dict(clip_eps_low=0.2, clip_eps_high=0.2), "gmpo", dict(eps_low=0.2, eps_high=0.2)),
    (
        "gmpo_seqclip",
        dict(clip_eps_low=0.1, clip_eps_high=0.1, token_level_loss=False),
        "gmpo_seqclip",
        dict(eps_low=0.1, eps_high=0.1),
    ),
    (
        "gmpo_nonorm",
        dict(clip_eps_low=0.4, clip_eps_high=0.4, token_level_loss=False),
        "gmpo_nonorm",
        dict(eps_low=0.4, eps_high=0.4),
    ),
    ("gmpo_noclip", dict(token_level_loss=False), "gmpo_noclip", {}),
    (
        "grpo",
        dict(clip_eps_low=0.2, clip_eps_high=0.28, token_level_loss=True),
        "grpo",
        dict(eps_low=0.2, eps_high=0.28, reduction="token-mean"),
    ),
    (
        "grpo",
        dict(clip_eps_low=0.2, clip_eps_high=0.2, token_level_loss=False, dual_clip=3.0),
        "grpo",
        dict(eps_low=0.2, eps_high=0.2, reduction="seq-mean-token-mean", dual_clip=3.0),
    ),
    (
        "dapo",
        dict(clip_eps_low=0.2, clip_eps_high=0.28),
        "dapo",
        dict(eps_low=0.2, eps_high=0.28, reduction="token-mean"),
    ),
    (
        "gmpo_plugins.gspo",
        dict(clip_eps_low=3e-4, clip_eps_high=4e-4, token_level_loss=False),
        "gspo",
        dict(eps_low=3e-4, eps_high=4e-4),
    ),
]


@pytest.mark.parametrize("numbers", NUMBERS)
@pytest.mark.parametrize(
    ("loss_type", "kwargs", "name", "hparams"), PARITY, ids=[f"{p[0]}-{i}" for i, p in enumerate(PARITY)]
)
def test_registry_loss_equals_core(loss_module, loss_type, kwargs, name, hparams, numbers):
    """Loss, clip_ratio, ppo_kl and d loss / d log_probs equal the core's to 1e-6."""
    batch, twin = openrlhf_batch(1), openrlhf_batch(1)
    info = _info(batch, numbers)
    policy_loss = loss_module.PolicyLoss(policy_loss_type=loss_type, **kwargs)
    loss, clip_ratio, ppo_kl, vllm_kl, is_filter_ratio = policy_loss(
        batch.log_probs,
        batch.old_log_probs,
        batch.advantages,
        action_mask=batch.action_mask,
        rollout_log_probs=None,
        **info,
    )
    loss.backward()

    out = get_loss(name)(
        LossInputs(twin.log_probs, twin.old_log_probs, twin.advantages, twin.action_mask.bool()),
        _core_batch_info(info),
        **hparams,
    )
    out.loss.backward()
    assert vllm_kl is None and is_filter_ratio is None
    assert abs(float(loss.detach()) - float(out.loss.detach())) <= 1e-6
    assert abs(float(clip_ratio) - float(out.metrics["clip_frac"])) <= 1e-6
    if "eps_low" in hparams:
        assert float(clip_ratio) > 0  # some tokens are clipped: the eps translation matters
    assert abs(float(ppo_kl) - float(out.metrics["ppo_kl"])) <= 1e-6
    assert (batch.leaf.grad - twin.leaf.grad).abs().max() <= 1e-6
    assert batch.leaf.grad.abs().max() > 0  # the comparison is not between zeros


@pytest.mark.parametrize("numbers", NUMBERS)
@pytest.mark.parametrize("token_level_loss", [True, False])
def test_gmpo_equals_float64_loop_reference(loss_module, token_level_loss, numbers):
    """An independent oracle: GMPO written row by row (tests/core/reference.py), float64."""
    batch, twin = openrlhf_batch(2, torch.float64), openrlhf_batch(2, torch.float64)
    info = _info(batch, numbers)
    policy_loss = loss_module.PolicyLoss(0.4, 0.3, token_level_loss=token_level_loss, policy_loss_type="gmpo")
    loss = policy_loss(batch.log_probs, batch.old_log_probs, batch.advantages, batch.action_mask, **info)[0]
    loss.backward()
    rows = (batch.action_mask.sum(-1) > 0).sum()
    n = info["global_batch_size"] if info else rows
    ref = gmpo_reference(
        twin.log_probs,
        twin.old_log_probs,
        twin.advantages,
        twin.action_mask,
        eps_low=0.4,
        eps_high=0.3,
        n=n,
        dp=info.get("dp_size", 1),
    )
    ref.backward()
    assert abs(float(loss.detach()) - float(ref.detach())) <= 1e-12
    assert (batch.leaf.grad - twin.leaf.grad).abs().max() <= 1e-12


@pytest.mark.parametrize(("token_level_loss", "reduction"), [(True, "token-mean"), (False, "seq-mean-token-mean")])
def test_grpo_follows_loss_agg_mode(loss_module, token_level_loss, reduction):
    batch, twin = openrlhf_batch(3, torch.float64), openrlhf_batch(3, torch.float64)
    info = counts(batch, dp_size=2, gas=2)
    policy_loss = loss_module.PolicyLoss(0.2, 0.28, token_level_loss=token_level_loss, policy_loss_type="grpo")
    loss = policy_loss(batch.log_probs, batch.old_log_probs, batch.advantages, batch.action_mask, **info)[0]
    n = info["batch_num_tokens"] if reduction == "token-mean" else info["global_batch_size"]
    ref = grpo_reference(
        twin.log_probs,
        twin.old_log_probs,
        twin.advantages,
        twin.action_mask,
        reduction=reduction,
        n=n,
        dp=2,
        eps_low=0.2,
        eps_high=0.28,
    )
    assert abs(float(loss.detach()) - float(ref.detach())) <= 1e-12


BUILTIN = [
    dict(policy_loss_type="ppo"),
    dict(policy_loss_type="ppo", token_level_loss=False, clip_eps_low=0.1, clip_eps_high=0.3),
    dict(policy_loss_type="ppo", dual_clip=3.0),
    dict(policy_loss_type="ppo", is_correction_level="token"),
    dict(
        policy_loss_type="ppo",
        is_correction_level="token",
        is_correction_mode="clip",
        is_correction_threshold=(0.9, 1.1),
    ),
    dict(policy_loss_type="ppo", is_correction_level="seq", is_correction_threshold=(0.97, 1.03)),
    dict(policy_loss_type="gspo", clip_eps_low=3e-4, clip_eps_high=4e-4),
    dict(policy_loss_type="gspo", clip_eps_low=3e-4, clip_eps_high=4e-4, is_correction_level="seq"),
]


@pytest.mark.parametrize("numbers", [None, "dp2_gas3"])
@pytest.mark.parametrize("kwargs", BUILTIN, ids=[str(i) for i in range(len(BUILTIN))])
def test_ppo_and_gspo_are_byte_identical_to_openrlhf(loss_module, pristine_loss_module, kwargs, numbers):
    batch, twin = openrlhf_batch(4), openrlhf_batch(4)
    info = _info(batch, numbers)
    ours = loss_module.PolicyLoss(**kwargs)(
        batch.log_probs,
        batch.old_log_probs,
        batch.advantages,
        action_mask=batch.action_mask,
        rollout_log_probs=batch.rollout_log_probs,
        **info,
    )
    theirs = pristine_loss_module.PolicyLoss(**kwargs)(
        twin.log_probs,
        twin.old_log_probs,
        twin.advantages,
        action_mask=twin.action_mask,
        rollout_log_probs=twin.rollout_log_probs,
        **info,
    )
    assert len(ours) == len(theirs) == 5
    for mine, other in zip(ours, theirs, strict=True):
        assert (mine is None and other is None) or torch.equal(mine, other)
    ours[0].backward()
    theirs[0].backward()
    assert torch.equal(batch.leaf.grad, twin.leaf.grad)
    if kwargs.get("is_correction_level", "off") != "off" and kwargs["policy_loss_type"] == "ppo":
        assert ours[3] is not None  # the IS branch really ran


def test_the_class_is_patched_in_place_for_every_binding(loss_module):
    import openrlhf.models
    from openrlhf.trainer.ray import ppo_actor

    from gmpo_plugins.adapters.openrlhf.patch import is_patched

    assert openrlhf.models.PolicyLoss is loss_module.PolicyLoss is ppo_actor.PolicyLoss
    assert is_patched(loss_module.PolicyLoss)


def test_action_mask_none_means_every_token(loss_module):
    batch = openrlhf_batch(5)
    full = torch.ones_like(batch.action_mask)
    policy_loss = loss_module.PolicyLoss(0.4, 0.4, policy_loss_type="gmpo", token_level_loss=False)
    without = policy_loss(batch.leaf, batch.old_log_probs, batch.advantages[:, :1].expand_as(batch.leaf))
    explicit = policy_loss(batch.leaf, batch.old_log_probs, batch.advantages[:, :1].expand_as(batch.leaf), full)
    assert torch.equal(without[0], explicit[0])


def test_sequence_level_loss_refuses_per_token_advantages(loss_module):
    batch = openrlhf_batch(6)
    per_token = batch.advantages + 0.1 * torch.arange(batch.advantages.shape[1]) * batch.action_mask
    policy_loss = loss_module.PolicyLoss(0.4, 0.4, policy_loss_type="gmpo", token_level_loss=False)
    with pytest.raises(ValueError, match="advantages: this loss is sequence-level"):
        policy_loss(batch.log_probs, batch.old_log_probs, per_token, batch.action_mask)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(policy_loss_type="gmpo", dual_clip=3.0), r"--actor\.dual_clip=3\.0 is not meaningful for"),
        (
            dict(policy_loss_type="dr_grpo"),
            r"--actor\.loss_agg_mode token-mean cannot be expressed by --actor\.policy_loss_type=dr_grpo.*"
            r"GMPO_PLUGINS_LOSS_HPARAMS='\{\"reduction\": \"seq-mean-token-sum-norm\"\}'",
        ),
        (dict(policy_loss_type="grpo", clip_eps_low=1.5), r"--actor\.eps_clip_low_high \(LOW\)=1\.5 is not valid"),
        (dict(policy_loss_type="gmpo", clip_eps_high=-0.4), r"LOG-space bound"),
        (dict(policy_loss_type="gmpo_plugins.nope"), r"'gmpo_plugins\.nope' is unknown; valid: ppo, gspo, .*gmpo"),
        (dict(policy_loss_type="gmp"), r"is unknown; valid: .*gmpo_plugins\.gspo"),
    ],
)
def test_refusals_name_the_openrlhf_flag(loss_module, kwargs, match):
    with pytest.raises(OpenRLHFConfigError, match=match):
        loss_module.PolicyLoss(**kwargs)


def test_token_mean_for_a_sequence_level_loss_warns_once(loss_module, monkeypatch, caplog):
    monkeypatch.setattr(options, "_warned", set())
    with caplog.at_level(logging.WARNING, logger=options.__name__):
        loss_module.PolicyLoss(policy_loss_type="gmpo_seqclip", token_level_loss=False)
        assert not caplog.records
        loss_module.PolicyLoss(policy_loss_type="gmpo_seqclip", token_level_loss=True)
        loss_module.PolicyLoss(policy_loss_type="gmpo_seqclip", token_level_loss=True)
    assert len(caplog.records) == 1
    assert "--actor.loss_agg_mode seq-mean-token-mean" in caplog.records[0].getMessage()
