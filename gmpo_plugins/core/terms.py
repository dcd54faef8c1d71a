"""Loss terms: one set of hyper-parameters every registry loss accepts, beside the KL term.

They act in ``LossSpec.__call__`` around the loss (the top-entropy mask on its inputs, the
bonus and the NLL term added to its result), so no loss module knows about them. All are off
by default, and off they leave the loss bit for bit as it is.

With H_t = ``LossInputs.entropy`` (B, T), the per-token entropy of the current policy
(differentiable: the bonus trains through it), R_i = ``LossInputs.rewards`` (B,), m_t the
loss's mask (after the rollout correction) and u_i the weights of the loss's own reduction
(``reduce.row_weights``: the loss's ``reduction`` hyper-parameter, seq-mean-token-mean for a
sequence-level loss without one, as its KL term, token-mean for any other loss without one),
so that a term is normalised by the global batch like the loss and any split gives the whole
batch's gradient:

    entropy_coef          c_H: loss -= c_H * sum_i u_i sum_t m_t k_t H_t     (entropy bonus)
                          verl adds ``entropy_coeff`` * agg_loss(entropy, loss_agg_mode) the
                          same way (``workers/utils/losses.py``); TRL's ``entropy_coef`` takes
                          the micro-batch's token mean whatever the loss's normalisation,
                          OpenRLHF's ``--actor.entropy_coef`` and SkyRL's ``entropy_loss_coef``
                          their own reduction. Default 0 (off), as all four.
    top_entropy_quantile  rho: keep only the valid tokens whose entropy is at or above the
                          (1 - rho) quantile of H over the micro-batch's valid tokens (linear
                          interpolation, as ``torch.quantile``); k_t = 0 for the others. TRL's
                          ``top_entropy_quantile`` (``GRPOTrainer.get_high_entropy_mask``; its
                          threshold is over the valid tokens of one micro-batch gathered from
                          every process, here those of the micro-batch given). A removed token
                          gets weight 0 (the zero-weight rule of ``core.correction``: out of the
                          token-level loss, out of a sequence-level loss's row aggregate, in the
                          token count under ``rollout_mask_count="keep"``, as TRL's mask), and
                          out of the entropy bonus (TRL's ``effective_mask``). Default 1.0 (off).
                          NOT split-invariant: the threshold is the micro-batch's
                          (``SPLIT_DEPENDENT``), as TRL's is the micro-batch's.
    nll_coef              c_N: loss += c_N * sum_i u_i [R_i > 0] sum_t m_t (-log pi_t)
                          VAPO's positive-example NLL (arXiv 2504.05118, Eq. 10; NeMo-RL's
                          ``positive_example_nll_weight``). Default 0 (off). Normalised by the
                          loss's reduction, not by the count of positive tokens: NeMo-RL divides
                          each micro-batch's sum by that micro-batch's own count of correct
                          tokens (and does not divide by the accumulation steps), so its term
                          depends on the split; the global count of positive tokens is no count
                          the frameworks pass. Under token-mean this is VAPO's mean times the
                          fraction of valid tokens that belong to positive samples.

Inputs: ``entropy_coef != 0`` or ``top_entropy_quantile < 1`` need ``entropy``, ``nll_coef != 0``
needs ``rewards`` (``required_inputs``; a call without one raises ValueError naming it, and an
adapter that does not pass it refuses the option by name, ``adapters.inputs``).

Non-finite values: the inputs are ``LossInputs`` fields, so the loss tail's rule covers them
(``tail.finish``): a NaN or +-inf entropy or reward at a valid position gives a non-finite
loss and gradient, whatever the options.

Metrics (detached 0-dim, micro-batch means, no synchronisation): ``entropy`` (mean H over
valid tokens, whenever ``entropy`` is given), ``entropy_masked_frac`` (valid tokens removed by
the top-entropy mask, with it), ``nll`` (mean -log pi over the valid tokens of positive
samples, with ``nll_coef``; NeMo-RL's ``positive_nll_loss``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch

from gmpo_plugins.core.reduce import SEQ_MEAN_TOKEN_MEAN, TOKEN_MEAN, as_bool_mask, masked_mean, row_weights
from gmpo_plugins.core.types import BatchInfo, LossInputs, LossOutput

TERM_DEFAULTS: dict[str, Any] = {"entropy_coef": 0.0, "top_entropy_quantile": 1.0, "nll_coef": 0.0}
"""The loss-term hyper-parameters every registry loss accepts (module docstring), all off
(``TERM_SOURCES``)."""

TERM_SOURCES: dict[str, str] = {
    "entropy_coef": "off, as TRL trainer/grpo_config.py entropy_coef 0.0 and verl actor.yaml entropy_coeff 0",
    "top_entropy_quantile": "off, as TRL trainer/grpo_config.py top_entropy_quantile 1.0",
    "nll_coef": "off, as NeMo-RL nemo_rl/algorithms/loss/loss_functions.py positive_example_nll_weight 0.0",
}
"""Where each of ``TERM_DEFAULTS`` comes from."""

TERM_OPTIONS: dict[str, str] = {
    "entropy_coef": "entropy bonus: loss -= entropy_coef * (entropy aggregated by the loss's reduction); needs entropy",
    "top_entropy_quantile": "keep only tokens whose entropy is in the top fraction of the micro-batch's valid tokens "
    "(TRL); 1.0 keeps all; needs entropy (split-dependent)",
    "nll_coef": "VAPO's NLL on positive samples: loss += nll_coef * (-log pi over rows with reward > 0, "
    "aggregated by the loss's reduction); needs rewards",
}
"""One line per option, for ``gmpo-plugins list --terms`` and docs/losses.md."""

SPLIT_DEPENDENT = ("top_entropy_quantile",)
"""Options whose result depends on the micro-batch given (declared, and tested as such)."""

TERM_METRIC_KEYS = ("entropy", "entropy_masked_frac", "nll")


def _real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and -math.inf < value < math.inf


_CHECKS: dict[str, tuple[Any, str]] = {
    "entropy_coef": (_real, "a finite number"),
    "top_entropy_quantile": (lambda v: _real(v) and 0 <= v <= 1, "a number in [0, 1]"),
    "nll_coef": (lambda v: _real(v) and v >= 0, "a finite number >= 0"),
}


@dataclass(frozen=True)
class Terms:
    """The loss-term options of one call (``TERM_DEFAULTS``)."""

    entropy_coef: float = 0.0
    top_entropy_quantile: float = 1.0
    nll_coef: float = 0.0

    @property
    def active(self) -> bool:
        """True when an option changes anything."""
        return self != Terms()


def split_terms(params: Mapping[str, Any]) -> tuple[Terms, dict[str, Any]]:
    """(the ``Terms`` of ``params``, the other hyper-parameters): the term keys taken out."""
    options = {key: value for key, value in params.items() if key in TERM_DEFAULTS}
    rest = {key: value for key, value in params.items() if key not in TERM_DEFAULTS}
    return Terms(**options), rest


def check_terms(loss_name: str, options: Mapping[str, Any]) -> None:
    """Raise ValueError naming the first term option whose value is out of range (no tensor read)."""
    for name, value in options.items():
        check, expected = _CHECKS[name]
        if not check(value):
            raise ValueError(f"{loss_name}: {name} must be {expected}, got {value!r}")


def required_inputs(options: Mapping[str, Any]) -> tuple[str, ...]:
    """The optional ``LossInputs`` fields the term options ``options`` read: ``entropy`` for a
    non-zero ``entropy_coef`` or a ``top_entropy_quantile`` below 1, ``rewards`` for a non-zero
    ``nll_coef``; options not given are off."""
    terms = Terms(**{key: value for key, value in options.items() if key in TERM_DEFAULTS})
    needed = []
    if terms.entropy_coef != 0 or terms.top_entropy_quantile < 1:
        needed.append("entropy")
    if terms.nll_coef != 0:
        needed.append("rewards")
    return tuple(needed)


def check_term_inputs(loss_name: str, terms: Terms, inputs: LossInputs) -> None:
    """ValueError naming the input an option needs when ``inputs`` lacks it (no tensor read)."""
    for name in required_inputs(vars(terms)):
        if getattr(inputs, name) is None:
            option = "nll_coef" if name == "rewards" else "entropy_coef or top_entropy_quantile"
            shape = "(B,) per-sequence rewards" if name == "rewards" else "(B, T) per-token entropy"
            raise ValueError(f"{loss_name}: {name} {shape} is required by {option} (LossInputs.{name}); got None")


def _quantile(values: torch.Tensor, mask: torch.Tensor, q: float) -> torch.Tensor:
    """The q-quantile (0-dim) of ``values`` (B, T) over ``mask`` with linear interpolation, as
    ``torch.quantile`` of the valid values, without a data-dependent shape (no synchronisation):
    the valid values sorted first (padding +inf), then read at position q * (n - 1). NaN sorts
    last, so a NaN entropy makes the threshold NaN only when it is the read position."""
    flat = torch.where(mask, values, torch.inf).flatten()
    ordered = torch.sort(flat).values
    count = mask.sum().to(values.dtype)
    position = (q * (count - 1)).clamp_min(0)
    low = position.floor()
    high = position.ceil()
    below = ordered.gather(0, low.long().reshape(1))[0]
    above = ordered.gather(0, high.long().reshape(1))[0]
    return below + (above - below) * (position - low)


def top_entropy_mask(
    inputs: LossInputs, terms: Terms
) -> tuple[LossInputs, torch.Tensor | None, dict[str, torch.Tensor]]:
    """(``inputs`` with the top-entropy mask as zero weights, the kept tokens k (B, T) bool or
    None, its metric) (module docstring).

    k multiplies the rollout IS weights (a (B,) weight is broadcast over its row, which every
    ``rollout_is_aggregation`` reads as the same weight), so that the loss applies the
    zero-weight rule. A NaN or +-inf entropy at a valid token makes its weight NaN (not 0), so
    that the token stays in the loss and makes it non-finite. ``inputs`` itself and None when
    the mask is off or the micro-batch empty."""
    if terms.top_entropy_quantile >= 1 or inputs.entropy is None or inputs.log_probs.numel() == 0:
        return inputs, None, {}
    mask = as_bool_mask(inputs.mask)
    dtype = torch.promote_types(inputs.log_probs.dtype, torch.float32)
    entropy = inputs.entropy.detach().to(dtype)
    threshold = _quantile(entropy, mask, 1 - terms.top_entropy_quantile)
    keep = (entropy >= threshold) & mask
    zero = torch.zeros((), dtype=dtype, device=mask.device)
    weights = keep.to(dtype) + torch.where(mask, entropy - entropy, zero)  # NaN where H is not finite
    given = inputs.rollout_is_weights
    if given is not None:
        given = given.detach().to(dtype)
        weights = weights * (given if given.dim() == 2 else given[:, None])
    with torch.no_grad():
        masked_frac = masked_mean((mask & ~keep).to(dtype), mask)
    return replace(inputs, rollout_is_weights=weights), keep, {"entropy_masked_frac": masked_frac}


def term_reduction(params: Mapping[str, Any], *, sequence_level: bool) -> str:
    """The reduction the terms take: the loss's ``reduction`` hyper-parameter, else
    seq-mean-token-mean for a sequence-level loss (as its KL term), else token-mean."""
    reduction = params.get("reduction")
    if reduction is not None:
        return str(reduction)
    return SEQ_MEAN_TOKEN_MEAN if sequence_level else TOKEN_MEAN


def add_terms(
    out: LossOutput,
    inputs: LossInputs,
    batch: BatchInfo,
    terms: Terms,
    *,
    reduction: str,
    norm_length: int | None,
    keep: torch.Tensor | None = None,
) -> LossOutput:
    """``out`` with the entropy bonus and the NLL term added to its loss and the terms' metrics
    (module docstring). ``inputs`` are those the loss ran on (corrected, top-entropy weights
    included), ``keep`` the top-entropy mask's kept tokens (None: all); ``out`` itself when no
    term is on and no entropy is given."""
    if inputs.log_probs.numel() == 0 or (inputs.entropy is None and not terms.active):
        return out
    mask = as_bool_mask(inputs.mask)
    dtype = torch.promote_types(inputs.log_probs.dtype, torch.float32)
    zero = torch.zeros((), dtype=dtype, device=mask.device)
    count = mask.sum(-1).to(dtype)
    rows = (count > 0).to(dtype)
    metrics = dict(out.metrics)
    loss = out.loss
    weighted = terms.entropy_coef != 0 or terms.nll_coef != 0  # the terms added to the loss (the mask is not)
    weights = row_weights(count, rows, batch, reduction, norm_length) if weighted else None
    if inputs.entropy is not None:
        entropy = torch.where(mask, inputs.entropy.to(dtype), zero)
        metrics["entropy"] = masked_mean(entropy.detach(), mask)
        if terms.entropy_coef != 0 and weights is not None:
            if keep is not None:
                entropy = torch.where(keep, entropy, zero)  # TRL's effective mask
            loss = loss - terms.entropy_coef * torch.dot(entropy.sum(-1), weights)
    if terms.nll_coef != 0 and inputs.rewards is not None and weights is not None:
        positive = (inputs.rewards.detach() > 0)[:, None] & mask
        nll = -torch.where(positive, inputs.log_probs.to(dtype), zero)
        metrics["nll"] = masked_mean(nll.detach(), positive)
        loss = loss + terms.nll_coef * torch.dot(nll.sum(-1), weights)
    return LossOutput(loss=loss, metrics=metrics)
