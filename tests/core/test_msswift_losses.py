"""ms-swift's losses: fipo (future-KL influence weight on dapo's token loss) and real (in-group
classification, needs ``group_ids``). Hand values (arithmetic in the comments), float64
references of value and gradient, split invariance (fipo) and the declared split dependence
(real: exact for splits that keep groups whole), and real's required input and its refusal by
every adapter."""

from __future__ import annotations

import math
import re

import pytest
import torch

from gmpo_plugins import BatchInfo, LossInputs, get_loss
from gmpo_plugins.adapters.inputs import refusal, refuse_unsupplied

from .batches import random_batch

E = math.exp
F64 = torch.float64


def f64(values, grad=False):
    return torch.tensor(values, dtype=F64, requires_grad=grad)


def value_and_grad(name, inputs, info=None, **hparams):
    out = get_loss(name)(inputs, info, **hparams)
    (grad,) = torch.autograd.grad(out.loss, inputs.log_probs)
    return out, grad


def rows(inputs: LossInputs, index: torch.Tensor) -> LossInputs:
    """The rows ``index`` of every tensor of ``inputs``."""
    return LossInputs(**{key: None if value is None else value[index] for key, value in vars(inputs).items()})


def split_grad(name, inputs, parts, **hparams):
    """The gradient accumulated over the row chunks ``parts`` with the whole batch's global counts."""
    total = torch.zeros_like(inputs.log_probs)
    info = BatchInfo(global_batch_size=int(inputs.mask.any(-1).sum()), global_num_tokens=int(inputs.mask.sum()))
    for index in parts:
        _, grad = value_and_grad(name, rows(inputs, index), info, **hparams)
        total[index] += grad
    return total


# ---------------------------------------------------------------- fipo


def fipo_case() -> LossInputs:
    # row 0: A = 1, log ratios [0.1, -0.2, 0.3];  row 1: A = -1, log ratios [1.5, 0], padding (garbage)
    old = f64([[-1.0, -1.0, -1.0], [-2.0, -1.0, -1.0]])
    r = f64([[0.1, -0.2, 0.3], [1.5, 0.0, math.nan]])
    mask = torch.tensor([[True, True, True], [True, True, False]])
    lp = torch.where(mask, old + r, torch.inf).detach().requires_grad_()
    return LossInputs(lp, old, f64([1.0, -1.0]), mask)


def test_fipo_hand_values_default_clip_safety_and_dual_clip():
    # fipo_decay_rate 1: gamma = 1/2.  Row 0: F = [0.1 + (-0.2 + 0.3/2)/2, -0.2 + 0.3/2, 0.3] = [0.075, -0.05, 0.3]
    # -> f = clamp(e^F, 1, 1.2) = [e^0.075, 1, 1.2].  dapo (A > 0): -min(rho, clamp(rho, 0.8, 1.28)) with
    # rho = [e^0.1, e^-0.2, e^0.3 > 1.28 (clipped: no gradient)] -> l = -[e^0.1 e^0.075, e^-0.2, 1.28 * 1.2]
    # Row 1: F = [1.5, 0] -> f = [1.2, 1]; token 0: A < 0 and rho = e^1.5 > 4 (safety) -> clamp(1.2, 0.8, 1) = 1
    # dapo (A < 0): max(rho, clamp(rho)) = [e^1.5, 1] -> l = [e^1.5, 1].  token-mean over 5 tokens.
    out, grad = value_and_grad("fipo", fipo_case(), fipo_decay_rate=1.0)
    row0 = -(E(0.175) + E(-0.2) + 1.28 * 1.2)
    assert out.loss.item() == pytest.approx((row0 + E(1.5) + 1.0) / 5, rel=1e-12)
    expected = f64([[-E(0.175) / 5, -E(-0.2) / 5, 0.0], [E(1.5) / 5, 1 / 5, 0.0]])
    torch.testing.assert_close(grad, expected, rtol=1e-12, atol=1e-15)
    assert out.metrics["fipo_future_kl_mean"].item() == pytest.approx((0.075 - 0.05 + 0.3 + 1.5 + 0.0) / 5)
    assert out.metrics["fipo_influence_weight_mean"].item() == pytest.approx((E(0.075) + 1 + 1.2 + 1 + 1) / 5)
    # two-sided clip: row 0 token 1 keeps e^-0.05 (in [0.8, 1.2])
    out = get_loss("fipo")(fipo_case(), fipo_decay_rate=1.0, fipo_clip_high_only=False)
    row0 = -(E(0.175) + E(-0.2) * E(-0.05) + 1.28 * 1.2)
    assert out.loss.item() == pytest.approx((row0 + E(1.5) + 1.0) / 5, rel=1e-12)
    # no safety band: row 1 token 0 keeps f = 1.2
    out = get_loss("fipo")(fipo_case(), fipo_decay_rate=1.0, fipo_safety_threshold=None)
    assert out.loss.item() == pytest.approx((-(E(0.175) + E(-0.2) + 1.28 * 1.2) + 1.2 * E(1.5) + 1.0) / 5, rel=1e-12)
    # dual_clip 3 (ms-swift's delta): row 1 token 0 (rho = e^1.5 > 3) leaves the future sum (F = 0, f = 1)
    # and its term is capped at -A * 3 = 3 (no gradient)
    out, grad = value_and_grad("fipo", fipo_case(), fipo_decay_rate=1.0, dual_clip=3.0)
    assert out.loss.item() == pytest.approx((-(E(0.175) + E(-0.2) + 1.28 * 1.2) + 3.0 + 1.0) / 5, rel=1e-12)
    assert grad[1, 0].item() == 0.0 and out.metrics["fipo_future_kl_mean"].item() == pytest.approx(
        (0.075 - 0.05 + 0.3) / 5
    )


def fipo_reference(inputs: LossInputs, decay_rate=32.0, clip=0.2, high_only=True, safety=4.0, eps=(0.2, 0.28)):
    """ms-swift's fipo written out: the (T, T) decay matrix, the clipped weight, dapo's term,
    the rollout IS weight per token, the token mean."""
    lp, old, mask = inputs.log_probs, inputs.old_log_probs, inputs.mask
    r = torch.where(mask, lp - old, 0.0)
    t = torch.arange(r.shape[1], dtype=F64)
    distance = t[None, :] - t[:, None]  # [t, k]
    decay = torch.where(distance >= 0, (2 ** (-1 / decay_rate)) ** distance.clamp_min(0), 0.0)
    future = r.detach() @ decay.T
    f = torch.exp(future) if clip is None else torch.exp(future).clamp(1.0 if high_only else 1 - clip, 1 + clip)
    advantages = inputs.advantages[:, None].expand_as(r)
    f = torch.where((advantages < 0) & (torch.exp(r.detach()) > safety), f.clamp(0.8, 1.0), f)
    rho = torch.exp(r)
    term = torch.maximum(-advantages * rho, -advantages * rho.clamp(1 - eps[0], 1 + eps[1])) * f
    if inputs.rollout_is_weights is not None:
        term = term * inputs.rollout_is_weights
    return torch.where(mask, term, 0.0).sum() / mask.sum()


@pytest.mark.parametrize(
    "hparams", [{}, {"fipo_decay_rate": 4.0, "fipo_clip_high_only": False}, {"fipo_clip_range": None}]
)
def test_fipo_matches_a_float64_reference_across_blocks(hparams):
    """T = 300 spans three blocks of the future sum (128 positions each; without a clip the weight
    shows the sum carried from one block to the previous one); (B, T) IS weights."""
    inputs = random_batch(4, 300, seed=2, spread=0.05)
    inputs.mask = torch.arange(300)[None, :] < torch.tensor([[300], [290], [200], [129]])
    inputs.rollout_is_weights = 0.5 + torch.rand(4, 300, generator=torch.Generator().manual_seed(1), dtype=F64)
    out, grad = value_and_grad("fipo", inputs, **hparams)
    keys = {"fipo_decay_rate": "decay_rate", "fipo_clip_high_only": "high_only", "fipo_clip_range": "clip"}
    want = fipo_reference(inputs, **{keys[key]: value for key, value in hparams.items()})
    (want_grad,) = torch.autograd.grad(want, inputs.log_probs)
    assert out.loss.item() == pytest.approx(want.item(), rel=1e-12)
    torch.testing.assert_close(grad, want_grad, rtol=1e-10, atol=1e-15)


def test_fipo_is_split_invariant():
    inputs = random_batch(8, 7, seed=5, spread=0.8, empty_rows=(3,))
    for hparams in ({}, {"dual_clip": 2.0}):
        _, whole = value_and_grad("fipo", inputs, **hparams)
        parts = torch.arange(8).chunk(3)
        torch.testing.assert_close(split_grad("fipo", inputs, parts, **hparams), whole, rtol=1e-10, atol=1e-13)


# ---------------------------------------------------------------- real


def real_case() -> LossInputs:
    # group 7: row 0 A = 1 (positive), S = mean(0.2, 0.4) = 0.3; row 1 A = -1, S = 0.1 (one token);
    #          row 2 A = 0 (negative, as ms-swift's <= 0), S = mean(-0.2, 0) = -0.1
    # group 3: rows 3 and 4 both positive: no negative side, the group adds 0
    old = torch.full((5, 2), -1.0, dtype=F64)
    r = f64([[0.2, 0.4], [0.1, math.nan], [-0.2, 0.0], [0.5, 0.5], [-0.3, 0.1]])
    mask = torch.tensor([[True, True], [True, False], [True, True], [True, True], [True, True]])
    lp = torch.where(mask, old + r, -torch.inf).detach().requires_grad_()
    return LossInputs(lp, old, f64([1.0, -1.0, 0.0, 2.0, 0.5]), mask, group_ids=torch.tensor([7, 7, 7, 3, 3]))


def test_real_hand_values_and_gradient():
    # tau 0.5: L = log(1 + e^{0.1/0.5} + e^{-0.1/0.5}) + log(1 + e^{-0.3/0.5}); three rows carry it, N = 5
    neg = 1 + E(0.2) + E(-0.2)
    pos = 1 + E(-0.6)
    loss = math.log(neg) + math.log(pos)
    out, grad = value_and_grad("real", real_case())
    assert out.loss.item() == pytest.approx(3 * loss / 5, rel=1e-12)
    # dL/dS_j = +-(term_j / sum) / tau, split over the row's |o_j| tokens, times 3 / N
    g0 = -(E(-0.6) / pos) / 0.5 / 2 * 3 / 5
    g1 = (E(0.2) / neg) / 0.5 * 3 / 5
    g2 = (E(-0.2) / neg) / 0.5 / 2 * 3 / 5
    expected = f64([[g0, g0], [g1, 0.0], [g2, g2], [0.0, 0.0], [0.0, 0.0]])
    torch.testing.assert_close(grad, expected, rtol=1e-12, atol=1e-15)
    # the global count divides: N = 10
    out = get_loss("real")(real_case(), BatchInfo(global_batch_size=10))
    assert out.loss.item() == pytest.approx(3 * loss / 10, rel=1e-12)
    # real_tau 1: the scores enter unscaled
    out = get_loss("real")(real_case(), real_tau=1.0)
    want = math.log(1 + E(0.1) + E(-0.1)) + math.log(1 + E(-0.3))
    assert out.loss.item() == pytest.approx(3 * want / 5, rel=1e-12)
    # a (B,) rollout IS weight weighs a row's term in its group's sums; 0 removes row 2 from group 7
    inputs = real_case()
    inputs.rollout_is_weights = f64([2.0, 1.0, 0.0, 1.0, 1.0])
    want = math.log(1 + E(0.2)) + math.log(1 + 2 * E(-0.6))
    assert get_loss("real")(inputs).loss.item() == pytest.approx(3 * want / 5, rel=1e-12)


def real_reference(inputs: LossInputs, tau=0.5):
    """ms-swift's real written out group by group: the log-sum-exp of each side with a 0 logit,
    summed over the groups that have both, times the group's size, over the number of rows."""
    mask = inputs.mask
    scores = torch.where(mask, inputs.log_probs - inputs.old_log_probs, 0.0).sum(-1) / mask.sum(-1)
    total = scores.sum() * 0
    zero = torch.zeros(1, dtype=F64)
    for group in inputs.group_ids.unique():
        members = inputs.group_ids == group
        pos = members & (inputs.advantages > 0)
        neg = members & (inputs.advantages <= 0)
        if pos.any() and neg.any():
            loss = torch.logsumexp(torch.cat([zero, scores[neg] / tau]), 0)
            loss = loss + torch.logsumexp(torch.cat([zero, -scores[pos] / tau]), 0)
            total = total + members.sum() * loss
    return total / mask.shape[0]


def real_batch() -> LossInputs:
    """16 rows in 4 groups of 4 (ids 0, 0, 0, 0, 1, ...), advantages of both signs in each group
    but the last (all positive)."""
    inputs = random_batch(16, 6, seed=4, spread=0.6)
    g = torch.Generator().manual_seed(8)
    advantages = torch.randn(16, generator=g, dtype=F64)
    advantages[0:12:4], advantages[1:12:4] = 1.0, -1.0
    advantages[12:] = advantages[12:].abs() + 0.1
    inputs.advantages = advantages
    inputs.group_ids = torch.arange(16) // 4
    return inputs


def test_real_matches_a_float64_reference():
    inputs = real_batch()
    out, grad = value_and_grad("real", inputs)
    want = real_reference(inputs)
    (want_grad,) = torch.autograd.grad(want, inputs.log_probs)
    assert out.loss.item() == pytest.approx(want.item(), rel=1e-12)
    torch.testing.assert_close(grad, want_grad, rtol=1e-10, atol=1e-15)
    assert grad[12:].abs().sum() == 0  # the last group has no negative side
    # groups given in any order and with any ids: the same loss
    shuffled = rows(inputs, torch.randperm(16, generator=torch.Generator().manual_seed(0)))
    shuffled.group_ids = shuffled.group_ids * 10 - 7
    assert get_loss("real")(shuffled).loss.item() == pytest.approx(out.loss.item(), rel=1e-12)


def test_real_split_dependence_is_declared_and_exact_for_whole_groups():
    """Micro-batches or ranks that keep every group whole give the whole batch's gradient; a split
    that cuts a group does not (each piece's log-sum-exp sees part of the group)."""
    assert get_loss("real").split_invariant is False
    inputs = real_batch()
    _, whole = value_and_grad("real", inputs)
    whole_groups = [torch.arange(0, 8), torch.arange(8, 12), torch.arange(12, 16)]
    torch.testing.assert_close(split_grad("real", inputs, whole_groups), whole, rtol=1e-10, atol=1e-14)
    cut_groups = [torch.arange(0, 6), torch.arange(6, 16)]
    assert (split_grad("real", inputs, cut_groups) - whole).abs().max() > 1e-3


def test_real_needs_integer_group_ids_of_shape_b():
    inputs = real_case()
    inputs.group_ids = None
    with pytest.raises(ValueError, match=r"^real: group_ids is required by this loss \(LossInputs.group_ids\)"):
        get_loss("real")(inputs)
    inputs.group_ids = f64([0.0, 0.0, 0.0, 1.0, 1.0])
    with pytest.raises(
        TypeError, match=r"^group_ids: expected an integer tensor \(int64, int32, ...\), got torch.float64"
    ):
        get_loss("real")(inputs)
    inputs.group_ids = torch.zeros(5, 1, dtype=torch.long)
    with pytest.raises(ValueError, match=r"^group_ids: expected shape \(B,\) = \(5,\), got \(5, 1\)$"):
        get_loss("real")(inputs)


def test_real_nonfinite_score_gives_a_nonfinite_loss_and_gradient():
    inputs = real_case()
    inputs.old_log_probs[3, 0] = math.nan  # in group 3, which has no negative side: only the shared rule sees it
    out, grad = value_and_grad("real", inputs, validate=False)
    assert not torch.isfinite(out.loss) and not torch.isfinite(grad).all()
    assert out.metrics["nonfinite_tokens"].item() == 1.0


@pytest.mark.parametrize("framework", ["verl", "OpenRLHF", "SkyRL"])
def test_the_adapters_without_groups_refuse_real_by_name(framework):
    """verl, OpenRLHF and SkyRL pass no group ids: the one rule of ``adapters.inputs``
    (``LossSpec.requires``) refuses real in each, with the reason, where the adapter first
    translates the loss. TRL passes them (tests/trl/test_terms.py)."""
    reason = f"real needs group ids (the rows that share a prompt), which the {framework} adapter does not pass yet"
    assert refusal(get_loss("real"), framework) == reason
    with pytest.raises(ValueError, match=f"^gmpo_plugins: {re.escape(reason)}$"):
        refuse_unsupplied(get_loss("real"), framework)
    assert refusal(get_loss("fipo"), framework) is None
    assert refusal(get_loss("real"), "TRL") is None


def test_the_openrlhf_and_skyrl_translations_refuse_real_first():
    """Through the option modules, which import no framework (verl's is in tests/verl)."""
    from gmpo_plugins.adapters.openrlhf.options import OpenRLHFConfigError, plan_loss
    from gmpo_plugins.adapters.skyrl.options import SkyRLConfigError, resolution_from_config

    from .test_hparam_sources import OPENRLHF_DEFAULTS

    message = r"^gmpo_plugins: real needs group ids \(the rows that share a prompt\), which the {} adapter"
    with pytest.raises(OpenRLHFConfigError, match=message.format("OpenRLHF")):
        plan_loss("real", **OPENRLHF_DEFAULTS)
    with pytest.raises(SkyRLConfigError, match=message.format("SkyRL")):
        resolution_from_config(get_loss("real"), None, "real")


@pytest.mark.parametrize(
    "name, hparams, message",
    [
        ("fipo", {"fipo_decay_rate": 0.0}, "fipo_decay_rate must be a finite number > 0"),
        ("fipo", {"fipo_clip_range": -0.1}, "fipo_clip_range must be None or a finite number >= 0"),
        ("fipo", {"fipo_clip_high_only": 1}, "fipo_clip_high_only must be True or False"),
        ("fipo", {"fipo_safety_threshold": 0.0}, "fipo_safety_threshold must be None or a finite number > 0"),
        ("fipo", {"reduction": "seq-mean-token-mean"}, r"reduction must be one of \['token-mean'\]"),
        ("real", {"real_tau": 0.0}, "real_tau must be a finite number > 0"),
    ],
)
def test_a_bad_hyper_parameter_is_refused_by_name(name, hparams, message):
    inputs = real_case()
    with pytest.raises(ValueError, match=f"^{name}: {message}"):
        get_loss(name)(inputs, **hparams)
    # None or 0 switches fipo's clip off, None its safety band (ms-swift's)
    get_loss("fipo")(inputs, fipo_clip_range=0.0, fipo_safety_threshold=None)
