"""Values derived by hand (numbers in the comments), for every loss and reduction."""

from __future__ import annotations

import math

import pytest
import torch

from gmpo_plugins import BatchInfo, LossInputs, get_loss, list_losses

from .batches import complete


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


def test_gmpo_seqclip_clips_the_sum_as_the_authors_code():
    # r = [0.6, 0.4, -0.2], A = 1, eps 0.4. The authors' gmpo_seqclip clips the SUM:
    # S = 0.8 > 0.4 -> 0.4, then / |o| = 3: w = e^(0.4/3) = 1.1426, loss -1.1426, and the
    # clipped sequence has zero gradient. (Clipping the mean instead, 0.2667 < 0.4, gave
    # -e^(0.8/3) = -1.3056 and -1.3056/3 = -0.4352 per token.)
    inputs = one_sequence([0.6, 0.4, -0.2], 1.0)
    out = get_loss("gmpo_seqclip")(inputs)
    out.loss.backward()
    assert out.loss.item() == pytest.approx(-math.exp(0.4 / 3), rel=1e-12)
    assert out.loss.item() == pytest.approx(-1.1426, abs=1e-4)
    assert torch.count_nonzero(inputs.log_probs.grad) == 0
    assert out.metrics["clip_frac_high"].item() == 1.0
    # A = -1: the low side. S = 0.8 > -0.4, unclipped: w = e^(0.8/3), loss +1.3056, each token
    # gets +1.3056/3 = 0.4352
    inputs = one_sequence([0.6, 0.4, -0.2], -1.0)
    out = get_loss("gmpo_seqclip")(inputs)
    out.loss.backward()
    assert out.loss.item() == pytest.approx(math.exp(0.8 / 3), rel=1e-12)
    assert torch.allclose(inputs.log_probs.grad, torch.full((1, 3), math.exp(0.8 / 3) / 3, dtype=torch.float64))
    # r = [0.1, 0.1, 0.1], A = 1: S = 0.3 < 0.4, unclipped: w = e^0.1, gradient -e^0.1/3 = -0.3684
    inputs = one_sequence([0.1, 0.1, 0.1], 1.0)
    out = get_loss("gmpo_seqclip")(inputs)
    out.loss.backward()
    assert out.loss.item() == pytest.approx(-math.exp(0.1), rel=1e-12)
    assert torch.allclose(inputs.log_probs.grad, torch.full((1, 3), -math.exp(0.1) / 3, dtype=torch.float64))


def test_gmpo_nonorm_is_the_authors_gmpo_without_norm():
    # r = [0.6, 0.4, -0.2], A = 1: token clip [0.4, 0.4, -0.2], exp of the sum: w = e^0.6 = 1.8221;
    # the first token is clipped (no gradient), the others get -e^0.6 = -1.8221
    inputs = one_sequence([0.6, 0.4, -0.2], 1.0)
    out = get_loss("gmpo_nonorm")(inputs)
    out.loss.backward()
    assert out.loss.item() == pytest.approx(-math.exp(0.6), rel=1e-12)
    expected = torch.tensor([[0.0, -math.exp(0.6), -math.exp(0.6)]], dtype=torch.float64)
    assert torch.allclose(inputs.log_probs.grad, expected, rtol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gmpo_nonorm_guard_follows_the_dtype(dtype):
    # 60 tokens at r = 0.35 (inside the 0.4 band), A = 1: sum 21, w = e^21 = 1.3188e9 and every
    # token gets -e^21, as in the authors' code (a fixed guard of 20 gave w = e^20 and no gradient).
    inputs = one_sequence([0.35] * 60, 1.0, dtype=dtype)
    out = get_loss("gmpo_nonorm")(inputs)
    out.loss.backward()
    total = float(torch.tensor([0.35] * 60, dtype=dtype).double().sum())  # 21 up to rounding in dtype
    assert out.loss.item() == pytest.approx(-math.exp(total), rel=1e-5)
    assert float(inputs.log_probs.grad.double().min()) == pytest.approx(-math.exp(total), rel=1e-2)
    assert bool((inputs.log_probs.grad != 0).all())
    # 300 tokens at 0.35: sum 105 > P = 0.9 ln(3.4e38) = 79.85: saturated at e^P, finite, no gradient
    inputs = one_sequence([0.35] * 300, 1.0, dtype=dtype)
    out = get_loss("gmpo_nonorm")(inputs)
    out.loss.backward()
    assert out.loss.item() == pytest.approx(-math.exp(0.9 * math.log(torch.finfo(dtype).max)), rel=1e-5)
    assert torch.count_nonzero(inputs.log_probs.grad) == 0


def test_gmpo_nonorm_guard_in_float16():
    # float16 gradients overflow past 65504: P = 0.9 ln 65504 = 9.98; 30 tokens at 0.35 (sum 10.5)
    # saturate at e^9.98 = 21600 with zero gradient instead of an inf gradient
    inputs = one_sequence([0.35] * 30, 1.0, dtype=torch.float16)
    out = get_loss("gmpo_nonorm")(inputs)
    out.loss.backward()
    assert out.loss.item() == pytest.approx(-math.exp(0.9 * math.log(65504.0)), rel=1e-5)
    assert bool(torch.isfinite(inputs.log_probs.grad).all())


def with_is_weights(inputs: LossInputs, weights) -> LossInputs:
    return LossInputs(
        inputs.log_probs,
        inputs.old_log_probs,
        inputs.advantages,
        inputs.mask,
        rollout_is_weights=torch.tensor([weights], dtype=inputs.log_probs.dtype),
    )


@pytest.mark.parametrize(
    "name, aggregation, loss, grad",
    [
        # one sequence, r = [0, 0], A = 1, w = [0.5, 1.5]: the sequence weight is 1
        # arithmetic mean (0.5 + 1.5) / 2 = 1: loss -1, each token -1 / 2 = -0.5
        ("gmpo", "arithmetic_mean", -1.0, [-0.5, -0.5]),
        # geometric mean sqrt(0.75) = 0.8660 (verl geo_mean): loss -0.8660, each token -0.4330
        ("gmpo", "geometric_mean", -math.sqrt(0.75), [-math.sqrt(0.75) / 2] * 2),
        # per token (verl/TRL gspo): value -1 * mean(w) = -1, token t gets -w_t / 2: [-0.25, -0.75]
        ("gspo", "per_token", -1.0, [-0.25, -0.75]),
        ("gmpo", "per_token", -1.0, [-0.25, -0.75]),
        ("gspo", "arithmetic_mean", -1.0, [-0.5, -0.5]),
    ],
)
@pytest.mark.parametrize("impl", ["eager", "torch"])
def test_rollout_is_aggregation(name, aggregation, loss, grad, impl):
    inputs = with_is_weights(one_sequence([0.0, 0.0], 1.0), [0.5, 1.5])
    spec = get_loss(name)
    out = spec.fn(inputs, BatchInfo(), impl=impl, **spec.resolve({"rollout_is_aggregation": aggregation}))
    out.loss.backward()
    assert out.loss.item() == pytest.approx(loss, rel=1e-12)
    assert torch.allclose(inputs.log_probs.grad, torch.tensor([grad], dtype=torch.float64), rtol=1e-12)


def test_rollout_is_aggregation_defaults():
    # gmpo family: the geometric mean (verl geo_mean); gspo: per token (verl and TRL gspo)
    assert get_loss("gmpo").defaults["rollout_is_aggregation"] == "geometric_mean"
    assert get_loss("gmpo_seqclip").defaults["rollout_is_aggregation"] == "geometric_mean"
    assert get_loss("gspo").defaults["rollout_is_aggregation"] == "per_token"
    with pytest.raises(ValueError, match="rollout_is_aggregation must be one of"):
        get_loss("gmpo")(one_sequence([0.0], 1.0), rollout_is_aggregation="harmonic")


def test_kl_clamp_reproduces_verl_low_var_kl():
    # ref - new = d = 3 on one token: k3 = e^3 - 3 - 1 = 16.0855; verl clamps it to 10 (and the
    # clamped token gets no KL gradient); without kl_clamp the value stays 16.0855
    r = torch.zeros(1, 2, dtype=torch.float64)
    log_probs = torch.zeros_like(r, requires_grad=True)
    ref = torch.tensor([[3.0, 0.5]], dtype=torch.float64)
    inputs = LossInputs(
        log_probs, r, torch.zeros(1, dtype=torch.float64), torch.ones_like(r, dtype=torch.bool), ref_log_probs=ref
    )
    k3_half = math.exp(0.5) - 0.5 - 1  # 0.148721
    free = get_loss("gmpo")(inputs, kl_beta=1.0)
    assert free.metrics["kl"].item() == pytest.approx((math.exp(3) - 4 + k3_half) / 2, rel=1e-12)  # 8.1171
    clamped = get_loss("gmpo")(inputs, kl_beta=1.0, kl_clamp=10.0)
    assert clamped.metrics["kl"].item() == pytest.approx((10 + k3_half) / 2, rel=1e-12)  # 5.0744
    clamped.loss.backward()
    # d k3 / d new = 1 - e^d: 0 for the clamped token, (1 - e^0.5) / 2 = -0.3244 for the other
    assert log_probs.grad[0, 0].item() == 0.0
    assert log_probs.grad[0, 1].item() == pytest.approx((1 - math.exp(0.5)) / 2, rel=1e-12)
    for name in ("grpo", "gspo"):
        out = get_loss(name)(inputs, kl_beta=1.0, kl_clamp=10.0)
        assert out.metrics["kl"].item() == pytest.approx((10 + k3_half) / 2, rel=1e-12)


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
        ("seq-mean-token-sum-norm", {}, (-2.2 / 1024 + 0.8 / 1024) / 2),  # -6.836e-4, L = 1024 (default)
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
    assert get_loss("dr_grpo")(inputs).loss.item() == pytest.approx(-1.4 / 2 / 1024, rel=1e-12)


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
    inputs.rollout_is_weights = torch.tensor([[0.5, 1.5]], dtype=torch.float64)  # geometric mean sqrt(0.75)
    assert get_loss("gmpo")(inputs).loss.item() == pytest.approx(-math.sqrt(0.75))
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


def test_dr_grpo_does_not_depend_on_the_split():
    # Two sequences of lengths 4 and 1 padded to T = 4, ratios 1, A = [1, -1]: per-token
    # losses -1 (x4) and +1. Dr.GRPO with L = 8: (-4 / 8 + 1 / 8) / 2 = -0.1875, whole or
    # split into one micro-batch per sequence (the second padded only to T = 1). A default of
    # the padded width gave (-4/4 + 1/4) / 2 = -0.375 whole against (-4/4 + 1/1) / 2 = 0 split.
    log_probs = torch.zeros(2, 4, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[True] * 4, [True, False, False, False]])
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    info = BatchInfo(global_batch_size=2)
    whole = get_loss("dr_grpo")(LossInputs(log_probs, log_probs.detach(), adv, mask), info, norm_length=8).loss
    first = get_loss("dr_grpo")(
        LossInputs(log_probs[:1], log_probs[:1].detach(), adv[:1], mask[:1]), info, norm_length=8
    ).loss
    second = get_loss("dr_grpo")(
        LossInputs(log_probs[1:, :1], log_probs[1:, :1].detach(), adv[1:], mask[1:, :1]), info, norm_length=8
    ).loss
    assert whole.item() == pytest.approx(-0.1875, rel=1e-12)
    assert (first + second).item() == pytest.approx(-0.1875, rel=1e-12)
    (g_whole,) = torch.autograd.grad(whole, log_probs)
    (g_split,) = torch.autograd.grad(first + second, log_probs)
    assert torch.equal(g_whole, g_split)


@pytest.mark.parametrize(
    "name, field",
    [
        ("gmpo", "global_batch_size"),
        ("grpo", "global_batch_size"),
        ("dapo", "global_num_tokens"),
        ("gspo", "global_batch_size"),
    ],
)
def test_data_parallel_without_global_counts_is_refused(name, field):
    inputs = one_sequence([0.1, 0.2], 1.0)
    with pytest.raises(ValueError, match=f"batch.{field} is required when batch.dp_size > 1"):
        get_loss(name)(inputs, BatchInfo(dp_size=2), validate=False)


@pytest.mark.parametrize(
    "info, message",
    [
        # inf would give a zero loss and gradient
        (BatchInfo(global_batch_size=float("inf")), "finite number > 0"),
        (BatchInfo(global_batch_size=torch.tensor(float("inf"))), "finite count > 0"),
        (BatchInfo(global_batch_size=0.0), "finite number > 0"),
        (BatchInfo(global_batch_size=torch.tensor(-2.0)), "finite count > 0"),
    ],
)
def test_global_counts_are_checked(info, message):
    log_probs = torch.zeros(4, 2, dtype=torch.float64, requires_grad=True)
    inputs = LossInputs(
        log_probs, log_probs.detach(), torch.ones(4, dtype=torch.float64), torch.ones(4, 2, dtype=torch.bool)
    )
    with pytest.raises(ValueError, match=message):
        get_loss("gmpo")(inputs, info)


@pytest.mark.parametrize(
    "count, loss",
    # 4 sequences with A = 1 and ratio 1: each L_i = -1, loss = sum_i L_i / count = -4 / count. A count
    # that is not whole is what OpenRLHF passes (the step's sequences over its accumulation steps,
    # e.g. 7 / 2 = 3.5), as a tensor; the Python number is accepted alike
    [
        (4, -1.0),
        (4.0, -1.0),
        (torch.tensor(4), -1.0),
        (torch.tensor(4.0), -1.0),
        (2.5, -1.6),
        (torch.tensor(2.5), -1.6),
    ],
)
def test_counts_are_accepted_as_numbers_and_tensors(count, loss):
    log_probs = torch.zeros(4, 2, dtype=torch.float64, requires_grad=True)
    inputs = LossInputs(
        log_probs, log_probs.detach(), torch.ones(4, dtype=torch.float64), torch.ones(4, 2, dtype=torch.bool)
    )
    assert get_loss("gmpo")(inputs, BatchInfo(global_batch_size=count)).loss.item() == pytest.approx(loss)


@pytest.mark.parametrize(
    "name, impl",
    [
        (spec.name, impl)
        for spec in list_losses()
        if spec.provider == "gmpo-plugins"
        for impl in spec.impls
        if impl != "triton"
    ],
)
def test_rows_without_a_valid_token_count_in_n_only_through_the_global_count(name, impl):
    """Two rows, one without a valid token; row 0: one token at r = 0, A = 1, so L_0 = -1
    (every loss; dr_grpo with norm_length 1). Without a global count N is the local count of
    rows with a valid token (1): loss -1; with global_batch_size = 2 (a framework counts
    every sequence) N = 2: loss -1 / 2 = -0.5; token-mean counts valid tokens both ways (1)."""
    log_probs = torch.zeros(2, 1, dtype=torch.float64, requires_grad=True)
    inputs = LossInputs(
        log_probs, log_probs.detach(), torch.tensor([1.0, 1.0], dtype=torch.float64), torch.tensor([[True], [False]])
    )
    inputs = complete(inputs, name)  # decoupled_ppo, m2po: the rollout log-probs at t = 0 are the old ones
    spec = get_loss(name)
    hparams = {"norm_length": 1} if "norm_length" in spec.defaults else {}
    local = spec(inputs, impl=impl, **hparams).loss.item()
    counted = spec(inputs, BatchInfo(global_batch_size=2, global_num_tokens=1), impl=impl, **hparams).loss.item()
    assert local == pytest.approx(-1.0, rel=1e-12)
    token_mean = spec.defaults.get("reduction") == "token-mean"
    assert counted == pytest.approx(-1.0 if token_mean else -0.5, rel=1e-12)
