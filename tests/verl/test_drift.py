"""verl drift: a ``config.global_batch_info`` without a count the loss normalises by is an
error naming the key, never a per-micro-batch mean.

verl 0.9.1's ``ppo_loss`` fills dp_size, global_batch_size and batch_num_tokens before every
call. The drift is simulated by calling the loss verl's own registry returns with a fresh
actor config whose ``global_batch_info`` lacks one of them, as a verl release that reached
the loss from another call path (or renamed a key) would.
"""

from __future__ import annotations

import pytest
import torch
from verl.trainer.ppo.core_algos import get_policy_loss_fn

from gmpo_plugins.adapters.upstream import UpstreamDriftError, installed_version

from . import engine

B, T = 3, 5


def _call(loss_mode: str, info: dict, **fields):
    config = engine.make_actor_config(loss_mode, **fields)
    config.global_batch_info.clear()
    config.global_batch_info.update(info)
    g = torch.Generator().manual_seed(0)
    log_prob = (-torch.rand(B, T, generator=g, dtype=torch.float64)).requires_grad_()
    mask = torch.ones(B, T, dtype=torch.bool)
    return get_policy_loss_fn(loss_mode)(
        old_log_prob=log_prob.detach() - 0.01,
        log_prob=log_prob,
        advantages=torch.tensor([[1.0], [-1.0], [0.5]], dtype=torch.float64).expand(B, T),
        response_mask=mask,
        loss_agg_mode=config.loss_agg_mode,
        config=config,
    )


@pytest.mark.parametrize(
    ("loss_mode", "fields", "missing"),
    [
        ("gmpo", {"loss_agg_mode": "seq-mean-token-mean"}, "global_batch_size"),  # sequence-level
        ("gmpo_plugins.dapo", {}, "batch_num_tokens"),  # token-mean
    ],
)
def test_a_missing_count_is_an_error_naming_the_key(loss_mode, fields, missing):
    info = {"dp_size": 1, "global_batch_size": B, "batch_num_tokens": B * T}
    del info[missing]
    with pytest.raises(UpstreamDriftError) as error:
        _call(loss_mode, info, **fields)
    message = str(error.value)
    assert f"verl's config.global_batch_info has no {missing!r}" in message
    assert f"loss_mode={loss_mode} needs" in message and f"verl {installed_version('verl')}" in message
    print(message)


def test_an_empty_global_batch_info_names_dp_size():
    with pytest.raises(UpstreamDriftError, match=r"has no 'dp_size' \(keys: \[\]\)"):
        _call("gmpo", {}, loss_agg_mode="seq-mean-token-mean")


def test_a_count_the_loss_does_not_use_may_be_missing():
    # dapo is token-mean: without the sequence count it gives the loss it gives with it
    loss, _ = _call("gmpo_plugins.dapo", {"dp_size": 1, "batch_num_tokens": B * T})
    full, _ = _call("gmpo_plugins.dapo", {"dp_size": 1, "global_batch_size": B, "batch_num_tokens": B * T})
    assert loss.item() == full.item()
