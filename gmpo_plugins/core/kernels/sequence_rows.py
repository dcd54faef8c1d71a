"""The fused pass of the sequence-level losses as one custom operator per direction.

Forward, ``gmpo_plugins::sequence_rows``: one pass over (B, T) (``clipped_row_sums``'s
backend, blocked torch or Triton) and the per-row epilogue, for per-row log-space bounds
built from the sign of A_i (``_bounds``):

    value_i  = sum_clipped_i / max(1, |o_i|)   (``normalise``)  or  sum_clipped_i
    table    (8, B): the rows of ``tail.RowStats`` (count, rows, sum_raw, raw_min, raw_max,
             clipped_low, clipped_high, nonfinite); a token counts as clipped low / high
             where it is outside a bound that is the eps one (eps < R) on the side of its
             advantage; nonfinite counts the valid tokens whose log ratio is NaN or +-inf,
             and every valid token of a row whose advantage is (``prepared``'s rule)
    metrics  (10,): ``tail.metric_vector(table)``
    active   (B, T) bool: the tokens inside their bounds (saved for backward)
    adv      (B,): A_i, and 0 on a row without a valid token whatever it holds there (the
             loss tail multiplies by it: 0 * NaN would be NaN), at no extra operator

Backward, ``gmpo_plugins::sequence_rows_backward``: with g_i = dLoss/dvalue_i,

    grad_log_probs_t = active_t * g_i / max(1, |o_i|)   (``normalise``)  or  active_t * g_i

and then the non-finite rule of the inputs the pass reads (``prepared``): -0 is added to the
first entry, or NaN when a row counted a non-finite input or a coefficient g_i is not finite
(an inactive token gets exactly 0 whatever g_i is, so without it a NaN could vanish). One
element: the rule costs the backward nothing of size (B, T).

Both are ``torch.library.custom_op``s, so a forward+backward dispatches a fixed handful of
operators whatever the shape (on CPU the operator runs the blocked loop inside), and
``torch.compile`` keeps each as one node.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch.autograd.function import once_differentiable

from gmpo_plugins.core.kernels.dispatch import backend_name, backend_named, select_backend
from gmpo_plugins.core.kernels.stats import compute_dtype
from gmpo_plugins.core.tail import RATIO_METRIC_KEYS, ROW_STATS, RowStats, metric_vector


def _bounds(advantages: torch.Tensor, low: float, high: float, bound: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(lo, hi) (B,): -low where A_i < 0 else -R, high where A_i > 0 else R."""
    lo = torch.full_like(advantages, -bound).masked_fill_(advantages < 0, -low)
    hi = torch.full_like(advantages, bound).masked_fill_(advantages > 0, high)
    return lo, hi


def _sequence_rows(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    mask: torch.Tensor,
    advantages: torch.Tensor,
    low: float,
    high: float,
    bound: float,
    count_low: bool,
    count_high: bool,
    normalise: bool,
    metrics: bool,
    impl: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(value (B,), table (8, B), metrics (10,) or (0,), active (B, T) bool, adv (B,)), module
    docstring.

    advantages (B,) in the compute dtype; ``low``/``high`` the log-space bounds of the
    advantage's side (R where there is no clip); ``count_low``/``count_high`` whether tokens
    beyond them count as clipped (the bound is an eps one) or only as guarded; ``metrics``
    whether the table's clipped counts are final, so that the metric vector is computed here
    (else it is empty and the caller, which changes them, computes it); ``impl`` the
    backend ``"torch"`` or ``"triton"`` (``dispatch.backend_name``), chosen and checked before.
    """
    backend = backend_named(impl)
    lo, hi = _bounds(advantages, low, high, bound)
    sums, active = backend.forward(log_probs, old_log_probs, mask, lo, hi)
    sum_clipped, sum_raw, count, below, above, raw_min, raw_max, nonfinite = sums.unbind(0)
    zero = torch.zeros((), dtype=sums.dtype, device=sums.device)
    live = count > 0
    nonfinite = torch.where(torch.isfinite(advantages), nonfinite, count)  # a bad A_i: its row's valid tokens
    stats = RowStats(
        count=count,
        rows=live.to(sums.dtype),
        sum_raw=sum_raw,
        raw_min=raw_min,
        raw_max=raw_max,
        clipped_low=torch.where(advantages < 0, below, zero) if count_low else torch.zeros_like(count),
        clipped_high=torch.where(advantages > 0, above, zero) if count_high else torch.zeros_like(count),
        nonfinite=nonfinite,
    )
    value = sum_clipped / count.clamp_min(1) if normalise else sum_clipped.clone()
    vector = metric_vector(stats) if metrics else count.new_empty((0,))
    return value, torch.stack((*stats[:-1], nonfinite)), vector, active, torch.where(live, advantages, zero)


sequence_rows = torch.library.custom_op("gmpo_plugins::sequence_rows", _sequence_rows, mutates_args=())


@sequence_rows.register_fake
def _(
    log_probs: torch.Tensor, *args: Any
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    batch, length = log_probs.shape
    dtype = compute_dtype(log_probs.dtype)
    metrics = PassOptions(*args[3:]).metrics  # args: old_log_probs, mask, advantages, then the options
    return (
        log_probs.new_empty((batch,), dtype=dtype),
        log_probs.new_empty((ROW_STATS, batch), dtype=dtype),
        log_probs.new_empty((len(RATIO_METRIC_KEYS) if metrics else 0,), dtype=dtype),
        log_probs.new_empty((batch, length), dtype=torch.bool),
        log_probs.new_empty((batch,), dtype=dtype),
    )


def _sequence_rows_backward(
    active: torch.Tensor,
    grad_value: torch.Tensor,
    count: torch.Tensor,
    nonfinite: torch.Tensor,
    normalise: bool,
    dtype: torch.dtype,
    impl: str,
) -> torch.Tensor:
    """grad_log_probs (B, T) in ``dtype``: active_t * g_i (/ max(1, |o_i|) with ``normalise``),
    then -0 or NaN added to its first entry (module docstring)."""
    backend = backend_named(impl)
    coef = grad_value / count.clamp_min(1) if normalise else grad_value
    grad: torch.Tensor = backend.backward(active, coef, dtype)
    poison = torch.where(nonfinite.sum() > 0, torch.nan, (coef * 0).sum()).abs().neg()  # -0, or NaN
    grad.view(-1)[:1].add_(poison.to(dtype))
    return grad


sequence_rows_backward = torch.library.custom_op(
    "gmpo_plugins::sequence_rows_backward", _sequence_rows_backward, mutates_args=()
)

TORCH_IMPLEMENTED_OPS: dict[str, Callable[..., object]] = {
    "gmpo_plugins.sequence_rows": _sequence_rows,
    "gmpo_plugins.sequence_rows_backward": _sequence_rows_backward,
}
"""The custom operators of this module by name (``namespace.name``) with the Python function
each runs: torch code, which ``bench`` can count op by op (a Triton launch stays one op)."""


@sequence_rows_backward.register_fake
def _(
    active: torch.Tensor,
    grad_value: torch.Tensor,
    count: torch.Tensor,
    nonfinite: torch.Tensor,
    normalise: bool,
    dtype: torch.dtype,
    *_: object,
) -> torch.Tensor:
    return torch.empty(active.shape, dtype=dtype, device=active.device)


class PassOptions(NamedTuple):
    """The scalar arguments of ``sequence_rows`` after its tensors (its docstring)."""

    low: float
    high: float
    bound: float
    count_low: bool
    count_high: bool
    normalise: bool
    metrics: bool
    impl: str


class SequenceRows(torch.autograd.Function):
    """``sequence_rows`` differentiable in ``value`` (the other outputs are statistics)."""

    @staticmethod
    def forward(  # ctx: torch's per-call context, which carries the attributes set on it (Any)
        ctx: Any,
        log_probs: torch.Tensor,
        old_log_probs: torch.Tensor,
        mask: torch.Tensor,
        advantages: torch.Tensor,
        *options: Any,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        value, table, metrics, active, adv = torch.ops.gmpo_plugins.sequence_rows(
            log_probs, old_log_probs, mask, advantages, *options
        )
        ctx.save_for_backward(active, table)
        ctx.options, ctx.dtype = PassOptions(*options), log_probs.dtype
        ctx.mark_non_differentiable(table, metrics, adv)
        ctx.set_materialize_grads(False)  # no zero gradients are made for the statistics
        return value, table, metrics, adv

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_value: torch.Tensor | None, *_: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        nothing = (None,) * (3 + len(PassOptions._fields))
        if grad_value is None:  # the value was not used (gradients are not materialised)
            return (None, *nothing)
        active, table = ctx.saved_tensors
        options = ctx.options
        grad = torch.ops.gmpo_plugins.sequence_rows_backward(
            active, grad_value, table[0], table[7], options.normalise, ctx.dtype, options.impl
        )
        return (grad, *nothing)


def fused_sequence_rows(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    mask: torch.Tensor,
    advantages: torch.Tensor,
    options: PassOptions,
) -> tuple[torch.Tensor, RowStats, torch.Tensor | None, torch.Tensor]:
    """(value (B,) differentiable, ``RowStats``, metric vector (10,), or None without
    ``options.metrics``, the advantages (B,) with 0 on rows without a valid token); module
    docstring.

    ``options.impl`` is a loss's ``impl`` ("auto", "torch" or "triton"): an impl this input
    cannot run is refused before any work, and the operators get the backend it selects.
    """
    backend = select_backend(options.impl, log_probs)  # type: ignore[arg-type]  # a str from the checked hparams
    options = options._replace(impl=backend_name(backend))
    value, table, metrics, adv = SequenceRows.apply(  # type: ignore[no-untyped-call]  # torch's Function.apply is unannotated
        log_probs, old_log_probs.detach(), mask.detach(), advantages, *options
    )
    return value, RowStats(*table.unbind(0)), metrics if options.metrics else None, adv
