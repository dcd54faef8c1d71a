"""verl configs composed with verl's own Hydra defaults: what reaches our loss, and what is
refused with a message naming the verl field."""

from __future__ import annotations

import logging

import pytest
import torch
from verl.trainer.ppo.core_algos import get_policy_loss_fn
from verl.workers.config import FSDPActorConfig
from verl.workers.utils.losses import ppo_loss

from gmpo_plugins import get_loss
from gmpo_plugins.adapters.verl import VerlConfigError, is_ours, options
from gmpo_plugins.adapters.verl.options import batch_info_from_config, hparams_from_config

from . import engine
from .releases import needs_token_sum

ADAPTER_LOGGER = "gmpo_plugins.adapters.verl.options"


@pytest.fixture(scope="module")
def micro_batch(rollout):
    return engine.engine_batch(rollout.td)


def _call(model, config, micro_batch):
    return ppo_loss(config, engine.forward(model, micro_batch), micro_batch, dp_group=None)


def test_composed_gmpo_config_is_valid_and_reaches_our_loss(model, actor_config, micro_batch, caplog):
    config = actor_config("gmpo", clip_ratio_low=0.4, clip_ratio_high=0.4, loss_agg_mode="seq-mean-token-mean")
    assert isinstance(config, FSDPActorConfig) and config.policy_loss.loss_mode == "gmpo"
    assert is_ours(get_policy_loss_fn(config.policy_loss.loss_mode))
    with caplog.at_level(logging.WARNING, logger=ADAPTER_LOGGER):
        loss, metrics = _call(model, config, micro_batch)
    assert not caplog.records  # seq-mean-token-mean is the method's own reduction: silent
    assert {"actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"} <= set(metrics)
    assert metrics["actor/gmpo/seq_weight_max"].values[0] >= metrics["actor/gmpo/seq_weight_min"].values[0] > 0
    assert metrics["actor/pg_clipfrac_lower"].values[0] == 0.0  # gmpo has no dual clip
    assert loss.requires_grad

    # what the loss received: log-space eps from clip_ratio_*, the engine's global counts
    hparams = hparams_from_config(get_loss("gmpo"), config, config.loss_agg_mode, "gmpo")
    assert hparams == {"eps_low": 0.4, "eps_high": 0.4}
    batch = batch_info_from_config(config, get_loss("gmpo"), hparams, "gmpo")
    assert (batch.dp_size, batch.global_batch_size, batch.global_num_tokens) == (
        1,
        8,
        int(micro_batch["loss_mask"].sum()),
    )


def test_verl_default_token_mean_warns_once_for_sequence_level_losses(
    model, actor_config, micro_batch, caplog, monkeypatch
):
    monkeypatch.setattr(options, "_warned", set())  # a fresh process
    config = actor_config("gmpo_nonorm")  # verl's default loss_agg_mode: token-mean
    assert config.loss_agg_mode == "token-mean"
    with caplog.at_level(logging.WARNING, logger=ADAPTER_LOGGER):
        first, _ = _call(model, config, micro_batch)
        second, _ = _call(model, config, micro_batch)
    messages = [r.getMessage() for r in caplog.records if r.name == ADAPTER_LOGGER]
    assert len(messages) == 1
    assert "loss_mode=gmpo_nonorm" in messages[0]
    assert "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean" in messages[0]
    silent = actor_config("gmpo_nonorm", loss_agg_mode="seq-mean-token-mean")
    assert _call(model, silent, micro_batch)[0].item() == pytest.approx(first.item(), abs=1e-7)


def test_unknown_loss_name_gets_verls_error_listing_our_names(model, actor_config, micro_batch):
    config = actor_config("gmpo_plugins.gmpo_typo")  # verl does not validate loss_mode at config time
    with pytest.raises(ValueError, match="Unsupported loss mode: gmpo_plugins.gmpo_typo") as info:
        _call(model, config, micro_batch)
    for name in ("'gmpo'", "'gmpo_plugins.gmpo'", "'gmpo_plugins.gspo'", "'vanilla'"):
        assert name in str(info.value)


@pytest.mark.parametrize("value", [0, -0.1])
def test_nonpositive_clip_ratio_low_for_gmpo_is_a_clear_error(model, actor_config, micro_batch, value):
    config = actor_config("gmpo", clip_ratio_low=value, loss_agg_mode="seq-mean-token-mean")
    with pytest.raises(VerlConfigError) as info:
        _call(model, config, micro_batch)
    message = str(info.value)
    assert f"actor_rollout_ref.actor.clip_ratio_low={value}" in message
    assert "loss_mode=gmpo" in message and "LOG-space" in message and "0.4" in message


@pytest.mark.parametrize(
    ("loss_mode", "fields", "expected"),
    [
        pytest.param(
            "gmpo", {"loss_agg_mode": "token-sum"}, "loss_agg_mode=seq-mean-token-mean", marks=needs_token_sum
        ),
        ("gmpo_plugins.gspo", {"loss_agg_mode": "seq-mean-token-sum"}, "loss_agg_mode=seq-mean-token-mean"),
        (
            "gmpo_plugins.gpg",  # bare gpg is verl's own
            {"loss_agg_mode": "seq-mean-token-sum-norm"},
            "['token-mean', 'seq-mean-token-mean', 'token-sum', 'seq-mean-token-sum']",
        ),
        ("grpo", {"clip_ratio_low": 1.0}, "actor_rollout_ref.actor.clip_ratio_low=1.0"),
        ("grpo", {"clip_ratio_c": 1.0}, "actor_rollout_ref.actor.clip_ratio_c=1.0"),
        ("dr_grpo", {"loss_agg_mode": "seq-mean-token-sum-norm", "loss_scale_factor": 0}, "loss_scale_factor=0"),
        ("dr_grpo", {"loss_agg_mode": "token-mean"}, "['seq-mean-token-sum-norm']"),
        ("dapo", {"loss_agg_mode": "seq-mean-token-mean"}, "['token-mean']"),
    ],
)
def test_settings_the_loss_cannot_honour_fail_at_the_first_call(
    model, actor_config, micro_batch, loss_mode, fields, expected
):
    config = actor_config(loss_mode, **fields)
    with pytest.raises(VerlConfigError, match="actor_rollout_ref.actor") as info:
        _call(model, config, micro_batch)
    assert expected in str(info.value) and f"loss_mode={loss_mode}" in str(info.value)


def test_null_clip_ratio_low_falls_back_to_clip_ratio_as_verl_does(actor_config):
    config = actor_config("gmpo", clip_ratio=0.3, clip_ratio_low=None, loss_agg_mode="seq-mean-token-mean")
    assert hparams_from_config(get_loss("gmpo"), config, config.loss_agg_mode, "gmpo")["eps_low"] == 0.3


def test_token_level_advantages_are_refused_by_sequence_level_losses(model, actor_config, rollout):
    padded = rollout.td.clone()
    ramp = 0.5 * torch.arange(padded["advantages"].shape[1])
    padded["advantages"] = padded["advantages"] + ramp * padded["response_mask"]
    micro_batch = engine.engine_batch(padded)
    config = actor_config("gmpo", clip_ratio_low=0.4, clip_ratio_high=0.4, loss_agg_mode="seq-mean-token-mean")
    with pytest.raises(ValueError, match="advantages: this loss is sequence-level"):
        _call(model, config, micro_batch)
