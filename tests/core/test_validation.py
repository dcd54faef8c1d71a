"""Bad input raises a TypeError/ValueError that names the argument."""

from __future__ import annotations

import math

import pytest
import torch

from gmpo_plugins import BatchInfo, LossInputs, get_loss

from .batches import random_batch


def variant(**changes) -> LossInputs:
    inputs = random_batch(3, 4, seed=1, dtype=torch.float32)
    for key, value in changes.items():
        setattr(inputs, key, value)
    return inputs


@pytest.mark.parametrize(
    "changes, error, words",
    [
        ({"old_log_probs": torch.zeros(3, 5)}, ValueError, ["old_log_probs", "(B, T)", "(3, 4)", "(3, 5)"]),
        ({"mask": torch.ones(4, 3, dtype=torch.bool)}, ValueError, ["mask", "(3, 4)"]),
        ({"advantages": torch.zeros(2)}, ValueError, ["advantages", "(B,)"]),
        ({"log_probs": torch.zeros(3, 4, dtype=torch.int64)}, TypeError, ["log_probs", "floating", "torch.int64"]),
        ({"log_probs": torch.zeros(12)}, ValueError, ["log_probs", "2-D"]),
        ({"old_log_probs": [[0.0] * 4] * 3}, TypeError, ["old_log_probs", "torch.Tensor", "list"]),
        ({"advantages": torch.zeros(3, dtype=torch.int32)}, TypeError, ["advantages", "floating"]),
        ({"mask": torch.full((3, 4), 2)}, ValueError, ["mask", "0/1"]),
        ({"old_log_probs": torch.full((3, 4), float("nan"))}, ValueError, ["old_log_probs", "finite"]),
        ({"advantages": torch.tensor([1.0, math.inf, 0.0])}, ValueError, ["advantages", "finite"]),
        ({"ref_log_probs": torch.zeros(3, 2)}, ValueError, ["ref_log_probs", "(3, 4)"]),
        ({"rollout_is_weights": torch.full((3,), -1.0)}, ValueError, ["rollout_is_weights", ">= 0"]),
        ({"advantages": torch.arange(12.0).view(3, 4)}, ValueError, ["advantages", "sequence-level", "vary"]),
    ],
)
def test_bad_tensors_name_the_argument(changes, error, words):
    with pytest.raises(error) as info:
        get_loss("gmpo")(variant(**changes))
    for word in words:
        assert word in str(info.value)


def test_inf_in_log_probs_is_rejected_only_at_valid_positions():
    inputs = variant()
    padded = inputs.log_probs.detach().clone()
    padded[~inputs.mask] = float("-inf")  # padding may hold anything
    assert torch.isfinite(get_loss("gmpo")(variant(log_probs=padded)).loss)
    padded[0, 0] = float("inf")
    with pytest.raises(ValueError, match="log_probs"):
        get_loss("gmpo")(variant(log_probs=padded))


def test_token_varying_advantages_are_fine_for_token_level_losses():
    inputs = variant(advantages=torch.arange(12.0).view(3, 4))
    assert torch.isfinite(get_loss("grpo")(inputs).loss)


def test_row_constant_token_advantages_are_accepted_by_sequence_losses():
    inputs = random_batch(3, 4, seed=1, token_advantages=True)
    seq = random_batch(3, 4, seed=1)
    assert get_loss("gmpo")(inputs).loss.item() == pytest.approx(get_loss("gmpo")(seq).loss.item(), rel=1e-12)


def test_tensors_on_different_devices():
    inputs = variant(old_log_probs=torch.zeros(3, 4, device="meta"))
    with pytest.raises(ValueError, match=r"old_log_probs: is on meta but log_probs is on cpu"):
        get_loss("gmpo")(inputs)


@pytest.mark.parametrize(
    "name, hparams, words",
    [
        ("gmpo", {"eps_low": 0.0}, ["eps_low", "> 0", "0.0"]),
        ("gmpo", {"eps_high": -0.1}, ["eps_high", "> 0"]),
        ("gmpo", {"eps_high": math.nan}, ["eps_high", "finite"]),
        ("grpo", {"eps_low": 1.0}, ["eps_low", "< 1"]),
        ("grpo", {"reduction": "token-max"}, ["reduction", "token-mean", "seq-mean-token-mean"]),
        ("grpo", {"dual_clip": 0.5}, ["dual_clip", "> 1"]),
        ("gmpo", {"kl_estimator": "k4"}, ["kl_estimator", "k1", "k3"]),
        ("gmpo", {"kl_beta": -1}, ["kl_beta", ">= 0"]),
        ("dr_grpo", {"norm_length": 0}, ["norm_length", "int > 0"]),
        ("dapo", {"reduction": "seq-mean-token-mean"}, ["reduction", "['token-mean']"]),
        ("dr_grpo", {"reduction": "token-mean"}, ["reduction", "['seq-mean-token-sum-norm']"]),
        # e^bound must stay finite in float32: 1e6 would switch the overflow guard off
        ("grpo", {"log_ratio_bound": 1e6}, ["log_ratio_bound", "<= 79.85"]),
        ("gmpo", {"log_ratio_bound": 80.0}, ["log_ratio_bound", "<= 79.85"]),
        ("gspo", {"log_ratio_bound": math.inf}, ["log_ratio_bound", "finite"]),
    ],
)
def test_bad_hyper_parameters(name, hparams, words):
    with pytest.raises(ValueError) as info:
        get_loss(name)(variant(), **hparams)
    for word in [name, *words]:
        assert word in str(info.value)


def test_unknown_hyper_parameter_lists_valid_ones_and_suggests():
    with pytest.raises(TypeError) as info:
        get_loss("gmpo")(variant(), eps_hi=0.3)
    message = str(info.value)
    assert "eps_hi" in message and "'eps_high'" in message and "did you mean 'eps_high'" in message


def test_hyper_parameters_checked_even_without_validation():
    with pytest.raises(ValueError, match="eps_low"):
        get_loss("gmpo")(variant(), validate=False, eps_low=-1.0)


def test_kl_beta_without_reference():
    with pytest.raises(ValueError, match="ref_log_probs is required when kl_beta > 0"):
        get_loss("gmpo")(variant(), kl_beta=0.1)


@pytest.mark.parametrize(
    "batch, words",
    [
        (BatchInfo(dp_size=0), ["batch.dp_size", "int >= 1"]),
        (BatchInfo(dp_size=2.0), ["batch.dp_size"]),
        (BatchInfo(global_batch_size=0), ["batch.global_batch_size", "> 0"]),
        (BatchInfo(global_num_tokens=torch.tensor(-3)), ["batch.global_num_tokens", "> 0"]),
    ],
)
def test_bad_batch_info(batch, words):
    with pytest.raises(ValueError) as info:
        get_loss("gmpo")(variant(), batch)
    for word in words:
        assert word in str(info.value)


def test_validation_off_skips_value_checks():
    inputs = variant(mask=torch.full((3, 4), 2))  # a bad mask is no longer looked at
    assert get_loss("gmpo")(inputs, validate=False).loss.shape == ()


def test_structure_is_checked_even_without_value_validation():
    with pytest.raises(ValueError, match=r"old_log_probs: expected shape \(B, T\)"):
        get_loss("gmpo")(variant(old_log_probs=torch.zeros(3, 5)), validate=False)
    with pytest.raises(TypeError, match="log_probs: expected a floating-point tensor"):
        get_loss("grpo")(variant(log_probs=torch.zeros(3, 4, dtype=torch.int64)), validate=False)


def test_value_check_policy_for_adapters(monkeypatch):
    from gmpo_plugins.adapters import _common as validation

    monkeypatch.setattr(validation, "_value_checked", set())
    monkeypatch.delenv("GMPO_PLUGINS_VALIDATE", raising=False)
    assert [validation.value_checks_enabled("fw:gmpo") for _ in range(3)] == [True, False, False]
    assert validation.value_checks_enabled("fw:grpo") is True  # first call of another loss
    monkeypatch.setenv("GMPO_PLUGINS_VALIDATE", "always")
    assert validation.value_checks_enabled("fw:gmpo") is True
    monkeypatch.setenv("GMPO_PLUGINS_VALIDATE", "never")
    assert validation.value_checks_enabled("fw:new") is False
    monkeypatch.setenv("GMPO_PLUGINS_VALIDATE", "sometimes")
    with pytest.raises(ValueError, match=r"GMPO_PLUGINS_VALIDATE: expected one of \['first', 'always', 'never'\]"):
        validation.value_checks_enabled("fw:gmpo")


@pytest.mark.parametrize("impl", ["eager", "torch"])
@pytest.mark.parametrize("clip", ["token", "sequence"])
def test_clipping_family_member_without_an_eps_names_it(clip, impl):
    # geometric_mean_loss is the family's shared body: a clipping variant called without a bound
    # is refused with the bound's name, not a TypeError from inside torch.where
    from gmpo_plugins.core.losses.gmpo import geometric_mean_loss

    inputs = random_batch(seed=0)
    with pytest.raises(ValueError, match=f"clip='{clip}' needs eps_low"):
        geometric_mean_loss(
            inputs,
            BatchInfo(),
            clip=clip,
            normalise=True,
            kl_beta=0.0,
            kl_estimator="k3",
            log_ratio_bound=20.0,
            eps_high=0.4,
            impl=impl,
        )


def test_log_ratio_bound_up_to_its_limit_keeps_float32_finite():
    # the largest accepted bound, a float32 log ratio of 100 and A = -1e3: exp(79.85) * 1e3 = 4.6e37
    from gmpo_plugins.core.prepared import LOG_RATIO_BOUND_MAX

    assert LOG_RATIO_BOUND_MAX == pytest.approx(0.9 * math.log(torch.finfo(torch.float32).max))
    for name in ("grpo", "gmpo_noclip", "gspo"):
        log_probs = torch.tensor([[100.0]], requires_grad=True)
        inputs = LossInputs(log_probs, torch.zeros(1, 1), torch.tensor([-1e3]), torch.tensor([[True]]))
        out = get_loss(name)(inputs, log_ratio_bound=LOG_RATIO_BOUND_MAX)
        out.loss.backward()
        assert math.isfinite(out.loss.item()) and out.loss.item() > 1e37, name
        assert torch.isfinite(log_probs.grad).all(), name


@pytest.mark.parametrize(
    "name, impl, words",
    [
        ("grpo", "triton", ["grpo", "impl", "'auto', 'eager', 'torch'", "'triton'"]),
        ("gmpo", "fast", ["gmpo", "impl", "'eager'", "'fast'"]),
    ],
)
def test_impl_is_checked_by_the_call(name, impl, words):
    with pytest.raises(ValueError) as info:
        get_loss(name)(variant(), impl=impl)
    for word in words:
        assert word in str(info.value)


def test_impl_is_refused_by_a_loss_with_one_formulation():
    from gmpo_plugins.core.spec import LossSpec

    spec = LossSpec(
        name="single",
        fn=lambda inputs, batch: get_loss("gmpo").fn(inputs, batch, **get_loss("gmpo").defaults),
        description="",
    )
    with pytest.raises(ValueError, match=r"single: impl must be None \(it has one formulation\), got 'eager'"):
        spec(variant(), impl="eager")


@pytest.mark.parametrize("name", ["gmpo", "grpo", "gspo"])
def test_impl_chooses_the_path_with_validation(name, monkeypatch):
    """``spec(inputs, impl="eager")`` runs the eager oracle (and still checks values); the
    default runs the fused path; both give the same loss."""
    from gmpo_plugins.core.losses import gmpo, gspo, ppo_clip

    calls = []
    for module, attribute in (
        (gmpo, "eager_geometric_mean_loss"),
        (gspo, "eager_gspo_loss"),
        (ppo_clip, "eager_clipped_ratio_loss"),
    ):
        original = getattr(module, attribute)
        monkeypatch.setattr(module, attribute, lambda *a, _f=original, **k: calls.append("eager") or _f(*a, **k))
    fused = get_loss(name)(variant()).loss
    assert calls == []
    eager = get_loss(name)(variant(), impl="eager").loss
    assert calls == ["eager"]
    assert eager.item() == pytest.approx(fused.item(), rel=1e-6)
    with pytest.raises(ValueError, match="log_probs: expected finite values"):
        get_loss(name)(variant(log_probs=torch.full((3, 4), math.nan)), impl="eager")
