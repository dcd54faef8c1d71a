"""Any registry loss from the last hidden states and the ``lm_head`` weight, without the logits.

For N = B * T positions with hidden states h (N, H), the head W (V, H) and bias b (V,), the
target ids y (N,), the temperature tau and z_n = (W h_n + b) / tau (V,):

    lse_n      = log sum_v exp(z_nv)
    log_p_n    = z_{n, y_n} - lse_n                         (the per-token log-prob)
    entropy_n  = lse_n - sum_v softmax(z_n)_v z_nv           (a metric, no gradient)
    loss       = get_loss(name)(LossInputs(log_p, ...), batch, **hparams).loss

The log-probs are computed in two passes over chunks of ``chunk_size`` positions, so at most
one (chunk_size, V) block of logits exists at a time:

    pass 1 (forward, no graph)    log_p and entropy chunk by chunk, keeping lse (N,)
    the registry loss             called once on the whole (B, T) log_p, as on the unfused
                                  path: its value, metrics and dL/dlog_p (B, T) are exactly
                                  those of the unfused path, for any loss (sequence-level or
                                  not, built-in or plugin), because it is the same call
    pass 2 (backward)             each chunk's logits recomputed, then with g_n = dL/dlog_p_n
                                  dz_n = g_n (onehot(y_n) - softmax(z_n)) / tau,
                                  dh_n = W^T dz_n, dW = sum_n dz_n h_n^T, db = sum_n dz_n

Two passes instead of chunks of whole rows: a sequence-level loss knows no token's
derivative before its row is complete, and a registry loss is a function of the whole
micro-batch (its batch normalisation and metrics), so calling it per chunk would change it;
and one row of logits (T, V) can itself be gigabytes. The price is one more (chunk, H) x
(H, V) product per chunk than the unfused path (4 instead of 3). Positions outside ``mask``
never reach a product (their hidden states are replaced by 0, their ids by 0), so padding
garbage cannot make the result NaN; their log-prob and entropy are 0, their gradient 0.
Half-precision inputs run the products in their dtype and everything after in float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from gmpo_plugins.core.prepared import compute_dtype
from gmpo_plugins.core.reduce import as_bool_mask
from gmpo_plugins.core.registry import get_loss
from gmpo_plugins.core.spec import LossSpec
from gmpo_plugins.core.types import BatchInfo, LossInputs, LossOutput

CHUNK_ELEMENTS = 1 << 27
"""The most logits one chunk holds when ``chunk_size`` is None (883 positions at V = 152K,
512 MiB in float32): the bound on the path's memory at any number of positions."""

MIN_CHUNKS = 8
"""Chunks per call when ``chunk_size`` is None, at least: one chunk's logits are then at most
1/8 of the (N, V) logits the unfused path holds (it holds two or three such tensors)."""

EFFICIENT_CHUNK = 256
"""Positions per chunk below which a chunk's products are bound by streaming the (V, H) weight
rather than by arithmetic (measured at V = 152K, H = 1024 on one CPU thread, forward and
backward against the unfused path: 1.89x at 64 positions, 1.49x at 128, 1.17x at 256, 1.14x at
512, 1.10x at 1024). The default takes fewer than ``MIN_CHUNKS`` chunks, but at least two,
rather than chunks smaller than this."""


def default_chunk_size(vocab_size: int, positions: int) -> int:
    """Positions per chunk for N = ``positions`` and V = ``vocab_size``:

        chunk = min(CHUNK_ELEMENTS // V, max(ceil(N / MIN_CHUNKS), min(EFFICIENT_CHUNK, ceil(N / 2))))

    so a call of N >= 2 positions always takes at least two chunks (it saves memory at every
    size), at least ``MIN_CHUNKS`` from N = 2048 on, never more than ``CHUNK_ELEMENTS`` logits
    per chunk, and no chunk below ``EFFICIENT_CHUNK`` positions where N allows it.
    """
    n = max(1, positions)
    by_share = max(-(-n // MIN_CHUNKS), min(EFFICIENT_CHUNK, -(-n // 2)))
    return max(1, min(CHUNK_ELEMENTS // max(1, vocab_size), by_share))


def _chunk_logits(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, valid: torch.Tensor, temperature: float
) -> torch.Tensor:
    """z (n, V) in compute dtype for a chunk of hidden states (n, H), 0-rows where not ``valid``."""
    hidden = torch.where(valid[:, None], hidden, torch.zeros((), dtype=hidden.dtype, device=hidden.device))
    logits = hidden @ weight.t() if bias is None else torch.addmm(bias, hidden, weight.t())
    logits = logits.to(compute_dtype(logits.dtype))
    return logits if temperature == 1.0 else logits.div_(temperature)


class ChunkedLogProbs(torch.autograd.Function):
    """log_p (N,) with a differentiable path into hidden (N, H), weight and bias, and the
    entropy (N,) without one; see the module docstring for the two passes."""

    @staticmethod
    def forward(  # ctx: torch's per-call context, which carries the attributes set on it (Any)
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        targets: torch.Tensor,
        valid: torch.Tensor,
        temperature: float,
        chunk_size: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        n = hidden.shape[0]
        dtype = compute_dtype(hidden.dtype)
        log_probs = torch.zeros(n, dtype=dtype, device=hidden.device)
        entropy = torch.zeros(n, dtype=dtype, device=hidden.device)
        lse = torch.zeros(n, dtype=dtype, device=hidden.device)
        for start in range(0, n, chunk_size):
            rows = slice(start, min(start + chunk_size, n))
            z = _chunk_logits(hidden[rows], weight, bias, valid[rows], temperature)  # (n_c, V)
            target = z.gather(1, targets[rows, None]).squeeze(1)
            top = z.amax(1, keepdim=True)
            exp = z.sub_(top).exp_()  # e_v = exp(z_v - max), in place: one (n_c, V) buffer
            total = exp.sum(1)
            log_total = total.log()
            chunk_lse = top.squeeze(1) + log_total
            lse[rows] = chunk_lse
            log_probs[rows] = torch.where(valid[rows], target - chunk_lse, 0.0)
            # entropy = log sum_v e_v - sum_v e_v log(e_v) / sum_v e_v, again in place
            entropy[rows] = torch.where(valid[rows], log_total - exp.xlogy_(exp).sum(1) / total, 0.0)
            del z, exp  # free this chunk's (n_c, V) block before the next one is allocated
        ctx.save_for_backward(hidden, weight, bias, targets, valid, lse)
        ctx.temperature, ctx.chunk_size = temperature, chunk_size
        ctx.mark_non_differentiable(entropy)
        return log_probs, entropy

    @staticmethod
    def backward(
        ctx: Any, grad_log_probs: torch.Tensor, _grad_entropy: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, ...]:
        hidden, weight, bias, targets, valid, lse = ctx.saved_tensors
        temperature, chunk_size = ctx.temperature, ctx.chunk_size
        dtype = compute_dtype(hidden.dtype)
        want_hidden, want_weight, want_bias = ctx.needs_input_grad[:3]
        grad_hidden = torch.zeros_like(hidden) if want_hidden else None
        grad_weight = torch.zeros(weight.shape, dtype=dtype, device=weight.device) if want_weight else None
        grad_bias = torch.zeros(weight.shape[0], dtype=dtype, device=weight.device) if want_bias else None
        grad = torch.where(valid, grad_log_probs.to(dtype), 0.0) / temperature
        for start in range(0, hidden.shape[0], chunk_size):
            rows = slice(start, min(start + chunk_size, hidden.shape[0]))
            z = _chunk_logits(hidden[rows], weight, bias, valid[rows], temperature)
            g = grad[rows]
            dz = z.sub_(lse[rows, None]).exp_().mul_(-g[:, None])  # -g p, in place of z
            dz.scatter_add_(1, targets[rows, None], g[:, None])  # + g onehot(y)
            if grad_hidden is not None:
                grad_hidden[rows] = (dz.to(weight.dtype) @ weight).to(hidden.dtype)
            if grad_weight is not None:
                chunk = torch.where(
                    valid[rows, None], hidden[rows], torch.zeros((), dtype=hidden.dtype, device=hidden.device)
                )
                grad_weight.addmm_(dz.t(), chunk.to(dtype))  # in place: no (V, H) temporary
            if grad_bias is not None:
                grad_bias.add_(dz.sum(0))
            del z, dz  # free this chunk's (n_c, V) block before the next one is allocated
        return (
            grad_hidden,
            None if grad_weight is None else grad_weight.to(weight.dtype),
            None if grad_bias is None else grad_bias.to(weight.dtype),
            None,
            None,
            None,
            None,
        )


@dataclass
class FusedLinearOutput(LossOutput):
    """``LossOutput`` of ``fused_linear_loss`` with the per-token quantities it computed.

    metrics    the registry loss's, plus ``entropy``: mean over valid tokens (0 without any)
    log_probs  (B, T) detached log-probs (0 outside the mask)
    entropy    (B, T) detached entropies (0 outside the mask)
    """

    log_probs: torch.Tensor = field(kw_only=True)
    entropy: torch.Tensor = field(kw_only=True)


def _check(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    mask: torch.Tensor,
    temperature: float,
    chunk_size: int,
    values: bool,
) -> None:
    """ValueError/TypeError naming the bad argument; ``values`` also reads the target ids."""
    if not isinstance(hidden, torch.Tensor) or hidden.dim() != 3 or not hidden.dtype.is_floating_point:
        raise ValueError(f"hidden_states: expected a floating (B, T, H) tensor, got {_describe(hidden)}")
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2 or weight.shape[1] != hidden.shape[2]:
        raise ValueError(
            f"weight: expected the lm_head weight (V, H) with H = {hidden.shape[2]} (hidden_states' last "
            f"dimension), got {_describe(weight)}"
        )
    if weight.dtype != hidden.dtype or weight.device != hidden.device:
        raise ValueError(
            f"weight: expected hidden_states' dtype and device ({hidden.dtype}, {hidden.device}), "
            f"got ({weight.dtype}, {weight.device})"
        )
    if bias is not None and (bias.shape != weight.shape[:1] or bias.dtype != weight.dtype):
        raise ValueError(f"bias: expected ({weight.shape[0]},) {weight.dtype}, got {_describe(bias)}")
    if not isinstance(targets, torch.Tensor) or targets.shape != hidden.shape[:2] or targets.dtype.is_floating_point:
        raise ValueError(
            f"targets: expected integer token ids of shape {tuple(hidden.shape[:2])}, got {_describe(targets)}"
        )
    if not isinstance(mask, torch.Tensor) or mask.shape != hidden.shape[:2]:
        raise ValueError(f"mask: expected shape {tuple(hidden.shape[:2])}, got {_describe(mask)}")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size: expected a positive integer (positions per chunk), got {chunk_size!r}")
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, int | float)
        or not math.isfinite(temperature)
        or temperature <= 0
    ):
        raise ValueError(f"temperature: expected a finite number > 0, got {temperature!r}")
    if torch.is_grad_enabled() and not (hidden.requires_grad or weight.requires_grad):
        raise ValueError(
            "weight: neither weight nor hidden_states requires grad, so the loss would train nothing "
            "(pass the lm_head weight as a parameter, or call under torch.no_grad() to evaluate)"
        )
    if values and targets.numel() > 0:
        valid = as_bool_mask(mask)
        if not bool(torch.isfinite(hidden[valid]).all()):
            raise ValueError("hidden_states: expected finite values at valid (mask=True) positions, found NaN or inf")
        ids = targets[valid]
        if ids.numel() and bool((ids.min() < 0) | (ids.max() >= weight.shape[0])):
            raise ValueError(
                f"targets: token ids at valid positions must lie in [0, {weight.shape[0]}) (the vocabulary of "
                f"weight), got min {int(ids.min())}, max {int(ids.max())}"
            )


def _describe(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"shape {tuple(value.shape)} {value.dtype} on {value.device}"
    return type(value).__name__


def fused_linear_loss(
    loss: str | LossSpec,
    hidden_states: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    old_log_probs: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    batch: BatchInfo | None = None,
    *,
    bias: torch.Tensor | None = None,
    ref_log_probs: torch.Tensor | None = None,
    rollout_is_weights: torch.Tensor | None = None,
    rollout_log_probs: torch.Tensor | None = None,
    rewards: torch.Tensor | None = None,
    group_ids: torch.Tensor | None = None,
    temperature: float = 1.0,
    chunk_size: int | None = None,
    validate: bool = True,
    **hparams: Any,
) -> FusedLinearOutput:
    """The registry loss ``loss`` of one micro-batch from hidden states (module docstring).

    Args:
        loss: a registry name or a ``LossSpec``.
        hidden_states: (B, T, H) last hidden states at the positions that predict ``targets``.
        weight: (V, H) ``lm_head`` weight, the dtype and device of ``hidden_states``.
        targets: (B, T) integer token ids, in [0, V) at valid positions (anything elsewhere).
        old_log_probs: (B, T), as ``LossInputs``; None: the current log-probs, detached (one
            update per rollout, where the old policy is the current one).
        advantages: (B,) or (B, T), as ``LossInputs``.
        mask: (B, T) bool or 0/1, True at valid response tokens.
        batch: the ``BatchInfo`` of the micro-batch (None: a plain local mean).
        bias: (V,) ``lm_head`` bias, if the head has one.
        ref_log_probs: (B, T) reference log-probs for a KL term, as ``LossInputs``.
        rollout_is_weights: (B, T) or (B,), as ``LossInputs``.
        rollout_log_probs: (B, T), as ``LossInputs``.
        rewards: (B,), as ``LossInputs``.
        group_ids: (B,) integer, as ``LossInputs``.
        temperature: the logits are divided by it before the softmax.
        chunk_size: positions per chunk of logits (None: ``default_chunk_size(V, B * T)``).
        validate: also check values (target ids in range, hidden states finite at valid
            positions, and the loss's own value checks), which synchronises with the device.
            Without it a non-finite hidden state at a valid position gives a non-finite loss.
        **hparams: the loss's hyper-parameters.

    Returns:
        ``FusedLinearOutput``: the loss (backpropagates into ``hidden_states``, ``weight``
        and ``bias``), the loss's metrics plus ``entropy``, and the detached (B, T) log-probs
        and entropies.

    Raises:
        ValueError: an argument of the wrong shape, dtype or value, named in the message.
    """
    spec = get_loss(loss) if isinstance(loss, str) else loss
    vocab = weight.shape[0] if isinstance(weight, torch.Tensor) and weight.dim() == 2 else 1
    positions = math.prod(hidden_states.shape[:2]) if isinstance(hidden_states, torch.Tensor) else 1
    chunk = default_chunk_size(vocab, positions) if chunk_size is None else chunk_size
    _check(hidden_states, weight, bias, targets, mask, temperature, chunk, validate)
    b, t, h = hidden_states.shape
    valid = as_bool_mask(mask).reshape(-1)
    ids = torch.where(valid, targets.reshape(-1), 0).long()
    flat_log_probs, flat_entropy = ChunkedLogProbs.apply(  # type: ignore[no-untyped-call]  # torch's is unannotated
        hidden_states.reshape(b * t, h), weight, bias, ids, valid, float(temperature), chunk
    )
    log_probs, entropy = flat_log_probs.view(b, t), flat_entropy.view(b, t)
    if old_log_probs is None:
        old_log_probs = log_probs.detach()
    out = spec(
        LossInputs(
            log_probs,
            old_log_probs,
            advantages,
            mask,
            ref_log_probs=ref_log_probs,
            rollout_is_weights=rollout_is_weights,
            rollout_log_probs=rollout_log_probs,
            rewards=rewards,
            group_ids=group_ids,
        ),
        batch,
        validate=validate,
        **hparams,
    )
    count = valid.sum().to(entropy.dtype)
    metrics = {**out.metrics, "entropy": (entropy.sum() / count.clamp_min(1)).detach()}
    return FusedLinearOutput(loss=out.loss, metrics=metrics, log_probs=log_probs.detach(), entropy=entropy)
