"""The loss terms every loss accepts (``core.terms``): entropy bonus, top-entropy token mask, NLL on
positive samples. Off by default bit for bit, hand values (arithmetic in the comments), gradients
against a float64 reference, split invariance (and the mask's declared dependence), the non-finite
rule, metrics, and the errors and adapter refusals naming the input an option needs."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from gmpo_plugins import BatchInfo, LossInputs, get_loss
from gmpo_plugins.adapters.hparam_sources import resolve
from gmpo_plugins.adapters.inputs import refusal
from gmpo_plugins.core.terms import SPLIT_DEPENDENT, TERM_DEFAULTS, TERM_METRIC_KEYS

from ..registry_names import builtin_losses
from .batches import complete, random_batch

TERMS_ON = {"entropy_coef": 0.1, "nll_coef": 0.3}


def f64(values, grad=False):
    return torch.tensor(values, dtype=torch.float64, requires_grad=grad)


def hand_case() -> LossInputs:
    """B = 2, T = 3, row 1 padded at t = 2 (NaN there: padding is inert). Valid entropies
    0.5, 1, 2 | 1.5, 0.25; rewards 1 | 0 (row 0 positive); log-probs -1, -2, -0.5 | -0.1, -0.2."""
    log_probs = f64([[-1.0, -2.0, -0.5], [-0.1, -0.2, math.nan]], grad=True)
    return LossInputs(
        log_probs=log_probs,
        old_log_probs=log_probs.detach().nan_to_num(0.0),
        advantages=f64([1.0, -1.0]),
        mask=torch.tensor([[True, True, True], [True, True, False]]),
        rewards=f64([1.0, 0.0]),
        entropy=f64([[0.5, 1.0, 2.0], [1.5, 0.25, math.nan]], grad=True),
    )


def with_entropy(inputs: LossInputs, seed: int = 7) -> LossInputs:
    """``inputs`` with a differentiable (B, T) entropy in [0, 3) and, unless given, (B,) rewards of
    both signs."""
    g = torch.Generator().manual_seed(seed)
    entropy = (3 * torch.rand(inputs.mask.shape, generator=g, dtype=inputs.log_probs.dtype)).requires_grad_()
    rewards = torch.randn(inputs.mask.shape[0], generator=g, dtype=inputs.log_probs.dtype)
    return replace(inputs, entropy=entropy, rewards=rewards if inputs.rewards is None else inputs.rewards)


def grads(name, inputs, info=None, **hparams):
    """(output, d loss / d log_probs, d loss / d entropy)."""
    out = get_loss(name)(inputs, info, **hparams)
    grad_lp, grad_h = torch.autograd.grad(out.loss, (inputs.log_probs, inputs.entropy), allow_unused=True)
    return out, grad_lp, torch.zeros_like(inputs.log_probs) if grad_h is None else grad_h


# ---- off by default ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", builtin_losses())
def test_off_the_terms_leave_every_loss_bit_for_bit(name):
    """Zero coefficients and a quantile of 1, given or not, with or without an entropy input:
    the loss and its gradient are those of the plain call, bit for bit."""
    inputs = complete(random_batch(5, 7, seed=1), name)
    plain = get_loss(name)(inputs)
    (plain_grad,) = torch.autograd.grad(plain.loss, inputs.log_probs)
    for case, hparams in ((with_entropy(inputs), {}), (with_entropy(inputs), TERM_DEFAULTS), (inputs, TERM_DEFAULTS)):
        out = get_loss(name)(case, **hparams)
        (grad,) = torch.autograd.grad(out.loss, case.log_probs)
        assert out.loss.item() == plain.loss.item() and torch.equal(grad, plain_grad), (name, hparams)
        assert out.metrics["policy_loss"].item() == plain.metrics["policy_loss"].item()


# ---- hand values -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, entropy_term, nll_term",
    [
        # token-mean over M = 5 valid tokens: H sum 0.5+1+2+1.5+0.25 = 5.25; positive -log pi 1+2+0.5 = 3.5
        ("dapo", 5.25 / 5, 3.5 / 5),
        # seq-mean-token-mean: rows (3.5/3 + 1.75/2) / 2; positive row (3.5/3) / 2
        ("grpo", (3.5 / 3 + 1.75 / 2) / 2, (3.5 / 3) / 2),
        ("gmpo", (3.5 / 3 + 1.75 / 2) / 2, (3.5 / 3) / 2),  # sequence-level: as its KL term
        # seq-mean-token-sum-norm with norm_length 4: (3.5/4 + 1.75/4) / 2; (3.5/4) / 2
        ("dr_grpo", 5.25 / 4 / 2, 3.5 / 4 / 2),
    ],
)
def test_hand_values_of_the_bonus_and_the_nll_term(name, entropy_term, nll_term):
    inputs = hand_case()
    hp = {"norm_length": 4} if name == "dr_grpo" else {}
    base = get_loss(name)(inputs, **hp).loss.item()
    bonus = get_loss(name)(inputs, entropy_coef=0.2, **hp)
    assert bonus.loss.item() == pytest.approx(base - 0.2 * entropy_term, rel=1e-14, abs=1e-15)
    nll = get_loss(name)(inputs, nll_coef=0.5, **hp)
    assert nll.loss.item() == pytest.approx(base + 0.5 * nll_term, rel=1e-14, abs=1e-15)
    assert nll.metrics["nll"].item() == pytest.approx(3.5 / 3)  # NeMo-RL's micro-batch mean over positive tokens
    assert bonus.metrics["entropy"].item() == pytest.approx(5.25 / 5)
    assert nll.metrics["policy_loss"].item() == pytest.approx(base)  # the terms are not the policy loss


def test_hand_values_of_the_top_entropy_mask():
    """rho = 0.4: threshold = the 0.6 quantile of 0.25, 0.5, 1, 1.5, 2 = position 0.6 * 4 = 2.4 between
    1 and 1.5 = 1.2 (as torch.quantile); kept: H = 2 (row 0, t 2) and 1.5 (row 1, t 0). The loss is
    the loss with those tokens as the only non-zero IS weights; the bonus sums H over the kept tokens."""
    inputs = hand_case()
    valid = inputs.entropy.detach()[inputs.mask]
    assert torch.quantile(valid, 0.6).item() == pytest.approx(1.2)
    keep = f64([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    for name in ("dapo", "gmpo"):
        masked = get_loss(name)(inputs, top_entropy_quantile=0.4)
        oracle = get_loss(name)(replace(inputs, rollout_is_weights=keep))
        assert masked.loss.item() == oracle.loss.item(), name
        assert masked.metrics["entropy_masked_frac"].item() == pytest.approx(3 / 5)
        both = get_loss(name)(inputs, top_entropy_quantile=0.4, entropy_coef=0.2)
        if name == "dapo":  # token-mean, the masked tokens stay counted (TRL): (2 + 1.5) / 5
            assert both.loss.item() == pytest.approx(oracle.loss.item() - 0.2 * 3.5 / 5, rel=1e-14)
        else:  # sequence-level: the masked tokens leave their rows, |o| = 1 each: (2 + 1.5) / 2
            assert both.loss.item() == pytest.approx(oracle.loss.item() - 0.2 * 3.5 / 2, rel=1e-14)
    keep_all = get_loss("dapo")(inputs, top_entropy_quantile=0.0 + 1e-12)
    assert keep_all.metrics["entropy_masked_frac"].item() == pytest.approx(4 / 5)  # only the top token stays


def test_a_b_weight_and_the_mask_multiply():
    """Precomputed (B,) IS weights and the mask: the weight broadcast over its row times the kept
    tokens, for a token-level and a sequence-level loss."""
    inputs = replace(hand_case(), rollout_is_weights=f64([0.5, 2.0]))
    oracle = replace(inputs, rollout_is_weights=f64([[0.0, 0.0, 0.5], [2.0, 0.0, 0.0]]))
    for name in ("dapo", "gspo"):
        assert get_loss(name)(inputs, top_entropy_quantile=0.4).loss.item() == pytest.approx(
            get_loss(name)(oracle).loss.item(), rel=1e-15
        )


# ---- gradients against float64 --------------------------------------------------------------


@pytest.mark.parametrize("name", ["dapo", "grpo", "gmpo", "gspo"])
def test_gradients_match_a_float64_reference(name):
    """float32 call against the float64 reference loss(64) - c_H * agg(H) + c_N * agg(-log pi on
    positive rows), agg the loss's reduction written out here, by autograd in float64."""
    inputs64 = with_entropy(random_batch(6, 8, seed=4, empty_rows=(3,)))
    inputs32 = LossInputs(
        inputs64.log_probs.detach().float().requires_grad_(),
        inputs64.old_log_probs.float(),
        inputs64.advantages.float(),
        inputs64.mask,
        rewards=inputs64.rewards.float(),
        entropy=inputs64.entropy.detach().float().requires_grad_(),
    )
    _, grad_lp, grad_h = grads(name, inputs32, **TERMS_ON)

    lp, h, m = inputs64.log_probs, inputs64.entropy, inputs64.mask.double()
    positive = (inputs64.rewards > 0).double()[:, None]
    count = m.sum(-1)
    if name == "dapo":
        weights = torch.full_like(count, 1 / m.sum().item())
    else:  # seq-mean-token-mean over rows with a valid token
        weights = (count > 0).double() / count.clamp_min(1) / (count > 0).sum()
    base = get_loss(name)(replace(inputs64, entropy=None, rewards=None)).loss
    reference = base - 0.1 * ((h * m).sum(-1) * weights).sum() + 0.3 * ((-lp * m * positive).sum(-1) * weights).sum()
    ref_lp, ref_h = torch.autograd.grad(reference, (lp, h))
    assert torch.allclose(grad_lp.double(), ref_lp, rtol=1e-5, atol=1e-7)
    assert torch.allclose(grad_h.double(), ref_h, rtol=1e-6, atol=1e-9)
    assert torch.equal(grad_h[~inputs64.mask], torch.zeros_like(grad_h[~inputs64.mask]))  # padding inert


# ---- split invariance ----------------------------------------------------------------------------


def split_grads(name, inputs, parts, *, ranks=False, **hparams):
    """(d/d log_probs, d/d entropy) accumulated over ``parts`` row chunks (micro-batches) or, with
    ``ranks``, as many simulated data-parallel ranks, with the whole batch's global counts."""
    total_lp, total_h = torch.zeros_like(inputs.log_probs), torch.zeros_like(inputs.log_probs)
    dp = parts if ranks else 1
    info = BatchInfo(
        dp_size=dp, global_batch_size=int(inputs.mask.any(-1).sum()), global_num_tokens=int(inputs.mask.sum())
    )
    for index in torch.arange(inputs.mask.shape[0]).chunk(parts):
        part = LossInputs(
            inputs.log_probs[index],
            inputs.old_log_probs[index],
            inputs.advantages[index],
            inputs.mask[index],
            rewards=inputs.rewards[index],
            entropy=inputs.entropy[index],
        )
        _, grad_lp, grad_h = grads(name, part, info, **hparams)
        total_lp[index] += grad_lp / dp
        total_h[index] += grad_h / dp
    return total_lp, total_h


@pytest.mark.parametrize("name", ["dapo", "grpo", "dr_grpo", "gmpo"])
def test_the_bonus_and_the_nll_term_are_split_invariant(name):
    inputs = with_entropy(random_batch(6, 8, seed=5, empty_rows=(3,)))
    whole = split_grads(name, inputs, 1, **TERMS_ON)
    for parts, ranks in ((3, False), (2, True)):
        for got, want in zip(split_grads(name, inputs, parts, ranks=ranks, **TERMS_ON), whole, strict=True):
            assert torch.allclose(got, want, rtol=1e-10, atol=1e-15), (parts, ranks)


def test_the_top_entropy_mask_is_declared_split_dependent():
    """The threshold is the micro-batch's quantile: 3 micro-batches give another gradient."""
    assert SPLIT_DEPENDENT == ("top_entropy_quantile",)
    inputs = with_entropy(random_batch(6, 8, seed=5))
    whole, _ = split_grads("dapo", inputs, 1, top_entropy_quantile=0.3)
    split, _ = split_grads("dapo", inputs, 3, top_entropy_quantile=0.3)
    assert (split - whole).abs().max().item() > 1e-3


# ---- non-finite values ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["dapo", "gmpo"])
@pytest.mark.parametrize("hparams", [{}, {"entropy_coef": 0.1}, {"top_entropy_quantile": 0.5}])
@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_non_finite_entropy_gives_a_non_finite_loss_and_gradient(name, hparams, bad):
    inputs = with_entropy(random_batch(4, 6, seed=2))
    clean, clean_grad, _ = grads(name, inputs, **hparams)
    entropy = inputs.entropy.detach().clone()
    entropy[1, 0] = bad  # a valid position
    poisoned = replace(inputs, entropy=entropy.requires_grad_())
    out, grad, _ = grads(name, poisoned, validate=False, **hparams)
    assert not torch.isfinite(out.loss) and not torch.isfinite(grad).all(), (name, hparams)
    assert out.metrics["nonfinite_tokens"].item() == 1.0
    entropy = inputs.entropy.detach().clone()
    entropy[~inputs.mask] = bad  # padding only: inert
    out, grad, _ = grads(name, replace(inputs, entropy=entropy.requires_grad_()), **hparams)
    assert out.loss.item() == clean.loss.item() and torch.equal(grad, clean_grad)


def test_a_non_finite_reward_gives_a_non_finite_loss_with_the_nll_term():
    inputs = with_entropy(random_batch(4, 6, seed=2))
    inputs.rewards[1] = math.nan
    out, grad, _ = grads("grpo", inputs, validate=False, nll_coef=0.3)
    assert not torch.isfinite(out.loss) and not torch.isfinite(grad).all()


# ---- errors, metrics, refusals ---------------------------------------------------------------


def test_an_option_without_its_input_is_an_error_naming_it():
    inputs = random_batch()
    for hparams, needs in (
        ({"entropy_coef": 0.01}, r"gmpo: entropy \(B, T\) per-token entropy is required by entropy_coef"),
        ({"top_entropy_quantile": 0.2}, r"gmpo: entropy \(B, T\) per-token entropy is required by"),
        ({"nll_coef": 0.1}, r"gmpo: rewards \(B,\) per-sequence rewards is required by nll_coef"),
    ):
        with pytest.raises(ValueError, match=needs):
            get_loss("gmpo")(inputs, **hparams)


@pytest.mark.parametrize(
    "hparams, words",
    [
        ({"entropy_coef": math.nan}, "entropy_coef must be a finite number"),
        ({"top_entropy_quantile": 1.5}, "top_entropy_quantile must be a number in [0, 1]"),
        ({"nll_coef": -1.0}, "nll_coef must be a finite number >= 0"),
    ],
)
def test_a_bad_option_is_one_line_naming_it(hparams, words):
    with pytest.raises(ValueError) as error:
        get_loss("dapo")(with_entropy(random_batch()), **hparams)
    assert str(error.value).startswith("dapo: ") and words in str(error.value)


def test_a_bad_entropy_input_names_it():
    inputs = with_entropy(random_batch(4, 6))
    with pytest.raises(ValueError, match=r"entropy: expected shape \(B, T\) = \(4, 6\), got \(4, 5\)"):
        get_loss("dapo")(replace(inputs, entropy=inputs.entropy[:, :5]))
    with pytest.raises(TypeError, match="entropy: expected a floating-point tensor"):
        get_loss("dapo")(replace(inputs, entropy=torch.ones(4, 6, dtype=torch.long)))
    entropy = inputs.entropy.detach().clone()
    entropy[0, 0] = math.nan
    with pytest.raises(ValueError, match="entropy: expected finite values at valid"):
        get_loss("dapo")(replace(inputs, entropy=entropy))
    with pytest.raises(TypeError, match="did you mean 'entropy_coef'"):
        get_loss("dapo").resolve({"entropy_coeff": 0.1})


def test_the_options_need_their_inputs_in_the_spec_and_the_adapters_refuse_them_by_name():
    """``LossSpec.inputs_for`` adds the options' inputs to ``requires``; every adapter's shared
    resolution (``hparam_sources.resolve``) refuses an option whose input it does not pass."""
    gmpo, topr = get_loss("gmpo"), get_loss("topr")
    assert gmpo.inputs_for({}) == () and gmpo.inputs_for({"entropy_coef": 0.0, "top_entropy_quantile": 1.0}) == ()
    assert gmpo.inputs_for({"entropy_coef": -0.1, "nll_coef": 0.1}) == ("entropy", "rewards")
    assert topr.inputs_for({"nll_coef": 0.1}) == ("rewards",)
    assert refusal(gmpo, "verl", hparams={"entropy_coef": 0.0}) is None
    for framework in ("verl", "OpenRLHF", "SkyRL"):  # TRL passes both inputs (tests/trl/test_terms.py)
        with pytest.raises(ValueError) as error:
            resolve(
                gmpo,
                (),
                None,
                framework=framework,
                selector="loss=gmpo",
                error=ValueError,
                overrides={"GMPO_PLUGINS_LOSS_HPARAMS": {"entropy_coef": 0.01}},
            )
        assert str(error.value) == (
            f"gmpo_plugins: gmpo with entropy_coef=0.01 needs per-token entropy, which the {framework} adapter "
            "does not pass yet"
        )
    assert refusal(gmpo, "SkyRL", hparams={"nll_coef": 0.5, "top_entropy_quantile": 0.2}) == (
        "gmpo with nll_coef=0.5, top_entropy_quantile=0.2 needs per-token entropy and per-sequence rewards, which "
        "the SkyRL adapter does not pass yet"
    )
    assert refusal(gmpo, "TRL", hparams={"nll_coef": 0.5, "top_entropy_quantile": 0.2}) is None


def test_every_loss_accepts_the_options_and_none_declares_them():
    inputs = with_entropy(random_batch(4, 6, seed=3))
    for name in builtin_losses():
        spec = get_loss(name)
        assert not set(TERM_DEFAULTS) & set(spec.defaults), name
        out = spec(complete(inputs, name), entropy_coef=0.01, nll_coef=0.1, top_entropy_quantile=0.5)
        assert torch.isfinite(out.loss) and set(TERM_METRIC_KEYS) <= set(out.metrics), name
    assert "entropy_coef" not in get_loss("gmpo").resolve({})
    assert not set(TERM_METRIC_KEYS) & set(get_loss("gmpo")(random_batch()).metrics)  # nothing given, none
