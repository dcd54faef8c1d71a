"""Straightforward float64 references, written sequence by sequence with Python loops,
independent of the package's vectorised code. Used as test oracles only.

Each reference returns the micro-batch loss given the normalising count ``n`` (sequences
or tokens) and ``dp`` the data-parallel size: ``sum / n * dp``.
"""

from __future__ import annotations

import math

import torch

GUARD = 20.0
PRODUCT_GUARD_64 = 0.9 * math.log(torch.finfo(torch.float64).max)  # gmpo_nonorm's guard in float64


def _rows(log_probs, old, adv, mask):
    for i in range(log_probs.shape[0]):
        idx = [t for t in range(log_probs.shape[1]) if bool(mask[i, t])]
        a = adv[i] if adv.dim() == 1 else adv[i, idx[0]] if idx else adv[i, 0]
        yield i, idx, a


def gmpo_reference(
    log_probs,
    old,
    adv,
    mask,
    *,
    eps_low=0.4,
    eps_high=0.4,
    clip="token",
    normalise=True,
    n,
    dp=1,
    kl_beta=0.0,
    ref=None,
):
    """sum_i -A_i * exp(s_i) (+ beta * mean k3) / n * dp, with the GMPO family's s_i."""
    total = log_probs.new_zeros(())
    for i, idx, a in _rows(log_probs, old, adv, mask):
        if not idx:
            continue
        terms = []
        for t in idx:
            r = (log_probs[i, t] - old[i, t]).clamp(-GUARD, GUARD)
            if clip == "token":
                if a > 0:
                    r = torch.minimum(r, r.new_tensor(eps_high))
                elif a < 0:
                    r = torch.maximum(r, r.new_tensor(-eps_low))
            terms.append(r)
        s = sum(terms)
        if clip == "sequence":  # the authors' gmpo_seqclip: clip the sum, then divide
            if a > 0:
                s = torch.minimum(s, s.new_tensor(eps_high))
            elif a < 0:
                s = torch.maximum(s, s.new_tensor(-eps_low))
        s = s / len(idx) if normalise else s.clamp(-PRODUCT_GUARD_64, PRODUCT_GUARD_64)
        loss_i = -a * torch.exp(s)
        if ref is not None:
            k = [torch.exp(ref[i, t] - log_probs[i, t]) - (ref[i, t] - log_probs[i, t]) - 1 for t in idx]
            loss_i = loss_i + kl_beta * sum(k) / len(idx)
        total = total + loss_i
    return total / n * dp


def gspo_reference(log_probs, old, adv, mask, *, eps_low=3e-4, eps_high=4e-4, n, dp=1):
    total = log_probs.new_zeros(())
    for i, idx, a in _rows(log_probs, old, adv, mask):
        if not idx:
            continue
        s = torch.exp(sum((log_probs[i, t] - old[i, t]).clamp(-GUARD, GUARD) for t in idx) / len(idx))
        total = total + torch.maximum(-a * s, -a * s.clamp(1 - eps_low, 1 + eps_high))
    return total / n * dp


def ppo_token_reference(log_probs, old, adv, mask, *, eps_low=0.2, eps_high=0.2, dual_clip=None):
    """Per-token clipped surrogate as a dict {(i, t): loss}."""
    out = {}
    for i in range(log_probs.shape[0]):
        for t in range(log_probs.shape[1]):
            if not bool(mask[i, t]):
                continue
            a = adv[i] if adv.dim() == 1 else adv[i, t]
            ratio = torch.exp((log_probs[i, t] - old[i, t]).clamp(-GUARD, GUARD))
            term = torch.maximum(-a * ratio, -a * ratio.clamp(1 - eps_low, 1 + eps_high))
            if dual_clip is not None and a < 0:
                term = torch.minimum(term, -a * dual_clip)
            out[i, t] = term
    return out


def grpo_reference(log_probs, old, adv, mask, *, reduction, n, dp=1, norm_length=None, **clip):
    """GRPO/DAPO/Dr.GRPO reductions; ``n`` counts tokens for token-mean, sequences otherwise."""
    per_token = ppo_token_reference(log_probs, old, adv, mask, **clip)
    if reduction == "token-mean":
        return sum(per_token.values(), log_probs.new_zeros(())) / n * dp
    total = log_probs.new_zeros(())
    length = norm_length or 1024  # DR_GRPO_NORM_LENGTH
    for i in range(log_probs.shape[0]):
        row = [v for (j, _), v in per_token.items() if j == i]
        if not row:
            continue
        total = total + sum(row) / (len(row) if reduction == "seq-mean-token-mean" else length)
    return total / n * dp


def weight(log_ratio_sum: float, length: int) -> float:
    return math.exp(log_ratio_sum / length)
