"""Losses other frameworks ship: topr (ROLL), decoupled_ppo and m2po (AReaL). Hand values and
float64 gradients (arithmetic in the comments), split invariance or its declared absence, the
non-finite rule and the inputs each needs."""

from __future__ import annotations

import math

import pytest
import torch

from gmpo_plugins import BatchInfo, LossInputs, get_loss

from .batches import random_batch

LN = math.log


def f64(values, grad=False):
    return torch.tensor(values, dtype=torch.float64, requires_grad=grad)


def value_and_grad(name, inputs, info=None, **hparams):
    out = get_loss(name)(inputs, info, **hparams)
    (grad,) = torch.autograd.grad(out.loss, inputs.log_probs)
    return out, grad


def with_rewards(inputs: LossInputs, seed: int = 3) -> LossInputs:
    """``inputs`` with (B,) rewards of both signs and a zero (a zero reward is a negative sample)."""
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(inputs.mask.shape[0], generator=g, dtype=torch.float64)
    rewards[0] = 0.0
    inputs.rewards = rewards
    return inputs


def split_grad(name, inputs, parts, **hparams):
    """The gradient accumulated over ``parts`` row chunks with the whole batch's global counts."""
    total = torch.zeros_like(inputs.log_probs)
    rows = inputs.mask.shape[0]
    info = BatchInfo(global_batch_size=int(inputs.mask.any(-1).sum()), global_num_tokens=int(inputs.mask.sum()))
    for index in torch.arange(rows).chunk(parts):
        part = LossInputs(
            inputs.log_probs[index],
            inputs.old_log_probs[index],
            inputs.advantages[index],
            inputs.mask[index],
            rollout_log_probs=None if inputs.rollout_log_probs is None else inputs.rollout_log_probs[index],
            rewards=None if inputs.rewards is None else inputs.rewards[index],
        )
        _, grad = value_and_grad(name, part, info, **hparams)
        total[index] += grad
    return total


# ---------------------------------------------------------------- topr


def topr_case() -> LossInputs:
    # row 0: reward 1 (positive), A = 2, log pi [-1, -2], ratios [e^0.5, e^-0.5]
    # row 1: reward 0 (negative), A = -1, log pi [-0.5, -3 (padding)], ratio e^0.5 on its one token
    # row 2: reward -1 (negative), A = 1, log pi [-2, -1], ratios [e^-1, 1]
    lp = f64([[-1.0, -2.0], [-0.5, -3.0], [-2.0, -1.0]], grad=True)
    old = f64([[-1.5, -1.5], [-1.0, 0.0], [-1.0, -1.0]])
    return LossInputs(
        lp,
        old,
        f64([2.0, -1.0, 1.0]),
        torch.tensor([[True, True], [True, False], [True, True]]),
        rewards=f64([1.0, 0.0, -1.0]),
    )


def test_topr_splits_by_reward_and_tapers_the_negative_samples():
    # row 0 (REINFORCE): l = -2 * [-1, -2] = [2, 4], mean 3; gradient -A / (2 tokens * 3 rows) = -1/3 each
    # row 1 (tapered, r = e^0.5 > 1 -> 1): l = -1 * (-1) * (-0.5) = -0.5; gradient 1 / 3
    # row 2 (tapered, weights [e^-1, 1]): l = -[e^-1 * 1 * -2, 1 * 1 * -1] = [2 e^-1, 1], mean e^-1 + 0.5
    #       gradients -[e^-1, 1] / (2 * 3)
    # seq-mean-token-mean: (3 - 0.5 + e^-1 + 0.5) / 3 = (3 + e^-1) / 3
    e = math.exp(-1)
    out, grad = value_and_grad("topr", topr_case())
    assert out.loss.item() == pytest.approx((3 + e) / 3, rel=1e-12)
    expected = f64([[-1 / 3, -1 / 3], [1 / 3, 0.0], [-e / 6, -1 / 6]])
    torch.testing.assert_close(grad, expected, rtol=1e-12, atol=1e-15)
    # one negative-sample token of 5 was tapered (row 1's r = e^0.5)
    assert out.metrics["clip_frac_high"].item() == pytest.approx(1 / 5)
    # the weights scale each side: c_pos 0.5 halves row 0, c_neg 2 doubles rows 1 and 2
    out = get_loss("topr")(topr_case(), topr_positive_weight=0.5, topr_negative_weight=2.0)
    assert out.loss.item() == pytest.approx((1.5 + 2 * (-0.5 + e + 0.5)) / 3, rel=1e-12)


def test_topr_is_split_invariant():
    inputs = with_rewards(random_batch(8, 7, seed=5, spread=0.8, empty_rows=(3,)))
    for reduction in ("token-mean", "seq-mean-token-mean"):
        _, whole = value_and_grad("topr", inputs, None, reduction=reduction)
        torch.testing.assert_close(split_grad("topr", inputs, 3, reduction=reduction), whole, rtol=1e-10, atol=1e-13)


def test_topr_needs_rewards_of_shape_b():
    inputs = topr_case()
    inputs.rewards = None
    with pytest.raises(ValueError, match=r"topr: rewards is required by this loss \(LossInputs.rewards\)"):
        get_loss("topr")(inputs)
    inputs.rewards = f64([[1.0, 0.0]] * 3)
    with pytest.raises(ValueError, match=r"rewards: expected shape \(B,\) = \(3,\), got \(3, 2\)"):
        get_loss("topr")(inputs)
    inputs.rewards = f64([1.0, math.nan, 0.0])
    with pytest.raises(ValueError, match="rewards: expected finite values"):
        get_loss("topr")(inputs)


@pytest.mark.parametrize("where", ["reward", "log_prob"])
def test_topr_nonfinite_input_gives_a_nonfinite_loss_and_gradient(where):
    inputs = topr_case()
    if where == "reward":  # a NaN reward is in neither split: only the shared rule catches it
        inputs.rewards = f64([math.nan, 0.0, -1.0])
    else:  # a NaN old log-prob on a tapered token
        inputs.old_log_probs[2, 0] = math.nan
    out, grad = value_and_grad("topr", inputs, validate=False)
    assert not torch.isfinite(out.loss)
    assert not torch.isfinite(grad).all()
    # a NaN reward of a row without a valid token is not read
    inputs = topr_case()
    inputs.mask[1] = False
    inputs.rewards = f64([1.0, math.nan, -1.0])
    out, grad = value_and_grad("topr", inputs)
    assert torch.isfinite(out.loss) and torch.isfinite(grad).all()


# ---------------------------------------------------------------- decoupled_ppo, m2po


def decoupled_case() -> LossInputs:
    # A = 1, log pi = -1 everywhere; proximal ratios rho = [1, 2, 1] (token 2 clipped at 1.2);
    # behaviour weights u = pi_prox / pi_behave = [1, 1.5, 6] (6 > 5: masked by default)
    prox = f64([[-1.0, -1.0 - LN(2), -1.0]])
    return LossInputs(
        f64([[-1.0, -1.0, -1.0]], grad=True),
        prox,
        f64([1.0]),
        torch.ones(1, 3, dtype=torch.bool),
        rollout_log_probs=prox - f64([[0.0, LN(1.5), LN(6)]]),
    )


def test_decoupled_ppo_weights_the_clipped_ratio_by_the_masked_behaviour_ratio():
    # l = [-1 * 1, -1.2 * 1.5, 0] (token 3 masked, kept in the count): token-mean -2.8 / 3;
    # gradient -A rho u / 3 = -1/3 on token 1, 0 on the clipped token and the masked one
    out, grad = value_and_grad("decoupled_ppo", decoupled_case())
    assert out.loss.item() == pytest.approx(-2.8 / 3, rel=1e-12)
    torch.testing.assert_close(grad, f64([[-1 / 3, 0.0, 0.0]]), rtol=1e-12, atol=1e-15)
    assert out.metrics["rollout_token_masked_frac"].item() == pytest.approx(1 / 3)
    # truncate (AReaL's action="clamp"): u_3 = 5, l_3 = -5: (-1 - 1.8 - 5) / 3, gradient -5/3 there
    out, grad = value_and_grad("decoupled_ppo", decoupled_case(), rollout_is_mode="truncate")
    assert out.loss.item() == pytest.approx(-7.8 / 3, rel=1e-12)
    assert grad[0, 2].item() == pytest.approx(-5 / 3, rel=1e-12)
    # no behaviour weight (AReaL's rejection_sampling=None): plain PPO clip, (-1 - 1.2 - 1) / 3
    out = get_loss("decoupled_ppo")(decoupled_case(), rollout_is=None)
    assert out.loss.item() == pytest.approx(-3.2 / 3, rel=1e-12)
    # it is grpo (token-mean) under the same correction options: one formula, composed
    grpo = get_loss("grpo")(
        decoupled_case(), reduction="token-mean", rollout_is="token", rollout_is_mode="mask", rollout_is_threshold=5.0
    )
    assert grpo.loss.item() == pytest.approx(-2.8 / 3, rel=1e-12)


def test_decoupled_ppo_needs_the_behaviour_log_probs():
    inputs = decoupled_case()
    inputs.rollout_log_probs = None
    with pytest.raises(ValueError, match="decoupled_ppo: rollout_log_probs"):
        get_loss("decoupled_ppo")(inputs)
    with pytest.raises(ValueError, match="m2po: rollout_log_probs is required"):
        get_loss("m2po")(inputs, rollout_is=None)


def behaviour_batch(seed=7) -> LossInputs:
    inputs = random_batch(9, 6, seed=seed, spread=0.3, empty_rows=(4,))
    g = torch.Generator().manual_seed(seed + 1)
    inputs.rollout_log_probs = inputs.old_log_probs + 0.4 * torch.randn(9, 6, generator=g, dtype=torch.float64)
    return inputs


def test_decoupled_ppo_is_split_invariant_and_m2po_is_declared_split_dependent():
    inputs = behaviour_batch()
    _, whole = value_and_grad("decoupled_ppo", inputs)
    torch.testing.assert_close(split_grad("decoupled_ppo", inputs, 3), whole, rtol=1e-10, atol=1e-13)
    assert get_loss("decoupled_ppo").split_invariant and not get_loss("m2po").split_invariant
    # m2po: row 0's m2 = [.25, .25], row 1's [0, 0]. Whole batch: suffix means .125, .083, 0, 0
    # (threshold .04): both row-0 tokens masked. Row 0 alone: no suffix mean below .04, all but
    # one masked: row 0's last token trains, so the split changes the gradient.
    prox = f64([[-1.0, -1.0], [-1.0, -1.0]])
    case = LossInputs(
        f64([[-1.0, -1.0], [-1.0, -1.0]], grad=True),
        prox,
        f64([1.0, 1.0]),
        torch.ones(2, 2, dtype=torch.bool),
        rollout_log_probs=prox + f64([[0.5, 0.5], [0.0, 0.0]]),
    )
    _, whole = value_and_grad("m2po", case, rollout_is=None)
    assert whole[0].abs().sum().item() == 0.0 and (whole[1] != 0).all()
    split = split_grad("m2po", case, 2, rollout_is=None)
    assert split[0, 1].item() != 0.0 and split[0, 0].item() == 0.0


def test_m2po_masks_the_largest_second_moments_until_the_mean_is_below_the_threshold():
    # rho = 1, A = 1; delta = log pi_behave - log pi_prox = [0.5, 0.1, 0, 0], m2 = [.25, .01, 0, 0]
    # suffix means (decreasing order): .065, .0033, 0, 0: threshold .04 masks 1 token (the first)
    # behaviour weights u = e^-delta = [e^-.5, e^-.1, 1, 1]; kept l = -u: token-mean over the 3 kept
    # tokens (masked ones leave the count): -(e^-.1 + 2) / 3, gradient -u / 3 on the kept tokens
    prox = f64([[-1.0, -2.0, -0.5, -1.5]])
    delta = f64([[0.5, 0.1, 0.0, 0.0]])
    inputs = LossInputs(
        prox.clone().requires_grad_(),
        prox,
        f64([1.0]),
        torch.ones(1, 4, dtype=torch.bool),
        rollout_log_probs=prox + delta,
    )
    out, grad = value_and_grad("m2po", inputs)
    u = math.exp(-0.1)
    assert out.loss.item() == pytest.approx(-(u + 2) / 3, rel=1e-12)
    torch.testing.assert_close(grad, f64([[0.0, -u / 3, -1 / 3, -1 / 3]]), rtol=1e-12, atol=1e-15)
    # threshold .001: the first suffix mean below it is the third (0): 2 tokens masked
    out, grad = value_and_grad("m2po", inputs, m2_threshold=0.001)
    assert out.loss.item() == pytest.approx(-1.0, rel=1e-12)
    torch.testing.assert_close(grad, f64([[0.0, 0.0, -0.5, -0.5]]), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("name", ["decoupled_ppo", "m2po"])
def test_a_nonfinite_behaviour_log_prob_gives_a_nonfinite_loss_and_gradient(name):
    inputs = behaviour_batch()
    inputs.rollout_log_probs[1, 0] = math.nan
    out, grad = value_and_grad(name, inputs, validate=False)
    assert not torch.isfinite(out.loss) and not torch.isfinite(grad).all()
    inputs = behaviour_batch()
    inputs.rollout_log_probs[1, 0] = math.inf
    out, grad = value_and_grad(name, inputs, validate=False, rollout_is=None)
    assert not torch.isfinite(out.loss) and not torch.isfinite(grad).all()
    # padding may hold anything
    inputs = behaviour_batch()
    inputs.rollout_log_probs = torch.where(inputs.mask, inputs.rollout_log_probs, math.nan)
    out, grad = value_and_grad(name, inputs)
    assert torch.isfinite(out.loss) and torch.isfinite(grad).all()


# ---------------------------------------------------------------- prime_rl, prime_ipo


def prime_case(advantage: float) -> LossInputs:
    # p = [.5, .5, .2], q = [.4, .2, .3]: p - q = [.1, .3, -.1], r = [1.25, 2.5, 2/3]
    return LossInputs(
        f64([[LN(0.5), LN(0.5), LN(0.2)]], grad=True),
        f64([[LN(0.4), LN(0.2), LN(0.3)]]),
        f64([advantage]),
        torch.ones(1, 3, dtype=torch.bool),
    )


@pytest.mark.parametrize(
    "name, advantage, keep, hparams",
    [
        ("prime_rl", 1.0, [1, 0, 1], {}),  # A > 0: p - q <= .2 keeps tokens 1 and 3
        ("prime_rl", -1.0, [1, 1, 1], {}),  # A < 0: p - q >= -.2 keeps all three
        ("prime_ipo", 1.0, [1, 0, 1], {"ipo_threshold": 0.15}),  # |p - q| <= .15
        ("prime_ipo", -1.0, [1, 0, 1], {"ipo_threshold": 0.15, "kl_tau": 0.5, "adv_tau": 2.0}),
    ],
)
def test_prime_rl_losses_hand_values(name, advantage, keep, hparams):
    # l_t = -adv_tau A r_t M_t + kl_tau (log r_t)^2, token-mean over 3;
    # gradient (-adv_tau A r_t M_t + 2 kl_tau log r_t) / 3
    r = [1.25, 2.5, 2 / 3]
    k, tau = hparams.get("kl_tau", 1e-3), hparams.get("adv_tau", 1.0)
    value = sum(-tau * advantage * ri * m + k * LN(ri) ** 2 for ri, m in zip(r, keep, strict=True)) / 3
    grad_expected = f64([[(-tau * advantage * ri * m + 2 * k * LN(ri)) / 3 for ri, m in zip(r, keep, strict=True)]])
    out, grad = value_and_grad(name, prime_case(advantage), **hparams)
    assert out.loss.item() == pytest.approx(value, rel=1e-12)
    torch.testing.assert_close(grad, grad_expected, rtol=1e-12, atol=1e-15)
    side = "clip_frac_high" if advantage > 0 else "clip_frac_low"
    assert out.metrics[side].item() == pytest.approx(keep.count(0) / 3)


@pytest.mark.parametrize("name", ["prime_rl", "prime_ipo"])
def test_prime_rl_losses_are_split_invariant_and_nonfinite_stays_nonfinite(name):
    inputs = random_batch(8, 7, seed=11, spread=0.5, empty_rows=(2,))
    _, whole = value_and_grad(name, inputs)
    torch.testing.assert_close(split_grad(name, inputs, 3), whole, rtol=1e-10, atol=1e-13)
    inputs.old_log_probs[1, 0] = math.nan  # the token is masked, its KL term stays NaN
    out, grad = value_and_grad(name, inputs, validate=False)
    assert not torch.isfinite(out.loss) and not torch.isfinite(grad).all()


# ---------------------------------------------------------------- verl's extra KL estimators


@pytest.mark.parametrize("estimator", ["abs", "k1+", "k3+", "abs+"])
def test_extra_kl_estimators_hand_values_and_nonfinite(estimator):
    # one token, A = 0 (no policy term), d = ref - new = -0.5: abs 0.5, k1 0.5, k3 e^-.5 + .5 - 1;
    # gradient w.r.t. log pi: abs: sign(new - ref) = 1; "+" forms: k2's, -d = 0.5
    value = {"abs": 0.5, "k1": 0.5, "k3": math.exp(-0.5) - 0.5}[estimator.rstrip("+")]
    slope = 1.0 if estimator == "abs" else 0.5
    inputs = LossInputs(
        f64([[-1.0]], grad=True),
        f64([[-1.0]]),
        f64([0.0]),
        torch.ones(1, 1, dtype=torch.bool),
        ref_log_probs=f64([[-1.5]]),
    )
    out, grad = value_and_grad("grpo", inputs, kl_beta=1.0, kl_estimator=estimator)
    assert out.loss.item() == pytest.approx(value, rel=1e-12)
    assert grad.item() == pytest.approx(slope, rel=1e-12)
    inputs.ref_log_probs[0, 0] = math.nan
    out, grad = value_and_grad("dapo", inputs, kl_beta=1.0, kl_estimator=estimator, validate=False)
    assert not torch.isfinite(out.loss)
    if estimator.endswith("+"):  # k2's gradient d carries the NaN (abs's, like k1's, is a sign)
        assert not torch.isfinite(grad).all()
