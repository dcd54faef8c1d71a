"""Values derived by hand (numbers in the comments), for every loss and reduction."""

from __future__ import annotations

import math

import pytest
import torch

from gmpo_plugins import BatchInfo, LossInputs, get_loss


def one_sequence(log_ratios, advantage, dtype=torch.float64):
    r = torch.tensor([log_ratios], dtype=dtype)
    log_probs = torch.zeros_like(r, requires_grad=True)
    return LossInputs(log_probs, -r, torch.tensor([advantage], dtype=dtype), torch.ones_like(r, dtype=torch.bool))


SIX = [math.log(6.0)] + [0.0] * 7  # 8 tokens: 7 with ratio 1, one with ratio 6


def test_gmpo_noclip_is_geometric_mean_of_ratios():
    inputs = one_sequence(SIX, 1.0)
    out = get_loss("gmpo_noclip")(inputs)
    out.loss.backward()
    w = 6 ** (1 / 8)  # 1.2510334
    assert w == pytest.approx(1.2510, abs=1e-4)
    assert out.loss.item() == pytest.approx(-w, rel=1e-12)
    assert torch.allclose(inputs.log_probs.grad, torch.full((1, 8), -w / 8, dtype=torch.float64))


def test_gmpo_clips_the_outlier_for_positive_advantage():
    inputs = one_sequence(SIX, 2.0)
    out = get_loss("gmpo")(inputs)
    out.loss.backward()
    w = math.exp(0.4 / 8)  # ln 6 clipped to 0.4: w = e^0.05 = 1.0512711
    assert out.loss.item() == pytest.approx(-2.0 * w, rel=1e-12)
    expected = torch.full((1, 8), -2.0 * w / 8, dtype=torch.float64)
    expected[0, 0] = 0.0  # the clipped token gets no gradient
    assert torch.allclose(inputs.log_probs.grad, expected, rtol=1e-12)
    assert out.metrics["clip_frac_high"].item() == pytest.approx(1 / 8)
    assert out.metrics["clip_frac_low"].item() == 0.0
    assert out.metrics["seq_weight_max"].item() == pytest.approx(6 ** (1 / 8))  # raw, unclipped
    assert out.metrics["log_ratio_max"].item() == pytest.approx(math.log(6.0))


def test_gmpo_negative_advantage_clips_only_the_low_side():
    # r = [ln 6, -1, 0 x 6], A = -1: ln 6 stays (unbounded side), -1 is clipped to -0.4.
    inputs = one_sequence([math.log(6.0), -1.0] + [0.0] * 6, -1.0)
    out = get_loss("gmpo")(inputs)
    out.loss.backward()
    w = math.exp((math.log(6.0) - 0.4) / 8)  # e^0.173970 = 1.190033
    assert out.loss.item() == pytest.approx(w, rel=1e-12)
    expected = torch.full((1, 8), w / 8, dtype=torch.float64)
    expected[0, 1] = 0.0
    assert torch.allclose(inputs.log_probs.grad, expected, rtol=1e-12)
    assert out.metrics["clip_frac_low"].item() == pytest.approx(1 / 8)
    assert out.metrics["clip_frac_high"].item() == 0.0
    assert out.metrics["ppo_kl"].item() == pytest.approx(-(math.log(6.0) - 1.0) / 8)


def test_gmpo_asymmetric_eps_and_batch_normalisation():
    # Two sequences; eps_high = 0.1. Seq 0: r = [0.3, 0.1], A = 1 -> l = [0.1, 0.1], w = e^0.1.
    # Seq 1: r = [-0.2], A = -0.5, eps_low = 0.1 -> l = -0.1, w = e^-0.1.
    r = torch.tensor([[0.3, 0.1], [-0.2, 0.0]], dtype=torch.float64)
    log_probs = torch.zeros_like(r, requires_grad=True)
    mask = torch.tensor([[True, True], [True, False]])
    inputs = LossInputs(log_probs, -r, torch.tensor([1.0, -0.5], dtype=torch.float64), mask)
    per_seq = -1.0 * math.exp(0.1) + 0.5 * math.exp(-0.1)  # -0.652752
    local = get_loss("gmpo")(inputs, eps_low=0.1, eps_high=0.1)
    assert local.loss.item() == pytest.approx(per_seq / 2, rel=1e-12)
    scaled = get_loss("gmpo")(inputs, BatchInfo(dp_size=2, global_batch_size=8), eps_low=0.1, eps_high=0.1)
    assert scaled.loss.item() == pytest.approx(per_seq / 8 * 2, rel=1e-12)
    scaled.loss.backward()
    # both tokens of seq 0 are clipped (0.3 > 0.1 and 0.1 == 0.1 is not above the band)
    assert log_probs.grad[0, 0].item() == 0.0
    assert log_probs.grad[0, 1].item() == pytest.approx(-math.exp(0.1) / 2 * 2 / 8)
    assert log_probs.grad[1, 0].item() == 0.0


def test_gmpo_seqclip_and_nonorm():
    # r = [0.6, 0.4, -0.2], A = 1. seqclip: mean 0.2667 < 0.4, unclipped, w = e^(0.8/3).
    inputs = one_sequence([0.6, 0.4, -0.2], 1.0)
    assert get_loss("gmpo_seqclip")(inputs).loss.item() == pytest.approx(-math.exp(0.8 / 3), rel=1e-12)
    # eps_high 0.1: the sequence mean is clipped, all tokens lose their gradient
    out = get_loss("gmpo_seqclip")(inputs, eps_high=0.1)
    out.loss.backward()
    assert out.loss.item() == pytest.approx(-math.exp(0.1), rel=1e-12)
    assert torch.count_nonzero(inputs.log_probs.grad) == 0
    assert out.metrics["clip_frac_high"].item() == 1.0
    # nonorm: token clip then the sum: l = [0.4, 0.4, -0.2] -> w = e^0.6
    assert get_loss("gmpo_nonorm")(inputs).loss.item() == pytest.approx(-math.exp(0.6), rel=1e-12)


# Two sequences for the ratio-space losses: seq 0 ratios [1.5, 1.0], A = 1; seq 1 ratio [0.5], A = -1.
# Per-token clipped surrogate with eps 0.2: [-1.2 (clipped), -1.0], [0.8 (clipped)].
def grpo_inputs():
    r = torch.log(torch.tensor([[1.5, 1.0], [0.5, 1.0]], dtype=torch.float64))
    log_probs = torch.zeros_like(r, requires_grad=True)
    mask = torch.tensor([[True, True], [True, False]])
    return LossInputs(log_probs, -r, torch.tensor([1.0, -1.0], dtype=torch.float64), mask)


@pytest.mark.parametrize(
    "reduction, hparams, expected",
    [
        ("token-mean", {}, (-1.2 - 1.0 + 0.8) / 3),  # -0.466667
        ("seq-mean-token-mean", {}, (-2.2 / 2 + 0.8) / 2),  # -0.15
        ("seq-mean-token-sum-norm", {}, (-2.2 / 2 + 0.8 / 2) / 2),  # -0.35, L = T = 2
        ("seq-mean-token-sum-norm", {"norm_length": 4}, (-2.2 / 4 + 0.8 / 4) / 2),  # -0.175
    ],
)
def test_grpo_reductions(reduction, hparams, expected):
    inputs = grpo_inputs()
    out = get_loss("grpo")(inputs, reduction=reduction, **hparams)
    assert out.loss.item() == pytest.approx(expected, rel=1e-12)
    assert out.metrics["clip_frac_high"].item() == pytest.approx(1 / 3)
    assert out.metrics["clip_frac_low"].item() == pytest.approx(1 / 3)


def test_grpo_gradient_and_global_token_normalisation():
    inputs = grpo_inputs()
    out = get_loss("grpo")(inputs, BatchInfo(dp_size=4, global_num_tokens=12), reduction="token-mean")
    assert out.loss.item() == pytest.approx((-1.2 - 1.0 + 0.8) / 12 * 4, rel=1e-12)
    out.loss.backward()
    # only the unclipped token (ratio 1, A = 1) has gradient: -A * ratio / 12 * 4
    expected = torch.tensor([[0.0, -1.0 / 3], [0.0, 0.0]], dtype=torch.float64)
    assert torch.allclose(inputs.log_probs.grad, expected, rtol=1e-12)


def test_named_variants_differ_only_in_defaults():
    inputs = grpo_inputs()
    assert get_loss("dapo")(inputs).loss.item() == pytest.approx((-1.28 - 1.0 + 0.8) / 3, rel=1e-12)
    assert get_loss("dr_grpo")(inputs).loss.item() == pytest.approx(-0.35, rel=1e-12)


def test_dual_clip_caps_negative_advantage_loss():
    # ratio 5 with A = -1: max(5, 1.2) = 5, dual clip 3 caps it at 3 (and kills the gradient)
    inputs = one_sequence([math.log(5.0), 0.0], -1.0)
    out = get_loss("grpo")(inputs, dual_clip=3.0, reduction="token-mean")
    out.loss.backward()
    assert out.loss.item() == pytest.approx((3.0 + 1.0) / 2, rel=1e-12)
    assert inputs.log_probs.grad[0, 0].item() == 0.0
    assert inputs.log_probs.grad[0, 1].item() == pytest.approx(0.5)
    assert out.metrics["clip_frac_dual"].item() == pytest.approx(0.5)


def test_gspo_clips_the_sequence_ratio():
    # r = [0.2, 0.0]: s = e^0.1 = 1.105171. A = 1, eps_high 0.05: clipped to 1.05, no gradient.
    inputs = one_sequence([0.2, 0.0], 1.0)
    out = get_loss("gspo")(inputs, eps_low=0.05, eps_high=0.05)
    out.loss.backward()
    assert out.loss.item() == pytest.approx(-1.05, rel=1e-12)
    assert torch.count_nonzero(inputs.log_probs.grad) == 0
    # A = -1: max(s, 1.05) = s, unclipped; each token gets s / 2
    inputs = one_sequence([0.2, 0.0], -1.0)
    out = get_loss("gspo")(inputs, eps_low=0.05, eps_high=0.05)
    out.loss.backward()
    s = math.exp(0.1)
    assert out.loss.item() == pytest.approx(s, rel=1e-12)
    assert torch.allclose(inputs.log_probs.grad, torch.full((1, 2), s / 2, dtype=torch.float64))


@pytest.mark.parametrize(
    "estimator, value", [("k1", -math.log(2)), ("k2", math.log(2) ** 2 / 2), ("k3", 1 - math.log(2))]
)
def test_kl_term_added_per_sequence(estimator, value):
    # ref - log_probs = ln 2 on both tokens; r = 0, A = 1 -> policy part -1.
    inputs = one_sequence([0.0, 0.0], 1.0)
    inputs.ref_log_probs = torch.full((1, 2), math.log(2), dtype=torch.float64)
    out = get_loss("gmpo")(inputs, kl_beta=0.5, kl_estimator=estimator)
    assert out.metrics["kl"].item() == pytest.approx(value, rel=1e-12)
    assert out.metrics["policy_loss"].item() == pytest.approx(-1.0)
    assert out.loss.item() == pytest.approx(-1.0 + 0.5 * value, rel=1e-12)


def test_rollout_is_weights_scale_the_policy_term():
    inputs = one_sequence([0.0, 0.0], 1.0)
    inputs.rollout_is_weights = torch.tensor([[0.5, 1.5]], dtype=torch.float64)  # sequence weight: mean 1.0
    assert get_loss("gmpo")(inputs).loss.item() == pytest.approx(-1.0)
    inputs.rollout_is_weights = torch.tensor([0.25], dtype=torch.float64)
    assert get_loss("gmpo")(inputs).loss.item() == pytest.approx(-0.25)
    token = grpo_inputs()
    token.rollout_is_weights = torch.tensor([[2.0, 1.0], [1.0, 1.0]], dtype=torch.float64)
    out = get_loss("grpo")(token, reduction="token-mean")
    assert out.loss.item() == pytest.approx((-2.4 - 1.0 + 0.8) / 3, rel=1e-12)


def test_empty_rows_contribute_nothing_and_are_not_counted():
    inputs = one_sequence([0.1, 0.2], 1.0)
    padded = LossInputs(
        torch.zeros(2, 2, dtype=torch.float64, requires_grad=True),
        torch.cat([inputs.old_log_probs, torch.full((1, 2), float("nan"), dtype=torch.float64)]),
        torch.tensor([1.0, 5.0], dtype=torch.float64),
        torch.tensor([[True, True], [False, False]]),
    )
    for name in ("gmpo", "grpo", "gspo", "dapo"):
        single = get_loss(name)(inputs).loss
        out = get_loss(name)(padded)
        assert out.loss.item() == pytest.approx(single.item(), rel=1e-12), name
        out.loss.backward()
        assert torch.all(padded.log_probs.grad[1] == 0)
        padded.log_probs.grad = None
