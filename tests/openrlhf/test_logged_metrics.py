"""The registry loss's metrics reach OpenRLHF's own reduction (``ActorPPOTrainer.ppo_train``, run
as OpenRLHF runs it, on the ``tiny`` harness) as ``gmpo/<key>``; ppo's ``training_step`` result is
OpenRLHF's; a changed return shape or a loss that was not called is refused."""

from __future__ import annotations

import inspect
from unittest.mock import patch

import pytest
import torch

from gmpo_plugins import BatchInfo, LossInputs, get_loss
from gmpo_plugins.adapters.openrlhf.logged_metrics import logging_training_step
from gmpo_plugins.adapters.upstream import UpstreamDriftError

GMPO = ["--actor.policy_loss_type", "gmpo", "--actor.eps_clip", "0.2", "--algo.kl.init_coef", "0"]


def two_responses(tiny, actor):
    """Responses 0 and 1 of the tiny harness's batch (5 and 2 valid tokens) as one Experience batch."""
    from openrlhf.trainer.ppo_utils.experience import make_experience_batch, split_experience_batch

    items = split_experience_batch(tiny.build_experience(actor))[:2]
    assert [int(item.action_mask.sum()) for item in items] == [5, 2]
    return items, make_experience_batch(items, packing_samples=False)


def core_metrics(actor, item):
    """The core gmpo metrics (eps 0.2) of one response, on the actor's current forward."""
    with torch.no_grad():
        log_probs = actor(item.sequences[None], item.action_mask[None], attention_mask=item.attention_mask[None])
    inputs = LossInputs(log_probs, item.action_log_probs[None], item.advantages[None], item.action_mask[None].bool())
    out = get_loss("gmpo")(inputs, BatchInfo(), eps_low=0.2, eps_high=0.2)
    return {key: float(value) for key, value in out.metrics.items()}


def test_ppo_train_weighs_the_micro_batches_by_tokens_and_responses(tiny_openrlhf):
    tiny = tiny_openrlhf
    args = tiny.build_args([*GMPO, "--train.micro_batch_size", "1", *tiny.GROUP_ARGS])
    actor = tiny.build_actor()
    trainer, _ = tiny.build_trainer(args, actor, lr=0.0)  # the policy stays put: each micro-batch's core metrics
    trainer.dataloader_pin_memory = False  # OpenRLHF's own argument (default True: a CUDA host buffer)
    items, batch = two_responses(tiny, actor)
    first, second = (core_metrics(actor, item) for item in items)
    # response 0 (A = 1, 5 tokens): 1 token clipped above the band; response 1 (A = -0.5, 2 tokens): 1 below
    assert (first["clip_frac_high"], first["clip_frac_low"]) == (pytest.approx(1 / 5), 0.0)
    assert (second["clip_frac_high"], second["clip_frac_low"]) == (0.0, pytest.approx(1 / 2))
    trainer.replay_buffer.append(batch)
    with patch.object(torch.cuda, "current_device", lambda: torch.device("cpu")):
        status = trainer.ppo_train(kl_ctl=0.0)

    # token-weighted: (5 * 1/5 + 2 * 0) / 7 = 1/7 above, (5 * 0 + 2 * 1/2) / 7 = 1/7 below, 2/7 both:
    # the fractions of the two micro-batches' 7 tokens together
    assert status["gmpo/clip_frac_high"] == pytest.approx(1 / 7, abs=1e-6)
    assert status["gmpo/clip_frac_low"] == pytest.approx(1 / 7, abs=1e-6)
    assert status["gmpo/clip_frac"] == pytest.approx(2 / 7, abs=1e-6)
    assert status["gmpo/ppo_kl"] == pytest.approx((5 * first["ppo_kl"] + 2 * second["ppo_kl"]) / 7, abs=1e-6)
    # extrema: exact over the step, not a weighted mean of the micro-batches' extrema
    for key, extremum in (
        ("log_ratio_min", min),
        ("log_ratio_max", max),
        ("seq_weight_min", min),
        ("seq_weight_max", max),
    ):
        assert status["gmpo/" + key] == pytest.approx(extremum(first[key], second[key]), abs=1e-6), key
    weighted_min = (5 * first["log_ratio_min"] + 2 * second["log_ratio_min"]) / 7
    assert status["gmpo/log_ratio_min"] < weighted_min - 1e-3  # what OpenRLHF's own weighting would have logged
    # per-sequence mean: one response per micro-batch, weighted by responses: (w_0 + w_1) / 2
    assert status["gmpo/seq_weight_mean"] == pytest.approx((first["seq_weight_mean"] + second["seq_weight_mean"]) / 2)
    assert status["gmpo/nonfinite_tokens"] == 0.0
    assert status["ppo_clip_ratio"] == pytest.approx(2 / 7, abs=1e-6)  # OpenRLHF's own, the same reduction
    assert "gmpo/policy_loss" not in status


def trainers_step(tiny, argv, step):
    """``step(trainer, experience, info)`` on a fresh actor, trainer and batch (identical each call)."""
    args = tiny.build_args([*argv, *tiny.GROUP_ARGS])
    actor = tiny.build_actor()
    trainer, strategy = tiny.build_trainer(args, actor)
    experience = tiny.build_experience(actor)
    return trainer, step(trainer, experience, tiny.loss_batch_info(strategy, experience))


def test_ppo_training_step_returns_openrlhfs_result_unchanged(tiny_openrlhf):
    from openrlhf.trainer.ray.ppo_actor import ActorPPOTrainer

    wrapped = ActorPPOTrainer.training_step
    original = wrapped.__wrapped__  # OpenRLHF's own
    ppo = ["--actor.policy_loss_type", "ppo", "--algo.kl.init_coef", "0"]
    _, status = trainers_step(tiny_openrlhf, ppo, lambda t, e, i: t.training_step(e, 0.0, 0, i))
    _, reference = trainers_step(tiny_openrlhf, ppo, lambda t, e, i: original(t, e, 0.0, 0, i))
    assert wrapped is not original and status["weights"] == reference["weights"]
    assert status["metrics"].keys() == reference["metrics"].keys() and not any("gmpo/" in k for k in status["metrics"])
    for key, value in reference["metrics"].items():
        assert torch.equal(torch.as_tensor(status["metrics"][key]), torch.as_tensor(value)), key
    assert float(status["metrics"]["ppo_clip_ratio"]) > 0  # the clip acted: the comparison is not of zeros


def test_another_return_shape_or_an_uncalled_registry_loss_is_refused(tiny_openrlhf):
    from openrlhf.trainer.ray.ppo_actor import ActorPPOTrainer

    original = inspect.unwrap(ActorPPOTrainer.training_step)  # OpenRLHF's own, without the adapter's wrappers
    only_metrics = logging_training_step(lambda self, *args: original(self, *args)["metrics"])
    with pytest.raises(UpstreamDriftError, match=r"training_step returned dict \[.*'policy_loss'.*\], not the"):
        trainers_step(tiny_openrlhf, GMPO, lambda t, e, i: only_metrics(t, e, 0.0, 0, i))
    no_loss = logging_training_step(lambda self, *args: {"metrics": {}, "weights": {}})
    with pytest.raises(UpstreamDriftError, match="did not call its actor_loss_fn"):
        trainers_step(tiny_openrlhf, GMPO, lambda t, e, i: no_loss(t, e, 0.0, 0, i))


class OneRank:
    """OpenRLHF's strategy on one rank: ``all_reduce`` gives the values back (any op)."""

    def all_reduce(self, data, op="mean"):
        assert op in ("max", "sum")
        return dict(data)


def test_the_step_extrema_are_exact_and_only_of_the_keys_the_loss_reported():
    from gmpo_plugins.adapters.openrlhf.logged_metrics import exact_over_ranks

    step = [
        {
            "log_ratio_min": torch.tensor(-0.5),
            "log_ratio_max": torch.tensor(0.25),
            "nonfinite_tokens": torch.tensor(1.0),
        },
        {
            "log_ratio_min": torch.tensor(-0.125),
            "log_ratio_max": torch.tensor(0.75),
            "nonfinite_tokens": torch.tensor(2.0),
        },
    ]
    # seq_weight_* were not reported: left out, not logged as the neutral +-inf
    assert exact_over_ranks(step, OneRank()) == {"log_ratio_min": -0.5, "log_ratio_max": 0.75, "nonfinite_tokens": 3.0}
    assert exact_over_ranks([], OneRank()) == {}


def test_a_micro_batch_without_a_valid_token_does_not_enter_the_step_extrema():
    """Its extrema are the core's 0 for no token; OpenRLHF's weighting gives it weight 0, and so
    does the exact reduction: only the micro-batches with a valid token are kept."""
    from gmpo_plugins.adapters.openrlhf import logged_metrics

    def step_of(tokens):
        def original(self, *args):
            logged_metrics.keep({"log_ratio_min": torch.tensor(0.0 if tokens == 0 else 0.5)})
            return {"metrics": {}, "weights": {}, "num_action_tokens": tokens}

        return logged_metrics.logging_training_step(original)

    kept = []
    token = logged_metrics._step.set(kept)
    try:
        for tokens in (3, 0):
            step_of(tokens)(None)
    finally:
        logged_metrics._step.reset(token)
    assert len(kept) == 1 and logged_metrics.exact_over_ranks(kept, OneRank()) == {"log_ratio_min": 0.5}
