"""Common first step of every loss: dtype promotion, boolean mask, raw log ratios.

Half-precision inputs are computed in float32; float64 stays float64 (used by the
tests' autograd references). Nothing here branches on tensor values.

Non-finite inputs, one rule on every path: a NaN or +-inf at a valid (mask true) position
of any input (log_probs, old_log_probs, advantages, ref_log_probs, rollout_is_weights)
gives a non-finite loss. There is no exception: a -inf log-prob (a sampled token with
probability 0 under the policy, or under the behaviour or reference policy) is a bug
upstream, not data, and is not turned into a finite number. The overflow guards that keep
the loss finite for finite inputs (``LOG_RATIO_GUARD``, ``product_guard``, the KL clamp)
clamp only finite values and turn NaN and +-inf into NaN (``clamp_or_nan``); every path,
eager, fused torch, Triton and compiled, applies that one rule. Padding stays inert:
whatever a masked position holds reaches neither the loss nor the gradient.

The gradient too: such an input also makes the gradient with respect to ``log_probs``
non-finite, so that a trainer's own non-finite-gradient guard sees it, whatever the loss's
formula does with the input (a clip or ``where`` gives a NaN token zero gradient; gpg never
reads ``old_log_probs``). The loss tail applies the rule once (``tail.finish``) with two
pieces written here:

    z_t  = m_t * sum_x 0 * x_t                        (``nonfinite_sentinel``, (B, T))
           over every input x (a (B,) one broadcast over its row): 0 where all are finite,
           NaN at a valid position where one is NaN or +-inf (0 * inf = NaN), 0 at padding
    loss = loss + n,   n = -|sum_t z_t|               (``nonfinite_term``: -0 or NaN)
           whose gradient with respect to every log-prob is n itself

so a finite batch adds -0 to the loss and to each gradient entry (bit for bit nothing:
x + -0 = x for every float x), and a non-finite one makes both NaN. ``nonfinite_tokens``
counts the valid positions where z_t is NaN. Reading only ``0 * x`` and branching on no
value, it costs no host-device synchronisation. The fused passes read log-probs, old
log-probs and advantages themselves: they count those inputs and poison their own backward
in the same pass (``kernels.sequence_rows``, ``kernels.token``), so the tail adds the term
only for the inputs they do not read (``finish(covered=...)``).

``GMPO_PLUGINS_NONFINITE=raise`` (``validation.nonfinite_raises``) instead raises at the
first such position, naming the input, its row and its column (a synchronising check).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from gmpo_plugins.core.reduce import as_bool_mask, masked_mean
from gmpo_plugins.core.types import LossInputs


def clamp_or_nan(
    values: torch.Tensor,
    low: float | torch.Tensor,
    high: float | torch.Tensor,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """The overflow guard of every path: ``values`` clamped to [low, high] where finite, NaN
    where NaN or +-inf (module docstring: a non-finite input never becomes a finite loss).

        clamp_or_nan(x) = clamp(x, low, high)   x finite
                          NaN                   x NaN, +inf or -inf

    ``values`` any shape, ``low``/``high`` floats or tensors broadcasting to it (per-row
    bounds (B, 1)). A plain ``clamp`` would map +-inf to a bound (a zero-probability token
    would train as a ratio of e^-R); this one propagates it. Written with float arithmetic
    only (a CPU kernel with a boolean operand costs up to twenty float ones):

        clamp_or_nan(x) = clamp(x + (x - x), low, high)    x - x is 0 for finite x, else NaN

    Differentiable like ``clamp`` (x - x is detached: gradient 1 inside the bounds and on
    them, 0 beyond them and at non-finite values); no branch on tensor values, so no
    host-device synchronisation. ``out``: write the result there (a buffer of ``values``'
    shape and dtype, not ``values`` itself) instead of allocating, for the fused paths'
    blocked loops (no autograd through ``out``).
    """
    if out is None:
        poisoned = values + (values - values).detach()  # values where finite, NaN where NaN or +-inf
        return poisoned.clamp(low, high)  # type: ignore[arg-type]  # its stubs take one kind of bound; both run
    torch.sub(values, values, out=out).add_(values)
    if isinstance(low, torch.Tensor) and isinstance(high, torch.Tensor):  # faster than clamp's tensor bounds
        return torch.minimum(torch.maximum(out, low, out=out), high, out=out)
    return out.clamp_(low, high)  # type: ignore[arg-type]  # as above


LOG_RATIO_GUARD = 20.0
"""Default bound on |log ratio| before any exp: e^20 stays finite in fp32 and bf16."""


def input_tensors(inputs: LossInputs) -> dict[str, torch.Tensor]:
    """Every tensor of ``inputs`` but the mask, by field name (optional ones only when given)."""
    return {
        name: value
        for name, value in vars(inputs).items()
        if isinstance(value, torch.Tensor) and value is not inputs.mask
    }


def nonfinite_sentinel(inputs: LossInputs, mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """z (B, T) in ``dtype``, detached (module docstring): 0 at padding and where every input
    is finite, NaN at a valid (``mask``, bool) position where any input is NaN or +-inf; a (B,)
    input counts at every valid position of its row. One multiply and one add per input."""
    total: torch.Tensor | None = None
    for tensor in input_tensors(inputs).values():
        zero = tensor.detach().to(dtype) * 0  # 0, NaN where NaN or +-inf
        zero = zero[:, None] if zero.dim() == 1 else zero
        total = zero if total is None else total + zero
    assert total is not None  # log_probs is always among the inputs
    return torch.where(mask, total, torch.zeros((), dtype=dtype, device=mask.device))


class _NonfiniteTerm(torch.autograd.Function):
    """(log_probs (B, T), n 0-dim) -> n, whose gradient with respect to log_probs is n at
    every position (not n times the incoming gradient: n is a carrier, -0 or NaN)."""

    @staticmethod
    def forward(ctx: Any, log_probs: torch.Tensor, probe: torch.Tensor) -> torch.Tensor:  # noqa: D102
        ctx.shape, ctx.grad_dtype = log_probs.shape, log_probs.dtype
        ctx.save_for_backward(probe)
        return probe.clone()

    @staticmethod
    def backward(ctx: Any, _grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # noqa: D102
        (probe,) = ctx.saved_tensors
        return probe.to(ctx.grad_dtype).expand(ctx.shape), None


def nonfinite_term(log_probs: torch.Tensor, sentinel: torch.Tensor) -> torch.Tensor:
    """n = -|sum_t z_t| (0-dim, -0 or NaN) for the sentinel z (``nonfinite_sentinel``), as a
    term of the loss whose gradient with respect to each entry of ``log_probs`` (B, T) is n:
    added to a loss, it leaves a finite loss and its gradient bit for bit as they are
    (x + -0 = x) and makes both NaN when a valid position of an input is not finite."""
    probe = sentinel.sum().abs().neg()
    term: torch.Tensor = _NonfiniteTerm.apply(log_probs, probe)  # type: ignore[no-untyped-call]  # torch's apply is unannotated
    return term


def product_guard(dtype: torch.dtype) -> float:
    """P = 0.9 * ln(finfo(dtype).max), the bound on a log product of token ratios
    (gmpo_nonorm): 79.8 for float32 and bfloat16, 9.98 for float16, 639 for float64. It
    leaves a factor finfo.max^0.1 for the advantage and the batch normalisation, so the
    weight e^P and the gradient, which has log_probs' dtype, stay finite."""
    return 0.9 * math.log(torch.finfo(dtype).max)


LOG_RATIO_BOUND_MAX = product_guard(torch.float32)
"""The largest ``log_ratio_bound`` a loss accepts: 0.9 * ln(float32 max) = 79.85.

Every loss computes exp of a log ratio clamped to +-``log_ratio_bound`` in float32 at least
(half inputs are promoted). exp(79.85) = 4.6e34 leaves a factor float32.max^0.1 = 7.2e3 for
the advantage, the IS weight and the batch normalisation before float32 overflows (3.4e38,
ln = 88.7); a larger bound would switch the overflow guard off and turn a large log ratio
into inf or NaN. Values are refused with a ValueError naming the hyper-parameter."""


@dataclass
class PreparedBatch:
    """Tensors in compute dtype. ``log_ratio`` is 0 on padding, ``advantages`` is (B,)
    for sequence-level losses (0 on a row without a valid token) and (B, T) for token-level
    ones."""

    log_probs: torch.Tensor  # (B, T)
    log_ratio: torch.Tensor  # (B, T) log pi_theta - log pi_old, 0 where mask is False
    advantages: torch.Tensor  # (B,) or (B, T)
    mask: torch.Tensor  # (B, T) bool
    rows: torch.Tensor  # (B,) bool: sequences with at least one valid token
    lengths: torch.Tensor  # (B,) compute dtype: valid tokens per sequence
    ref_log_probs: torch.Tensor | None
    rollout_is_weights: torch.Tensor | None  # (B, T) or (B,), detached


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for half types, the dtype itself for float32/float64."""
    return torch.promote_types(dtype, torch.float32)


def prepare(inputs: LossInputs, *, sequence_level: bool) -> PreparedBatch:
    """Promote, mask and derive the shared quantities of one micro-batch."""
    dtype = compute_dtype(inputs.log_probs.dtype)
    mask = as_bool_mask(inputs.mask)
    log_probs = inputs.log_probs.to(dtype)
    raw = log_probs - inputs.old_log_probs.detach().to(dtype)
    log_ratio = torch.where(mask, raw, torch.zeros((), dtype=dtype, device=raw.device))
    lengths = mask.sum(-1).to(dtype)

    rows = mask.any(-1)
    advantages = inputs.advantages.detach().to(dtype)
    if advantages.dim() == 1 and not sequence_level:
        advantages = advantages[:, None].expand_as(log_ratio)
    elif advantages.dim() == 2 and sequence_level:
        advantages = masked_mean(advantages, mask, dim=-1)
    elif sequence_level:  # (B,): 0 on a row without a valid token, whatever it holds there
        advantages = torch.where(rows, advantages, torch.zeros((), dtype=dtype, device=rows.device))

    def promote(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.detach().to(dtype)

    return PreparedBatch(
        log_probs=log_probs,
        log_ratio=log_ratio,
        advantages=advantages,
        mask=mask,
        rows=rows,
        lengths=lengths,
        ref_log_probs=promote(inputs.ref_log_probs),
        rollout_is_weights=promote(inputs.rollout_is_weights),
    )


IS_AGGREGATIONS = ("arithmetic_mean", "geometric_mean", "per_token")
"""How (B, T) rollout IS weights w_t act on a sequence-level loss L_i (``rollout_is_aggregation``):

    arithmetic_mean  L_i * mean_t w_t                     (TRL's sequence-level IS)
    geometric_mean   L_i * exp(mean_t log w_t)            (verl's geo_mean, which takes
                                                          log(w_t + 1e-10))
    per_token        value L_i * mean_t w_t, but token t's gradient scaled by w_t instead
                     of mean_t w_t: dL/dlog_prob_t = w_t * dL_i/dlog_prob_t   (verl's and
                     TRL's gspo, which weight each token of a sequence-level surrogate)

(B,) weights (one per sequence) multiply L_i in every mode. A (B, T) weight of exactly 0
never reaches these means: ``LossSpec`` removes its token from the row first (the zero-weight
rule, ``core.correction``), unless every weight of the row is 0 (then rho_i = 0).
"""


def per_token_is_gradient(
    values: torch.Tensor, weights: torch.Tensor | None, mask: torch.Tensor, aggregation: str
) -> torch.Tensor:
    """``values`` (B, T) unchanged in value, with the gradient of valid token t multiplied by
    w_t / mean_t w_t under ``aggregation == "per_token"`` and (B, T) weights (0 where the
    row's weights are all 0); ``values`` itself otherwise.

    Straight-through: ``sg(v) + (v - sg(v)) * scale`` has the value of v (the added term is
    exactly 0: the scale is finite, 0 on a row whose mean weight is NaN or inf) and the
    gradient ``scale`` itself (no ``scale - 1`` cancellation for small weights); positions
    outside ``mask`` keep v.
    """
    if aggregation != "per_token" or weights is None or weights.dim() != 2:
        return values
    weights = weights.detach().to(values.dtype)
    mean = masked_mean(weights, mask, dim=-1)[:, None]
    # 0 at padding, whatever the weight there: the gradient below multiplies by the scale; 0 on a row
    # whose mean is not finite (a NaN or inf weight: inf / inf would make the value NaN, and the loss is
    # non-finite through the row's IS weight rho_i anyway, ``sequence_is_weights``)
    usable = mask & (mean > 0) & (mean < torch.inf)
    scale = torch.where(usable, weights / mean.clamp_min(torch.finfo(values.dtype).tiny), 0.0)
    detached = values.detach()
    scaled = detached + (values - detached) * scale
    return torch.where(mask, scaled, values)


def token_is_weights(batch: PreparedBatch) -> torch.Tensor | None:
    """Rollout importance weights per token (B, T), broadcasting per-sequence weights."""
    weights = batch.rollout_is_weights
    if weights is None or weights.dim() == 2:
        return weights
    return weights[:, None].expand_as(batch.log_ratio)


RowMean = Callable[..., torch.Tensor]
"""``row_mean(values, mask, dtype, *, log=False) -> (B,)``: a masked row mean (``row_mean``;
the fused paths pass a blocked one with the same formula, ``kernels.rowmean``)."""


def row_mean(values: torch.Tensor, mask: torch.Tensor, dtype: torch.dtype, *, log: bool = False) -> torch.Tensor:
    """values (B, T) float, mask (B, T) bool or 0/1 -> (B,) in ``dtype``:

        mean_i = sum_t m_t * v_t / max(1, sum_t m_t)     (v = log(values) with ``log=True``)

    detached; 0 on a row without a valid token. A NaN or +-inf at a valid position gives a
    non-finite mean; padding is inert (``reduce.masked_mean``)."""
    block = values.detach().to(dtype)
    return masked_mean(block.log() if log else block, as_bool_mask(mask), dim=-1)


def sequence_is_weights(
    weights: torch.Tensor | None,
    mask: torch.Tensor,
    aggregation: str,
    dtype: torch.dtype,
    *,
    mean: RowMean = row_mean,
) -> torch.Tensor | None:
    """rho (B,): the rollout IS weight of each sequence, for the value of a sequence-level loss.

    (B,) weights are used as given; (B, T) ones are aggregated over the valid tokens by
    ``aggregation`` (``IS_AGGREGATIONS``): the geometric mean exp(mean_t log w_t) for
    ``geometric_mean`` (over tokens of non-zero weight: the zero-weight rule,
    ``IS_AGGREGATIONS``), the arithmetic mean otherwise
    (``per_token`` scales each token's gradient separately, ``per_token_is_gradient``).
    An empty row gets 1 (geometric) or 0 (arithmetic), and 0 from (B,) weights whatever they
    hold there (its loss weight is 0, and 0 * NaN would be NaN). A NaN or +inf weight at a
    valid position (or a negative one, whose log is NaN) gives a non-finite rho_i. ``mean``:
    the masked row mean (``row_mean``; the fused paths pass a blocked one).
    """
    if weights is None:
        return None
    if weights.dim() == 1:
        zero = torch.zeros((), dtype=dtype, device=weights.device)
        return torch.where(as_bool_mask(mask).any(-1), weights.detach().to(dtype), zero)
    if aggregation == "geometric_mean":
        return torch.exp(mean(weights, mask, dtype, log=True))
    return mean(weights, mask, dtype)
