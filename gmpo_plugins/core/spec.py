"""``LossSpec``: one registered loss, callable as the functional API.

A loss function has the signature ``fn(inputs: LossInputs, batch: BatchInfo, **hparams)
-> LossOutput``; its spec adds the name, a one-line description, the default
hyper-parameters (which, with the rollout correction's options, are the complete list of
accepted ones) and what the loss requires of its inputs.

Every loss also accepts the rollout correction's options (``core.correction.CORRECTION_DEFAULTS``):
they are not the loss's own, never reach ``fn``, and act on its inputs before it runs
(``correction.apply_correction``), whose metrics are added to the loss's. Every loss accepts
the loss terms' options too (``core.terms.TERM_DEFAULTS``: entropy bonus, top-entropy mask,
NLL on positive samples), applied the same way around it (``terms.top_entropy_mask`` on its
inputs, ``terms.add_terms`` on its result).
"""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import torch

from gmpo_plugins.core.correction import (
    CORRECTION_DEFAULTS,
    apply_correction,
    check_correction,
    check_correction_inputs,
    split_correction,
    zero_weight_rule,
)
from gmpo_plugins.core.hparams import check_hparams
from gmpo_plugins.core.terms import (
    TERM_DEFAULTS,
    add_terms,
    check_term_inputs,
    check_terms,
    required_inputs,
    split_terms,
    term_reduction,
    top_entropy_mask,
)
from gmpo_plugins.core.types import BatchInfo, Impl, LossInputs, LossOutput
from gmpo_plugins.core.validation import (
    nonfinite_raises,
    raise_at_first_nonfinite,
    validate_batch_info,
    validate_inputs,
)


class LossFn(Protocol):
    """What ``LossSpec.fn`` is: ``fn(inputs, batch, **hparams) -> LossOutput``.

    The registry calls it with ``inputs`` and ``batch`` positionally and every
    hyper-parameter of ``LossSpec.defaults`` (updated by the caller's overrides, already
    checked) as a keyword, so a loss declares its hyper-parameters as keyword arguments
    (or takes ``**hparams``) and ``LossSpec.defaults`` lists all of them. The type checks
    the two positional arguments and the result; keywords are checked by the registry.
    """

    def __call__(self, inputs: LossInputs, batch: BatchInfo, /, *args: Any, **hparams: Any) -> LossOutput:
        """The micro-batch loss of ``inputs`` normalised by ``batch`` (``LossOutput``)."""
        ...


_warned_no_grad: set[str] = set()


class LossResultError(TypeError):
    """A loss function returned something other than the ``LossOutput`` contract."""


class NoGradientWarning(UserWarning):
    """A loss was called, with autograd on, on log_probs that do not require grad."""


def check_result(spec: LossSpec, out: object, wants_grad: bool, values: bool = False) -> LossOutput:
    """``out`` if it keeps the contract, else LossResultError naming the loss and its provider.

    The contract, checked without reading a tensor (no device synchronisation): a
    ``LossOutput`` whose ``loss`` is a 0-dim floating-point tensor that requires grad when
    ``wants_grad`` (the inputs required grad with autograd on), and whose ``metrics`` is a
    dict of str to tensors. With ``values`` (which synchronises, as ``validate=True`` does
    anyway) the loss must also be finite: the inputs were checked finite, so NaN or inf is
    the loss's fault.
    """
    where = f"loss {spec.name!r} (from distribution {spec.provider or '<unregistered>'!r})"
    if not isinstance(out, LossOutput):
        raise LossResultError(f"{where} returned {type(out).__name__}, expected gmpo_plugins.LossOutput")
    loss = out.loss
    if not isinstance(loss, torch.Tensor) or loss.dim() != 0 or not loss.dtype.is_floating_point:
        got = f"shape {tuple(loss.shape)} {loss.dtype}" if isinstance(loss, torch.Tensor) else type(loss).__name__
        raise LossResultError(f"{where} returned a loss of {got}, expected a 0-dim floating-point tensor")
    if wants_grad and not loss.requires_grad:
        raise LossResultError(
            f"{where} returned a loss that does not require grad although log_probs does "
            "(it is not connected to the autograd graph)"
        )
    if not isinstance(out.metrics, dict) or not all(
        isinstance(key, str) and isinstance(value, torch.Tensor) for key, value in out.metrics.items()
    ):
        raise LossResultError(f"{where} returned metrics that are not a dict of str to tensors")
    if values and not bool(torch.isfinite(loss)):
        raise LossResultError(f"{where} returned a non-finite loss ({float(loss.detach())}) for finite inputs")
    return out


@dataclass(frozen=True)
class LossSpec:
    """A loss with its metadata.

    name            registry name, e.g. ``"gmpo"``
    fn              ``fn(inputs, batch, **hparams) -> LossOutput``
    description     one line for ``gmpo-plugins list``
    defaults        default hyper-parameters; no other keyword is accepted
    sequence_level  advantages must be one per sequence ((B,) or row-constant (B, T))
    clip_space      ``"log"`` when eps bound the log ratio (GMPO family), ``"ratio"``
                    when they bound the ratio itself (PPO/GRPO/GSPO), None without clip
    reductions      values accepted by the ``reduction`` hyper-parameter, if any
    impls           values its function accepts as the ``impl`` keyword (``types.Impl``):
                    empty for a loss with one formulation; a loss with a fused path lists
                    ``"eager"`` (its unfused formulation, the test oracle) among them
    split_invariant True when any micro-batch or data-parallel split of a batch, with the
                    global counts in ``BatchInfo``, gives the whole batch's gradient; False
                    for a loss whose value depends on the batch it is given (clip_cov and
                    kl_cov select tokens by a covariance over the micro-batch)
    linear_in_advantages
                    True when the loss is positively homogeneous of degree 1 in the
                    advantages (l(c A) = c l(A) for c > 0: its clip and gate decisions read
                    only their signs), so a framework may fold the batch normalisation into
                    pre-scaled advantages (SkyRL); False for a term that is not scaled with
                    them (dro's beta penalty, kl_cov's KL term, clip_cov's absolute
                    covariance thresholds)
    correction      the loss's own defaults of correction options (``core.correction``), for a
                    loss defined as another's formula under a correction (``decoupled_ppo``);
                    the caller's options override them
    requires        the optional ``LossInputs`` fields the loss reads (``"rewards"``): a call
                    without one raises ValueError naming it, and an adapter whose framework
                    cannot supply it refuses the loss by name; the loss terms' options add
                    theirs (``inputs_for``)
    formula         the loss in one line, for ``gmpo-plugins list --markdown``
    native          the frameworks that ship the loss themselves, as ``framework:name``
    sources         where each default comes from, by hyper-parameter (of ``defaults`` and
                    ``correction``): a paper and its section, or the framework file the value
                    follows; every built-in loss names one for each (a plugin may leave it empty)
    provider        distribution that registered it (filled in by the registry)
    """

    name: str
    fn: LossFn
    description: str
    defaults: Mapping[str, Any] = field(default_factory=dict)
    sequence_level: bool = False
    clip_space: Literal["log", "ratio"] | None = None
    reductions: tuple[str, ...] = ()
    impls: tuple[Impl, ...] = ()
    split_invariant: bool = True
    linear_in_advantages: bool = True
    correction: Mapping[str, Any] = field(default_factory=dict)
    requires: tuple[str, ...] = ()
    formula: str = ""
    native: tuple[str, ...] = ()
    sources: Mapping[str, str] = field(default_factory=dict)
    provider: str = ""

    def inputs_for(self, hparams: Mapping[str, Any]) -> tuple[str, ...]:
        """The optional ``LossInputs`` fields a call with ``hparams`` reads: ``requires``, those
        of the loss-term options set there (``terms.required_inputs``), and ``rollout_log_probs``
        for a correction option set there that reads them (``Correction.needs_rollout``)."""
        extra = [name for name in required_inputs(hparams) if name not in self.requires]
        correction, _ = split_correction({key: value for key, value in hparams.items() if key in CORRECTION_DEFAULTS})
        if correction.needs_rollout and "rollout_log_probs" not in (*self.requires, *extra):
            extra.append("rollout_log_probs")
        return (*self.requires, *extra)

    def resolve(self, overrides: Mapping[str, Any]) -> dict[str, Any]:
        """Defaults updated with ``overrides``; unknown names raise TypeError with the valid ones.
        Correction options (``core.correction``) and loss-term options (``core.terms``) are
        accepted and checked, and appear in the result only where ``overrides`` gives them (the
        spec's own ``correction`` defaults are added by ``__call__``)."""
        shared = {**CORRECTION_DEFAULTS, **TERM_DEFAULTS}
        unknown = [key for key in overrides if key not in self.defaults and key not in shared]
        if unknown:
            known = [*self.defaults, *shared]
            hints = "".join(
                f" (did you mean {close[0]!r} for {key!r}?)"
                for key in unknown
                if (close := difflib.get_close_matches(key, known, n=1))
            )
            raise TypeError(
                f"{self.name}: unknown hyper-parameter(s) {unknown}; valid: {sorted(self.defaults)} and the "
                f"rollout correction's {list(CORRECTION_DEFAULTS)} and the loss terms' {list(TERM_DEFAULTS)}{hints}"
            )
        given = {key: value for key, value in overrides.items() if key in CORRECTION_DEFAULTS}
        check_correction(self.name, {**self.correction, **given})
        check_terms(self.name, {key: value for key, value in overrides.items() if key in TERM_DEFAULTS})
        params = {**self.defaults, **overrides}
        optional = tuple(name for name, value in self.defaults.items() if value is None)
        check_hparams(
            self.name, params, reductions=self.reductions, ratio_space=self.clip_space == "ratio", optional=optional
        )
        return params

    def __call__(
        self,
        inputs: LossInputs,
        batch: BatchInfo | None = None,
        *,
        validate: bool = True,
        impl: Impl | None = None,
        **hparams: Any,
    ) -> LossOutput:
        """Compute the loss of one micro-batch.

        Hyper-parameters and the structure of the inputs (types, dtypes, shapes, devices)
        are always checked; no tensor is read for that. validate=True also checks values
        (finite, 0/1 mask, one advantage per sequence, counts of ``batch``), which
        synchronises with the device; with validate=False the call never synchronises.
        The result is checked too (``check_result``: raises LossResultError naming the loss
        and its provider; a non-finite loss only with validate=True). With autograd on and
        log_probs not requiring grad, a NoGradientWarning is given once per loss (the loss
        then trains nothing).

        With ``GMPO_PLUGINS_NONFINITE=raise`` (``validation.nonfinite_raises``) a NaN or +-inf
        at a valid position of an input raises a ValueError naming the input, row and column
        before anything is computed (a synchronising check, whatever ``validate`` says).

        ``impl`` chooses the path of a loss that has several (one of ``impls``, e.g.
        ``"eager"`` for the unfused oracle); None leaves the loss's own default. ValueError
        naming ``impl`` for a value the loss does not list (any value for a loss without
        ``impls``).
        """
        correction, params = split_correction({**self.correction, **self.resolve(hparams)})
        terms, params = split_terms(params)
        if impl is not None:
            if impl not in self.impls:
                offered = f"one of {list(self.impls)}" if self.impls else "None (it has one formulation)"
                raise ValueError(f"{self.name}: impl must be {offered}, got {impl!r}")
            params["impl"] = impl
        batch = BatchInfo() if batch is None else batch
        if nonfinite_raises():  # structure first: the check indexes the tensors
            validate_inputs(inputs, sequence_level=self.sequence_level, values=False)
            raise_at_first_nonfinite(inputs)
        validate_inputs(inputs, sequence_level=self.sequence_level, values=validate)
        validate_batch_info(batch, values=validate)
        check_correction_inputs(self.name, correction, inputs)
        check_term_inputs(self.name, terms, inputs)
        for name in self.requires:
            if getattr(inputs, name) is None:
                raise ValueError(f"{self.name}: {name} is required by this loss (LossInputs.{name}); got None")
        wants_grad = torch.is_grad_enabled() and inputs.log_probs.requires_grad
        if torch.is_grad_enabled() and not wants_grad and self.name not in _warned_no_grad:
            _warned_no_grad.add(self.name)
            warnings.warn(
                f"gmpo_plugins: loss {self.name!r} called on log_probs that do not require grad: the loss "
                "has no gradient (pass log-probs computed with autograd, or call it under torch.no_grad())",
                NoGradientWarning,
                stacklevel=2,
            )
        corrected, metrics = apply_correction(inputs, correction, sequence_level=self.sequence_level)
        corrected, keep, mask_metrics = top_entropy_mask(corrected, terms)
        if keep is not None:  # the kept tokens as zero weights: the zero-weight rule, as for a correction
            corrected = zero_weight_rule(corrected, correction, sequence_level=self.sequence_level)
        out = check_result(self, self.fn(corrected, batch, **params), wants_grad, values=validate)
        out.metrics.update(metrics)
        out.metrics.update(mask_metrics)
        reduction = term_reduction(params, sequence_level=self.sequence_level)
        return add_terms(
            out, corrected, batch, terms, reduction=reduction, norm_length=params.get("norm_length"), keep=keep
        )
