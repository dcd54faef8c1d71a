"""The per-token losses (cispo, sapo, gpg, dro, dppo_tv, dppo_kl, clip_cov, kl_cov, luspo, vespo)
and the token-sum / seq-mean-token-sum reductions: hand values (arithmetic in the comments),
float64 gradients against the loop references, the batch dependence of clip_cov / kl_cov,
refused hyper-parameters and names, and non-finite inputs."""

from __future__ import annotations

import math

import pytest
import torch

from gmpo_plugins import BatchInfo, LossInputs, UnknownLossError, get_loss, list_losses

from .batches import random_batch
from .reference import per_token_reference, reduce_reference

LN = math.log
PER_TOKEN = [
    *("cispo", "sapo", "gpg", "dro", "dppo_tv", "dppo_kl", "clip_cov", "kl_cov", "luspo", "vespo"),
    *("rollout_is", "importance_sampling"),
]


def batch(log_probs, old, advantages, mask=None) -> LossInputs:
    """float64 inputs from nested lists; every position valid unless ``mask`` says otherwise."""
    lp = torch.tensor(log_probs, dtype=torch.float64, requires_grad=True)
    m = torch.ones_like(lp, dtype=torch.bool) if mask is None else torch.tensor(mask)
    return LossInputs(lp, torch.tensor(old, dtype=torch.float64), torch.tensor(advantages, dtype=torch.float64), m)


def value_and_grad(name, inputs, info=None, **hparams):
    out = get_loss(name)(inputs, info, **hparams)
    (grad,) = torch.autograd.grad(out.loss, inputs.log_probs)
    return out, grad


def test_cispo_caps_the_weight_and_keeps_the_gradient_of_clipped_tokens():
    # ratios [1, 6, 0.5] (log ratios 0, ln 6, -ln 2), log pi [-1, -0.5, -2], A = 2.
    # default eps_high 4 (cap 5), no lower clip: weights [1, 5, 0.5]
    # l = -w A log pi = [2, 5, 2], token-mean 9 / 3 = 3; gradient -w A / 3 = [-2/3, -10/3, -1/3]
    lp = [[-1.0, -0.5, -2.0]]
    inputs = batch(lp, [[-1.0, -0.5 - LN(6), -2.0 + LN(2)]], [2.0])
    out, grad = value_and_grad("cispo", inputs)
    assert out.loss.item() == pytest.approx(3.0, rel=1e-12)
    torch.testing.assert_close(grad, torch.tensor([[-2 / 3, -10 / 3, -1 / 3]], dtype=torch.float64))
    assert out.metrics["clip_frac_high"].item() == pytest.approx(1 / 3)
    assert out.metrics["clip_frac_low"].item() == 0.0
    # eps_low = 0.2: the third weight becomes 0.8, l_3 = 0.8 * 2 * 2 = 3.2: (2 + 5 + 3.2) / 3 = 3.4
    out, grad = value_and_grad("cispo", inputs, eps_low=0.2)
    assert out.loss.item() == pytest.approx(3.4, rel=1e-12)
    assert grad[0, 2].item() == pytest.approx(-1.6 / 3, rel=1e-12)
    assert out.metrics["clip_frac_low"].item() == pytest.approx(1 / 3)


def test_sapo_gate_and_its_sequence_mean():
    # seq 0: ratio 1, A = 1, tau_pos 1: f = sigmoid(0) * 4 = 2, l = -2, df/dlog pi = 4 s(1 - s) r = 1
    # seq 1: ratio 2, A = -1, tau_neg 1.05: f = sigmoid(1.05) * 4 / 1.05 = 0.740775 * 3.809524 = 2.822000
    # seq-mean-token-mean: (-2 + 2.822000) / 2 = 0.411000; gradients -A * slope / 2
    s = 1 / (1 + math.exp(-1.05))
    inputs = batch([[-1.0], [-1.0]], [[-1.0], [-1.0 - LN(2)]], [1.0, -1.0])
    out, grad = value_and_grad("sapo", inputs)
    assert 4 * s / 1.05 == pytest.approx(2.822000, abs=1e-6)
    assert out.loss.item() == pytest.approx((-2 + 4 * s / 1.05) / 2, rel=1e-12)
    torch.testing.assert_close(grad, torch.tensor([[-0.5], [4 * s * (1 - s) * 2 / 2]], dtype=torch.float64))


@pytest.mark.parametrize(
    ("reduction", "info", "expected"),
    [
        # token losses -A log pi: seq 0 (A = 1, log pi -1, -2): [1, 2]; seq 1 (A = -0.5, log pi -4): [-2]
        ("token-mean", None, (1 + 2 - 2) / 3),
        ("token-sum", None, 1 + 2 - 2),
        ("seq-mean-token-sum", None, ((1 + 2) + -2) / 2),
        ("seq-mean-token-mean", None, ((1 + 2) / 2 + -2) / 2),
        # dp_size 2: token-sum is scaled by dp only (1 * 2); seq-mean-token-sum over N = 4: 1 / 4 * 2
        ("token-sum", BatchInfo(dp_size=2), 2.0),
        ("seq-mean-token-sum", BatchInfo(dp_size=2, global_batch_size=4), 0.5),
    ],
)
def test_gpg_under_every_token_reduction(reduction, info, expected):
    inputs = batch([[-1.0, -2.0], [-4.0, 0.0]], [[-1.0, -2.0], [-4.0, 0.0]], [1.0, -0.5], [[1, 1], [1, 0]])
    out, _ = value_and_grad("gpg", inputs, info, reduction=reduction)
    assert out.loss.item() == pytest.approx(expected, rel=1e-12)


def test_grpo_takes_the_new_reductions():
    # ratios 1: l = -A; seq 0 (A = 1, 2 tokens) [-1, -1], seq 1 (A = 3, 1 token) [-3]
    # token-sum -5; seq-mean-token-sum (-2 - 3) / 2 = -2.5
    inputs = batch([[-1.0, -2.0], [-4.0, 0.0]], [[-1.0, -2.0], [-4.0, 0.0]], [1.0, 3.0], [[1, 1], [1, 0]])
    assert get_loss("grpo")(inputs, reduction="token-sum").loss.item() == pytest.approx(-5.0)
    assert get_loss("grpo")(inputs, reduction="seq-mean-token-sum").loss.item() == pytest.approx(-2.5)


def test_dro_penalty():
    # log pi -1, old -1.5: d = 0.5, A = 2, dro_beta 0.1: l = -(2 * -1 - 0.05 * 0.25) = 2.0125
    # gradient -A + beta d = -2 + 0.05 = -1.95
    out, grad = value_and_grad("dro", batch([[-1.0]], [[-1.5]], [2.0]))
    assert out.loss.item() == pytest.approx(2.0125, rel=1e-12)
    assert grad.item() == pytest.approx(-1.95, rel=1e-12)


# p = pi(o_t), q = pi_old(o_t), A = [1, 1, -1, 1]:
#   t0 q 0.2 p 0.5: TV p - q = 0.3 > 0.15 out; KL D = 0.2 ln 0.4 + 0.8 ln(0.8 / 0.5) = 0.19274 > 0.05, p > q: out
#   t1 q 0.2 p 0.3: TV 0.1 in;                 KL D = 0.2 ln(2/3) + 0.8 ln(0.8 / 0.7) = 0.025732: in
#   t2 q 0.4 p 0.1, A < 0: TV -0.3 < -0.15 out; KL D = 0.4 ln 4 + 0.6 ln(0.6 / 0.9) = 0.31124, p < q: out
#   t3 q 0.01 p 0.15: TV 0.14 in;              KL D = 0.01 ln(1/15) + 0.99 ln(0.99 / 0.85) = 0.12387: out
# kept token: l = -A sg(p / q) log p, gradient -A p / q; token-mean over 4
DPPO_P, DPPO_Q, DPPO_A = [0.5, 0.3, 0.1, 0.15], [0.2, 0.2, 0.4, 0.01], [1.0, 1.0, -1.0, 1.0]


@pytest.mark.parametrize(("name", "kept"), [("dppo_tv", (1, 3)), ("dppo_kl", (1,))])
def test_dppo_trust_region_masks(name, kept):
    lp = [[LN(p) for p in DPPO_P]]
    inputs = batch(lp, [[LN(q) for q in DPPO_Q]], [DPPO_A])
    out, grad = value_and_grad(name, inputs)
    loss = sum(-DPPO_A[t] * DPPO_P[t] / DPPO_Q[t] * LN(DPPO_P[t]) for t in kept) / 4
    # TV: (-1.5 ln 0.3 - 15 ln 0.15) / 4 = (1.805959 + 28.456799) / 4 = 7.565690; KL: 1.805959 / 4
    assert out.loss.item() == pytest.approx(loss, rel=1e-12)
    expected = [-DPPO_A[t] * DPPO_P[t] / DPPO_Q[t] / 4 if t in kept else 0.0 for t in range(4)]
    torch.testing.assert_close(grad, torch.tensor([expected], dtype=torch.float64))
    assert out.metrics["clip_frac_low"].item() == pytest.approx(1 / 4)  # t2
    assert out.metrics["clip_frac_high"].item() == pytest.approx((3 - len(kept)) / 4)


def test_dppo_ratio_cap_truncates_the_weight():
    # t3 alone: p / q = 15, cap 3: l = -3 ln 0.15 = 5.691360, gradient -3
    out, grad = value_and_grad("dppo_tv", batch([[LN(0.15)]], [[LN(0.01)]], [1.0]), ratio_cap=3.0)
    assert out.loss.item() == pytest.approx(-3 * LN(0.15), rel=1e-12)
    assert grad.item() == pytest.approx(-3.0, rel=1e-12)


# A = [2, -2, 0, 0] per token, log pi = [-1, -3, -2, -2]: mean A = 0, mean log pi = -2,
# C = (A - 0) * (log pi + 2) = [2, 2, 0, 0]. n = 4.
COV_LP, COV_A = [[-1.0, -3.0, -2.0, -2.0]], [[2.0, -2.0, 0.0, 0.0]]


def test_clip_cov_drops_the_largest_covariance_in_the_band():
    # ratios 1: no PPO clip. clip_cov_ratio 0.25: k = 1; candidates C in (1, 5): t0, t1 (tie at 2: t0,
    # the lower index). l = -A r = [0 (dropped), 2, 0, 0]: token-mean 0.5; gradient t1 -A / 4 = 0.5
    inputs = batch(COV_LP, COV_LP, COV_A)
    out, grad = value_and_grad("clip_cov", inputs, clip_cov_ratio=0.25)
    assert out.loss.item() == pytest.approx(0.5, rel=1e-12)
    torch.testing.assert_close(grad, torch.tensor([[0.0, 0.5, 0.0, 0.0]], dtype=torch.float64))
    assert out.metrics["cov_selected_frac"].item() == pytest.approx(0.25)
    # clip_cov_ratio 0.5: k = 2, both dropped: loss 0. Band (2.5, 5): no candidate: nothing dropped, -2 + 2 = 0
    assert get_loss("clip_cov")(inputs, clip_cov_ratio=0.5).loss.item() == 0.0
    out = get_loss("clip_cov")(inputs, clip_cov_ratio=0.5, clip_cov_lb=2.5)
    assert out.metrics["cov_selected_frac"].item() == 0.0


def test_kl_cov_penalises_the_largest_covariance():
    # log ratios [0.1, -0.2, 0.3, 0]; C as above, kl_cov_ratio 0.25: k = 1, t0 (tie, lower index).
    # l = [-2 e^0.1 + 1 * 0.1, 2 e^-0.2, 0, 0] = [-2.110342 + 0.1, 1.637462, 0, 0]: token-mean / 4
    # gradient: t0 (-2 e^0.1 + 1) / 4, t1 2 e^-0.2 / 4
    old = [[-1.1, -2.8, -2.3, -2.0]]
    out, grad = value_and_grad("kl_cov", batch(COV_LP, old, COV_A), kl_cov_ratio=0.25)
    assert out.loss.item() == pytest.approx((-2 * math.exp(0.1) + 0.1 + 2 * math.exp(-0.2)) / 4, rel=1e-12)
    expected = [(-2 * math.exp(0.1) + 1) / 4, 2 * math.exp(-0.2) / 4, 0.0, 0.0]
    torch.testing.assert_close(grad, torch.tensor([expected], dtype=torch.float64))


def test_luspo_weighs_each_sequence_by_its_length():
    # seq 0: log ratios [0.2, 0], A = 1, eps_high 0.5: s = e^0.1 unclipped, L = 2 * -e^0.1 = -2.210342
    # seq 1: one token, ratio 1, A = 1: L = -1.  seq-mean-token-sum: (-2 e^0.1 - 1) / 2
    # gradient of seq 0's tokens: -2 e^0.1 / 2 (the mean's derivative) / 2 (sequences) = -e^0.1 / 2
    inputs = batch([[-1.0, -2.0], [-1.0, 0.0]], [[-1.2, -2.0], [-1.0, 0.0]], [1.0, 1.0], [[1, 1], [1, 0]])
    out, grad = value_and_grad("luspo", inputs, eps_high=0.5)
    assert out.loss.item() == pytest.approx((-2 * math.exp(0.1) - 1) / 2, rel=1e-12)
    expected = [[-math.exp(0.1) / 2] * 2, [-0.5, 0.0]]
    torch.testing.assert_close(grad, torch.tensor(expected, dtype=torch.float64))
    # default eps_high 2.5e-3 (the LUSPO paper's): s = e^0.1 clipped to 1.0025, L_0 = -2.005 with no gradient
    out, grad = value_and_grad("luspo", inputs)
    assert out.loss.item() == pytest.approx((-2.005 - 1) / 2, rel=1e-12)
    assert grad[0].abs().sum().item() == 0.0
    assert out.metrics["clip_frac_high"].item() == pytest.approx(2 / 3)


def test_vespo_gamma_weight_of_the_sequence_ratio():
    # log ratios [0.2, 0.1]: lw = 0.3 (the sum), A = 1 >= 0: k 2, lambda 3
    # phi = exp(3 + 2 * 0.3 - 3 e^0.3) = exp(3.6 - 4.049576) = exp(-0.449576) = 0.637898
    # l = -phi * 1 * log pi = phi * [1, 2]: token-mean 3 phi / 2 = 0.956847; gradient -phi / 2
    inputs = batch([[-1.0, -2.0]], [[-1.2, -2.1]], [1.0])
    out, grad = value_and_grad("vespo", inputs)
    phi = math.exp(3 + 2 * 0.3 - 3 * math.exp(0.3))
    assert phi == pytest.approx(0.637898, abs=1e-6)
    assert out.loss.item() == pytest.approx(1.5 * phi, rel=1e-12)
    torch.testing.assert_close(grad, torch.full((1, 2), -phi / 2, dtype=torch.float64))
    # A < 0 at ratio 1: k 3, lambda 2, phi(1) = e^(2 - 2) = 1: l = -(-1) * log pi = [-1, -2], mean -1.5
    assert get_loss("vespo")(batch([[-1.0, -2.0]], [[-1.0, -2.0]], [-1.0])).loss.item() == pytest.approx(-1.5)
    # a rollout IS weight folds into phi: w = e^-0.3 on one token gives lw = 0, phi = 1: 1.5 (not 1.5 * w)
    inputs.rollout_is_weights = torch.tensor([[math.exp(-0.3), 1.0]], dtype=torch.float64)
    assert get_loss("vespo")(inputs).loss.item() == pytest.approx(1.5, rel=1e-12)


def test_per_token_rollout_is_weights_multiply_the_token_loss():
    # gpg, one token log pi -1, A = 1, w = 0.25: l = 0.25 * 1 = 0.25
    inputs = batch([[-1.0]], [[-1.0]], [1.0])
    inputs.rollout_is_weights = torch.tensor([[0.25]], dtype=torch.float64)
    assert get_loss("gpg")(inputs).loss.item() == pytest.approx(0.25, rel=1e-12)


def _cases():
    for name in PER_TOKEN:
        spec = get_loss(name)
        for reduction in spec.reductions:
            hparams = {"reduction": reduction}
            if name == "clip_cov":  # widen the band and the ratio so that tokens are dropped
                hparams.update(clip_cov_lb=-1.0, clip_cov_ub=1.0, clip_cov_ratio=0.2)
            if name == "kl_cov":
                hparams.update(kl_cov_ratio=0.2)
            if name == "luspo":
                hparams.update(eps_low=0.1, eps_high=0.1)
            yield pytest.param(name, hparams, id=f"{name}-{reduction}")


@pytest.mark.parametrize(("name", "hparams"), list(_cases()))
@pytest.mark.parametrize("info", [None, BatchInfo(dp_size=2, global_batch_size=20, global_num_tokens=90)])
def test_matches_loop_reference_in_float64(name, hparams, info):
    inputs = random_batch(7, 11, seed=3, empty_rows=(4,))
    inputs.log_probs = inputs.log_probs.detach().clamp(max=-0.01).requires_grad_()  # probabilities (dppo)
    out, grad = value_and_grad(name, inputs, info, **hparams)
    lp = inputs.log_probs.detach().clone().requires_grad_()
    params = get_loss(name).resolve(hparams)
    terms = per_token_reference(name, lp, inputs.old_log_probs, inputs.advantages, inputs.mask, params)
    counts = {} if info is None else {"n_seq": 20, "n_tok": 90, "dp": 2}
    ref = reduce_reference(terms, lp, inputs.mask, params["reduction"], **counts)
    (ref_grad,) = torch.autograd.grad(ref, lp)
    assert out.loss.item() == pytest.approx(ref.item(), rel=1e-12, abs=1e-15)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-12, atol=1e-15)
    assert grad.abs().sum() > 0
    if "cov_selected_frac" in out.metrics:  # the selection is exercised, not empty
        assert out.metrics["cov_selected_frac"].item() > 0


@pytest.mark.parametrize(("name", "hparams"), [("clip_cov", {"clip_cov_lb": -1.0, "clip_cov_ratio": 0.2}),
                                               ("kl_cov", {"kl_cov_ratio": 0.2})])  # fmt: skip
def test_covariance_losses_depend_exactly_on_the_batch_given(name, hparams):
    """Given the whole batch, the whole-batch result (the loop reference over the whole batch);
    two micro-batches select over their own tokens, so their accumulated gradient is the sum of
    the halves' own references and differs from the whole batch's."""
    spec = get_loss(name)
    assert not spec.split_invariant
    inputs = random_batch(8, 9, seed=5, spread=0.6)
    tokens = int(inputs.mask.sum())
    info = BatchInfo(global_batch_size=8, global_num_tokens=tokens)
    params = spec.resolve(hparams)

    def reference(rows: slice) -> torch.Tensor:
        terms = per_token_reference(
            name, inputs.log_probs[rows], inputs.old_log_probs[rows], inputs.advantages[rows], inputs.mask[rows], params
        )
        return reduce_reference(terms, inputs.log_probs, inputs.mask[rows], "token-mean", n_tok=tokens)

    def grad_of(loss: torch.Tensor) -> torch.Tensor:
        return torch.autograd.grad(loss, inputs.log_probs)[0]

    whole = grad_of(spec(inputs, info, **hparams).loss)
    torch.testing.assert_close(whole, grad_of(reference(slice(0, 8))), rtol=1e-12, atol=1e-15)
    split = torch.zeros_like(whole)
    for rows in (slice(0, 4), slice(4, 8)):
        piece = LossInputs(
            inputs.log_probs[rows], inputs.old_log_probs[rows], inputs.advantages[rows], inputs.mask[rows]
        )
        split += grad_of(spec(piece, info, **hparams).loss)
    torch.testing.assert_close(split, grad_of(reference(slice(0, 4)) + reference(slice(4, 8))), rtol=1e-12, atol=1e-15)
    assert (split - whole).abs().max() > 1e-3


def test_split_invariance_is_declared_and_listed():
    flags = {spec.name: spec.split_invariant for spec in list_losses() if spec.provider == "gmpo-plugins"}
    assert {name for name, flag in flags.items() if not flag} == {"clip_cov", "kl_cov", "m2po", "real"}


@pytest.mark.parametrize(
    ("name", "hparams", "words"),
    [
        ("cispo", {"eps_high": 0.0}, ["eps_high", "> 0"]),
        ("cispo", {"eps_low": 1.5}, ["eps_low", "< 1"]),
        ("sapo", {"tau_neg": -1.0}, ["tau_neg", "> 0"]),
        ("dro", {"dro_beta": 0.0}, ["dro_beta", "> 0"]),
        ("dppo_tv", {"delta_high": math.nan}, ["delta_high"]),
        ("dppo_kl", {"ratio_cap": 0}, ["ratio_cap"]),
        ("clip_cov", {"clip_cov_ratio": 2.0}, ["clip_cov_ratio", "(0, 1]"]),
        ("clip_cov", {"clip_cov_lb": 5.0}, ["clip_cov_lb", "clip_cov_ub"]),
        ("kl_cov", {"ppo_kl_coef": -1.0}, ["ppo_kl_coef", ">= 0"]),
        ("vespo", {"vespo_lambda_pos": 0.0}, ["vespo_lambda_pos", "> 0"]),
        ("luspo", {"reduction": "token-mean"}, ["reduction", "seq-mean-token-sum"]),
        ("gpg", {"reduction": "prompt_mean"}, ["prompt_mean", "prompt"]),
        ("gpg", {"reduction": "seq-mean-token-sum-norm"}, ["reduction"]),
    ],
)
def test_a_bad_hyper_parameter_is_one_line_naming_it(name, hparams, words):
    with pytest.raises(ValueError) as error:
        get_loss(name)(batch([[-1.0]], [[-1.0]], [1.0]), **hparams)
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"{name}: ")
    assert all(word in message for word in words), message


@pytest.mark.parametrize("name", ["bnpo", "cross_entropy"])
def test_refused_names_give_the_reason(name):
    with pytest.raises(UnknownLossError, match=f"loss '{name}' is not in the registry: "):
        get_loss(name)


@pytest.mark.parametrize("name", PER_TOKEN)
@pytest.mark.parametrize("field", ["log_probs", "old_log_probs", "advantages", "ref_log_probs", "rollout_is_weights"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_valid_input_gives_a_non_finite_loss(name, field, bad):
    """One valid position holds NaN or +-inf: the loss is not finite (validate=False lets the
    value through; validate=True refuses it before the loss runs)."""
    inputs = random_batch(3, 4, seed=2, token_advantages=name not in ("luspo", "vespo"))
    inputs.ref_log_probs = inputs.old_log_probs - 0.1
    inputs.rollout_is_weights = torch.ones(3, 4, dtype=torch.float64)
    tensor = getattr(inputs, field).detach().clone()
    if field == "advantages" and tensor.dim() == 1:
        tensor[1] = bad
    else:
        tensor[1, 0] = bad
    setattr(inputs, field, tensor.requires_grad_() if field == "log_probs" else tensor)
    out = get_loss(name)(inputs, validate=False, kl_beta=0.1)
    assert not torch.isfinite(out.loss)


def test_the_per_token_losses_call_nothing_in_the_kernels():
    """Eager torch only: neither the loss modules nor the shared pipeline they use import
    ``core.kernels`` (the fused paths are the existing losses' alone)."""
    import ast
    import importlib
    from pathlib import Path

    modules = {importlib.import_module(get_loss(name).fn.__module__) for name in PER_TOKEN}
    modules.add(importlib.import_module("gmpo_plugins.core.per_token"))
    for module in modules:
        tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
        imported = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
        assert not any("kernels" in (name or "") for name in imported), (module.__name__, imported)
