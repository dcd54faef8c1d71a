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


# The per-token losses (core/per_token.py), written token by token.


def _ratio(lp, old):
    return torch.exp((lp - old).clamp(-GUARD, GUARD))


def _adv(adv, i, t):
    return adv[i] if adv.dim() == 1 else adv[i, t]


def _valid(mask):
    return [(i, t) for i in range(mask.shape[0]) for t in range(mask.shape[1]) if bool(mask[i, t])]


def _selected(scores, candidates, ratio, n):
    """The k = max(floor(ratio * n), 1) candidates of largest score, ties to the lower index."""
    k = max(math.floor(ratio * n), 1)
    ranked = sorted(candidates, key=lambda key: (-scores[key], key))
    return set(ranked[:k])


def _covariances(lp, adv, mask):
    cells = _valid(mask)
    a = {c: float(_adv(adv, *c)) for c in cells}
    p = {c: float(lp[c].detach()) for c in cells}
    mean_a, mean_p = sum(a.values()) / len(cells), sum(p.values()) / len(cells)
    return {c: (a[c] - mean_a) * (p[c] - mean_p) for c in cells}


def per_token_reference(name, lp, old, adv, mask, hp):
    """{(i, t): l_t} of a per-token loss with the registry's default hyper-parameters ``hp``."""
    out = {}
    cells = _valid(mask)
    cov = _covariances(lp, adv, mask) if name in ("clip_cov", "kl_cov") and cells else {}
    if name == "clip_cov":
        candidates = []
        for i, t in cells:
            a, r = _adv(adv, i, t), _ratio(lp[i, t], old[i, t])
            by_ppo = -a * r.clamp(1 - hp["eps_low"], 1 + hp["eps_high"]) > -a * r
            if not by_ppo and hp["clip_cov_lb"] < cov[i, t] < hp["clip_cov_ub"]:
                candidates.append((i, t))
        chosen = _selected(cov, candidates, hp["clip_cov_ratio"], len(cells))
    if name == "kl_cov":
        chosen = _selected(cov, cells, hp["kl_cov_ratio"], len(cells))
    for i, t in cells:
        a, x, r = _adv(adv, i, t), lp[i, t], _ratio(lp[i, t], old[i, t])
        if name == "cispo":
            low = None if hp["eps_low"] is None else 1 - hp["eps_low"]
            out[i, t] = -r.clamp(low, 1 + hp["eps_high"]).detach() * a * x
        elif name == "sapo":
            tau = hp["tau_pos"] if a > 0 else hp["tau_neg"]
            out[i, t] = -torch.sigmoid(tau * (r - 1)) * 4 / tau * a
        elif name == "gpg":
            out[i, t] = -a * x
        elif name == "dro":
            d = (x - old[i, t]).clamp(-GUARD, GUARD)
            out[i, t] = -(a * x - hp["dro_beta"] / 2 * d**2)
        elif name in ("dppo_tv", "dppo_kl"):
            p, q = math.exp(float(x.detach())), math.exp(float(old[i, t]))
            if name == "dppo_tv":
                keep = p - q <= hp["delta_high"] if a > 0 else p - q >= -hp["delta_low"]
            else:
                d = q * math.log(q / p) + (1 - q) * math.log((1 - q + 1e-8) / (1 - p + 1e-8))
                keep = (d <= hp["delta_high"] or p <= q) if a > 0 else (d <= hp["delta_low"] or p >= q)
            out[i, t] = -a * r.detach() * x if keep else x * 0
        elif name == "clip_cov":
            term = torch.maximum(-a * r, -a * r.clamp(1 - hp["eps_low"], 1 + hp["eps_high"]))
            out[i, t] = x * 0 if (i, t) in chosen else term
        elif name == "rollout_is":
            inside = 1 - hp["eps_low"] < float(r.detach()) < 1 + hp["eps_high"]
            out[i, t] = -(r.detach() if inside else 0.0) * a * x
        elif name == "importance_sampling":
            out[i, t] = -r * a
        elif name == "kl_cov":
            d = (x - old[i, t]).clamp(-GUARD, GUARD)
            out[i, t] = -a * r + (hp["ppo_kl_coef"] * d.abs() if (i, t) in chosen else 0)
    if name in ("luspo", "vespo"):
        for i in range(lp.shape[0]):
            idx = [t for t in range(lp.shape[1]) if bool(mask[i, t])]
            if not idx:
                continue
            a = adv[i] if adv.dim() == 1 else adv[i, idx[0]]
            logs = [(lp[i, t] - old[i, t]).clamp(-GUARD, GUARD) for t in idx]
            if name == "luspo":
                s = torch.exp(sum(logs) / len(idx))
                g = torch.maximum(-a * s, -a * s.clamp(1 - hp["eps_low"], 1 + hp["eps_high"]))
                for t in idx:
                    out[i, t] = g
            else:
                lw = float(sum(logs).detach().clamp(math.log(1e-8), 20.0))
                k, lam = (
                    (hp["vespo_k_pos"], hp["vespo_lambda_pos"])
                    if a >= 0
                    else (hp["vespo_k_neg"], hp["vespo_lambda_neg"])
                )
                phi = math.exp(lam + k * lw - lam * math.exp(lw))
                for t in idx:
                    out[i, t] = -phi * a * lp[i, t]
    return out


def reduce_reference(per_token, lp, mask, reduction, *, n_seq=None, n_tok=None, dp=1):
    """A token reduction of {(i, t): l_t}, written out; local counts when none is given."""
    rows = [i for i in range(mask.shape[0]) if bool(mask[i].any())]
    n_seq = n_seq or len(rows)
    n_tok = n_tok or int(mask.sum())
    total = lp.new_zeros(())
    if reduction == "token-mean":
        return sum(per_token.values(), total) / n_tok * dp
    if reduction == "token-sum":
        return sum(per_token.values(), total) * dp
    for i in rows:
        row = [v for (j, _), v in per_token.items() if j == i]
        total = total + sum(row) / (len(row) if reduction == "seq-mean-token-mean" else 1)
    return total / n_seq * dp
