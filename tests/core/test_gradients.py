"""Loss and gradient of every built-in loss against the loop references (float64
autograd) and against finite differences."""

from __future__ import annotations

import pytest
import torch

from gmpo_plugins import BatchInfo, LossInputs, get_loss

from .batches import random_batch
from .reference import gmpo_reference, grpo_reference, gspo_reference

GMPO_VARIANTS = {
    "gmpo": dict(clip="token", normalise=True),
    "gmpo_noclip": dict(clip="none", normalise=True),
    "gmpo_seqclip": dict(clip="sequence", normalise=True),
    "gmpo_nonorm": dict(clip="token", normalise=False),
}
REDUCTIONS = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


def reference_loss(name: str, inputs: LossInputs, batch: BatchInfo, hparams: dict) -> torch.Tensor:
    lp, old, adv, mask = inputs.log_probs, inputs.old_log_probs, inputs.advantages, inputs.mask
    rows = int(mask.any(-1).sum())
    tokens = int(mask.sum())
    if name in GMPO_VARIANTS:
        eps = {k: hparams[k] for k in ("eps_low", "eps_high") if k in hparams}
        n = batch.global_batch_size or rows
        return gmpo_reference(
            lp,
            old,
            adv,
            mask,
            **GMPO_VARIANTS[name],
            **eps,
            n=n,
            dp=batch.dp_size if batch.global_batch_size else 1,
            kl_beta=hparams.get("kl_beta", 0.0),
            ref=inputs.ref_log_probs,
        )
    if name == "gspo":
        n = batch.global_batch_size or rows
        return gspo_reference(lp, old, adv, mask, n=n, dp=batch.dp_size if batch.global_batch_size else 1, **hparams)
    reduction = hparams["reduction"]
    global_n = batch.global_num_tokens if reduction == "token-mean" else batch.global_batch_size
    local_n = tokens if reduction == "token-mean" else rows
    clip = {k: hparams[k] for k in ("eps_low", "eps_high", "dual_clip") if k in hparams}
    return grpo_reference(
        lp, old, adv, mask, reduction=reduction, n=global_n or local_n, dp=batch.dp_size if global_n else 1, **clip
    )


CASES = [
    ("gmpo", {}),
    ("gmpo", {"eps_low": 0.1, "eps_high": 0.3}),
    ("gmpo_noclip", {}),
    ("gmpo_seqclip", {"eps_low": 0.05, "eps_high": 0.05}),
    ("gmpo_nonorm", {}),
    ("gspo", {"eps_low": 0.05, "eps_high": 0.1}),
    *[("grpo", {"reduction": r}) for r in REDUCTIONS],
    ("grpo", {"reduction": "token-mean", "dual_clip": 1.5, "eps_high": 0.28}),
]


@pytest.mark.parametrize("name, hparams", CASES)
@pytest.mark.parametrize("batch_info", [BatchInfo(), BatchInfo(dp_size=2, global_batch_size=20, global_num_tokens=90)])
def test_matches_loop_reference_in_float64(name, hparams, batch_info):
    inputs = random_batch(7, 11, seed=3, empty_rows=(4,))
    out = get_loss(name)(inputs, batch_info, **hparams)
    (grad,) = torch.autograd.grad(out.loss, inputs.log_probs)
    ref_inputs = LossInputs(
        inputs.log_probs.detach().clone().requires_grad_(), inputs.old_log_probs, inputs.advantages, inputs.mask
    )
    ref = reference_loss(name, ref_inputs, batch_info, hparams)
    (ref_grad,) = torch.autograd.grad(ref, ref_inputs.log_probs)
    assert out.loss.item() == pytest.approx(ref.item(), rel=1e-12, abs=1e-15)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-12, atol=1e-15)


def test_kl_term_matches_reference():
    inputs = random_batch(5, 6, seed=8)
    inputs.ref_log_probs = inputs.old_log_probs + 0.3
    out = get_loss("gmpo")(inputs, kl_beta=0.2)
    (grad,) = torch.autograd.grad(out.loss, inputs.log_probs)
    lp = inputs.log_probs.detach().clone().requires_grad_()
    ref = gmpo_reference(
        lp, inputs.old_log_probs, inputs.advantages, inputs.mask, n=5, kl_beta=0.2, ref=inputs.ref_log_probs
    )
    (ref_grad,) = torch.autograd.grad(ref, lp)
    assert out.loss.item() == pytest.approx(ref.item(), rel=1e-12)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-12, atol=1e-15)


def _away_from_kinks(inputs: LossInputs, margin: float = 2e-3) -> bool:
    """True when no log ratio sits within ``margin`` of a clip boundary used below."""
    r = (inputs.log_probs - inputs.old_log_probs).detach()[inputs.mask]
    for edge in (0.4, -0.4, 0.3, -0.1):
        if torch.any((r - edge).abs() < margin):
            return False
    return True


@pytest.mark.parametrize(
    "name, hparams",
    [
        ("gmpo", {}),
        ("gmpo", {"eps_low": 0.1, "eps_high": 0.3}),
        ("gmpo_noclip", {}),
        ("gmpo_nonorm", {}),
        *[("grpo", {"reduction": r}) for r in REDUCTIONS],
        ("gspo", {}),
    ],
)
def test_gradient_matches_finite_differences(name, hparams):
    inputs = random_batch(4, 5, seed=11, spread=0.4)
    assert _away_from_kinks(inputs)
    mask, old, adv = inputs.mask, inputs.old_log_probs, inputs.advantages

    def loss_of(log_probs):
        return get_loss(name)(LossInputs(log_probs, old, adv, mask), **hparams).loss

    assert torch.autograd.gradcheck(loss_of, (inputs.log_probs,), eps=1e-7, atol=1e-7, rtol=1e-5)


def test_half_precision_is_computed_in_float32():
    inputs = random_batch(6, 9, seed=5, dtype=torch.float32)
    bf16 = LossInputs(
        inputs.log_probs.detach().to(torch.bfloat16).requires_grad_(),
        inputs.old_log_probs.to(torch.bfloat16),
        inputs.advantages.to(torch.bfloat16),
        inputs.mask,
    )
    fp32 = LossInputs(
        bf16.log_probs.detach().float().requires_grad_(),
        bf16.old_log_probs.float(),
        bf16.advantages.float(),
        inputs.mask,
    )
    out16, out32 = get_loss("gmpo")(bf16), get_loss("gmpo")(fp32)
    assert out16.loss.dtype == torch.float32
    assert out16.loss.item() == out32.loss.item()  # identical: same fp32 arithmetic on the same values
    out16.loss.backward()
    out32.loss.backward()
    assert bf16.log_probs.grad.dtype == torch.bfloat16
    torch.testing.assert_close(bf16.log_probs.grad.float(), fp32.log_probs.grad.to(torch.bfloat16).float())
