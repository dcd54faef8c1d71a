"""One verdict per (registry loss, framework); a loss is also a row of ``translations.VARIANTS``
(a registry loss at other settings than its defaults).

Each framework call runs with torch's generator seeded (``SEED``, the caller's generator
state restored after it): a framework that draws at random gives one reproducible verdict,
which rests on that draw. For every audit batch (``batches.audit_cases``), in float64:

    whole     the framework's reference on the whole batch (one micro-batch, one rank) against
              the registry (``get_loss(name)(..., BatchInfo(1, B, valid tokens), **defaults)``):
              d_loss = |loss_f - loss_r|, d_grad = max |dloss_f/dlog_probs - dloss_r/dlog_probs|
    split     the framework at 2 and 4 micro-batches and at 2 ranks (``batches.SPLITS``),
              accumulated as its trainer accumulates them, against its own whole batch
              (``split_deltas``: the worst scaled difference of each split); a loss that
              depends on its batch by definition (``translations.PER_MICRO_BATCH``) against
              the registry on the same micro-batches instead, set as the modelled conventions
              of its translation say, on the batches and splits its other conventions leave
              alone
    metrics   each metric the framework reports under a core name, against the registry's
              (reported beside the verdict, never in it: names and meanings differ)
    float32   the framework on ``batches.overflow_probe`` (a log ratio of 89 in float32):
              ``overflow_probe`` is "finite", "inf loss", "NaN loss", "inf/NaN gradient" or
              "raises: ..." (reported beside the verdict; the registry is finite there)

Each difference is scaled by max(1, |registry value|) (max over the tensor for gradients).
The verdict, first that applies:

    not shipped        no translation for the framework (``translations.py``)
    cannot express     the framework cannot be set to the registry's setting
    raises             the framework's call raised (the exception is the note)
    non-finite         a finite batch gave an inf/NaN loss or gradient
    split-dependent    a split differs from the whole batch by more than the tolerance;
                       ``split_factor`` = <g_4, g> / <g, g> at 4 micro-batches, g the
                       gradient it is compared with
    identical          d_loss and d_grad <= 1e-6 on every batch
    convention         the translation names the conventions it differs by; ``verified`` when
                       the registry, set as the modelled conventions say, matches it
    differs            a difference no named convention accounts for
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from gmpo_plugins.compare.audit import batches
from gmpo_plugins.compare.audit.batches import Split
from gmpo_plugins.compare.audit.callers import Caller
from gmpo_plugins.compare.audit.conventions import CONVENTIONS
from gmpo_plugins.compare.audit.translations import (
    PER_MICRO_BATCH,
    CannotExpress,
    Reference,
    registry_setting,
    translation,
)
from gmpo_plugins.compare.parity.harness import ParityCase
from gmpo_plugins.core.registry import get_loss
from gmpo_plugins.core.types import BatchInfo, LossInputs

TOLERANCE = 1e-6
SEED = 0  # every framework call draws from torch's generator seeded with it (clip_cov's random tokens)


@dataclass
class Cell:
    """The audit of one (loss, framework); JSON-ready (``asdict``)."""

    loss: str
    framework: str
    verdict: str
    call: str = ""
    setting: str = ""
    translation_note: str = ""
    conventions: list[str] = field(default_factory=list)
    verified: bool | None = None
    d_loss: float | None = None
    d_grad: float | None = None
    d_split: float | None = None
    worst_split: str = ""
    split_deltas: dict[str, float] = field(default_factory=dict)
    split_factor: float | None = None
    overflow_probe: str = ""
    d_metric: float | None = None
    metric_key: str = ""
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Evaluation:
    """Summed loss, accumulated (float64) gradient and whole-batch metrics of one run."""

    loss: float
    grad: torch.Tensor
    metrics: dict[str, float]

    def finite(self) -> bool:
        return math.isfinite(self.loss) and bool(torch.isfinite(self.grad).all())


def run_framework(
    module: Any, reference: Reference, settings: Mapping[str, Any], case: ParityCase, split: Split
) -> Evaluation:
    """The framework's loss and gradient on ``case`` in ``split`` (``batches`` docstring)."""
    log_probs = case.log_probs.clone().requires_grad_(True)
    total, metrics = 0.0, {}
    for part in batches.parts(case, log_probs, split):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(SEED)
            loss, metrics = module.micro_loss(reference, settings, part)
        (loss / split.ranks).backward()
        total += float(loss.detach()) / split.ranks
    grad = torch.zeros_like(log_probs) if log_probs.grad is None else log_probs.grad
    return Evaluation(total, grad.double(), metrics if split == batches.WHOLE else {})


def run_registry(
    loss_name: str, case: ParityCase, conventions: Sequence[str] = (), split: Split = batches.WHOLE
) -> Evaluation:
    """The registry loss on ``case`` in ``split`` (each micro-batch with the global counts and
    ``dp_size`` = ranks, summed, ranks averaged), with the modelled ``conventions`` applied."""
    registry_name, hparams = registry_setting(loss_name)
    rows = int(case.mask.shape[0])
    for name in conventions:
        hparams.update(CONVENTIONS[name].core_hparams)
        if not CONVENTIONS[name].count_empty_rows:
            rows = int((case.mask.sum(-1) > 0).sum())
    log_probs = case.log_probs.clone().requires_grad_(True)
    info = BatchInfo(dp_size=split.ranks, global_batch_size=rows, global_num_tokens=int(case.mask.sum()))
    total, metrics = 0.0, {}
    for part in batches.parts(case, log_probs, split):
        inputs = LossInputs(*(part.take(t) for t in (log_probs, case.old_log_probs, case.advantages, case.mask)))
        out = get_loss(registry_name)(inputs, info, **hparams)
        (out.loss / split.ranks).backward()
        total += float(out.loss.detach()) / split.ranks
        metrics = {key: float(value) for key, value in out.metrics.items()}
    grad = torch.zeros_like(log_probs) if log_probs.grad is None else log_probs.grad
    return Evaluation(total, grad.double(), metrics if split == batches.WHOLE else {})


def probe_overflow(module: Any, reference: Reference, settings: Mapping[str, Any]) -> str:
    """The framework on ``batches.overflow_probe`` (module docstring)."""
    try:
        got = run_framework(module, reference, settings, batches.overflow_probe(), batches.WHOLE)
    except Exception as exc:  # noqa: BLE001 - reported beside the verdict, quoted
        return f"raises: {type(exc).__name__}: {exc}"
    if math.isnan(got.loss) or math.isinf(got.loss):
        return "NaN loss" if math.isnan(got.loss) else "inf loss"
    return "finite" if bool(torch.isfinite(got.grad).all()) else "inf/NaN gradient"


def _scaled(got: Evaluation, want: Evaluation) -> tuple[float, float]:
    d_loss = abs(got.loss - want.loss) / max(1.0, abs(want.loss))
    d_grad = float((got.grad - want.grad).abs().max()) / max(1.0, float(want.grad.abs().max()))
    return d_loss, d_grad


def _worst(values: list[float]) -> float:
    return max(values, key=lambda value: (math.isnan(value), value)) if values else 0.0


def audit_cell(caller: Caller, loss_name: str, module: Any = None) -> Cell:
    """The verdict of ``loss_name`` in ``caller``'s framework (module docstring)."""
    entry = translation(caller.name, loss_name)
    if entry is None:
        return Cell(loss_name, caller.name, "not shipped")
    if isinstance(entry, CannotExpress):
        return Cell(loss_name, caller.name, "cannot express", note=entry.reason)
    registry_name, hparams = registry_setting(loss_name)
    cell = Cell(
        loss_name,
        caller.name,
        "identical",
        call=entry.label(),
        setting=entry.spelled(hparams),
        translation_note=entry.note,
        conventions=list(entry.conventions),
    )
    settings = entry.settings(hparams)
    per_micro_batch = registry_name in PER_MICRO_BATCH
    modelled = _modelled(loss_name, entry.conventions) if per_micro_batch else []
    unmodelled = [CONVENTIONS[name] for name in entry.conventions if name not in modelled]
    confined = {batch for convention in unmodelled for batch in convention.batches}
    spared = {label for convention in unmodelled for label in convention.splits}
    module = caller.load() if module is None else module
    losses, grads, splits, metric_deltas = [], [], [], []
    factor_case: tuple[float, str, Evaluation, Evaluation] | None = None
    try:
        for case in batches.audit_cases():
            whole = run_framework(module, entry, settings, case, batches.WHOLE)
            registry = run_registry(loss_name, case)
            if not whole.finite():
                cell.verdict, cell.note = "non-finite", f"{case.name}: loss {whole.loss}"
                return cell
            d_loss, d_grad = _scaled(whole, registry)
            losses.append(d_loss)
            grads.append(d_grad)
            for key in sorted(set(whole.metrics) & set(registry.metrics)):
                delta = abs(whole.metrics[key] - registry.metrics[key]) / max(1.0, abs(registry.metrics[key]))
                metric_deltas.append((delta, f"{key} ({case.name})"))
            for split in batches.SPLITS if not (per_micro_batch and case.name in confined) else ():
                if per_micro_batch and split.label in spared:
                    continue
                got = run_framework(module, entry, settings, case, split)
                if not got.finite():
                    cell.verdict, cell.note = "non-finite", f"{case.name}, {split.label}: loss {got.loss}"
                    return cell
                baseline = run_registry(loss_name, case, modelled, split) if per_micro_batch else whole
                delta = max(_scaled(got, baseline))
                splits.append((delta, f"{split.label} ({case.name})"))
                cell.split_deltas[split.label] = max(delta, cell.split_deltas.get(split.label, 0.0))
                if split == batches.FACTOR_SPLIT and (factor_case is None or delta > factor_case[0]):
                    factor_case = (delta, case.name, got, baseline)
    except Exception as exc:  # noqa: BLE001 - a framework that raises is a verdict, quoted
        cell.verdict, cell.note = "raises", f"{type(exc).__name__}: {exc}"
        return cell
    cell.overflow_probe = probe_overflow(module, entry, settings)
    cell.d_loss, cell.d_grad = _worst(losses), _worst(grads)
    cell.d_split, cell.worst_split = max(splits) if splits else (0.0, "")
    if metric_deltas:
        cell.d_metric, cell.metric_key = max(metric_deltas)
    split_dependent = cell.d_split > TOLERANCE
    if split_dependent:
        if factor_case is not None:
            _, _, got, whole = factor_case
            norm = float((whole.grad * whole.grad).sum())
            cell.split_factor = float((got.grad * whole.grad).sum()) / norm if norm > 0 else None
        cell.verdict = "split-dependent"
        if max(cell.d_loss, cell.d_grad) <= TOLERANCE:
            cell.conventions = []
            return cell
    elif max(cell.d_loss, cell.d_grad) <= TOLERANCE:
        cell.conventions = []
        return cell
    explained = _explain(cell, module, entry, settings)
    if split_dependent:
        explained.verdict = "split-dependent"
    if per_micro_batch and spared:
        explained.note += (
            "; " if explained.note else ""
        ) + f"micro-batches not compared at {', '.join(sorted(spared))}"
    return explained


def _modelled(loss_name: str, names: Sequence[str]) -> list[str]:
    """The named conventions the registry loss ``loss_name`` can be set to reproduce."""
    known = get_loss(registry_setting(loss_name)[0]).defaults
    return [name for name in names if CONVENTIONS[name].modelled and set(CONVENTIONS[name].core_hparams) <= set(known)]


def _explain(cell: Cell, module: Any, entry: Reference, settings: Mapping[str, Any]) -> Cell:
    """``convention`` or ``differs``: the registry, set as the modelled conventions say, against the
    framework's whole batch, on the batches (and quantities) the unmodelled conventions leave
    alone (``conventions`` docstring); ``verified`` when it then matches within the tolerance."""
    if not cell.conventions:
        cell.verdict = "differs"
        cell.note = "no named convention accounts for the difference"
        return cell
    named = [CONVENTIONS[name] for name in cell.conventions]
    modelled = [CONVENTIONS[name] for name in _modelled(cell.loss, cell.conventions)]
    unmodelled = [c for c in named if c not in modelled]
    if any(not c.batches and not c.value_only for c in unmodelled):
        cell.verdict, cell.verified = "convention", False
        cell.note = "not verified: a named convention is neither modelled nor confined to batches or the value"
        return cell
    skipped = {name for c in unmodelled for name in c.batches}
    gradient_only = any(c.value_only for c in unmodelled)
    residual = 0.0
    for case in batches.audit_cases():
        if case.name in skipped:
            continue
        whole = run_framework(module, entry, settings, case, batches.WHOLE)
        d_loss, d_grad = _scaled(whole, run_registry(cell.loss, case, [c.name for c in modelled]))
        residual = max(residual, d_grad if gradient_only else max(d_loss, d_grad))
    cell.verified = residual <= TOLERANCE
    cell.verdict = "convention" if cell.verified or unmodelled else "differs"
    scope = []
    if skipped:
        scope.append(f"outside the {', '.join(sorted(skipped))} batch")
    if gradient_only:
        scope.append("gradient only")
    if cell.verified and scope:
        cell.note = "verified " + ", ".join(scope)
    elif not cell.verified:
        names = ", ".join(c.name for c in modelled) or "its defaults"
        where = f" ({', '.join(scope)})" if scope else ""
        cell.note = f"the registry set as {names} say still differs by {residual:.3g}{where}"
    return cell
