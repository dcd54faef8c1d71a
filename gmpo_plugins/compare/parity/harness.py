"""``gmpo-plugins parity``: fixed, hard batches through every available loss call path,
compared with the core.

A *target* is a ``LossBackend`` (``gmpo_plugins.compare.backends.base``) with a label and a
kind:

    adapter     ours (an adapter of this package): must match the core within tolerance
    reference   a third-party implementation (verl's built-in ``geo_mean``, ...): its
                differences are reported, never an error

Targets come from, in order:
1. ``core`` itself (kind adapter: its micro-batch split behaviour is checked too);
2. every non-core framework of ``backends.FRAMEWORKS`` whose backend module imports: the
   module's ``parity_targets() -> Iterable[ParityTarget]`` if it defines one, else
   ``ParityTarget(f"{name} adapter", "adapter", make_backend())``; a module or framework
   that is not installed is listed as skipped;
3. ``references.reference_targets()`` (third-party implementations that import here);
4. ``register_parity_target(target)`` calls (tests, plugins).

For every target, loss it supports and case of ``parity_cases()``, with the core as the
baseline on the same case:

    d_loss    |loss_target - loss_core|
    d_grad    max_{i,t} |dloss_target/dlog_probs - dloss_core/dlog_probs|
    d_metric  max over metric names both report of |metric_target - metric_core|
    d_split   k in (2, 4) (against the core on the same k micro-batches for a loss that is not
              ``split_invariant``): the batch split row-wise into k micro-batches, each called with
              BatchInfo(dp_size=1, global_batch_size=B, global_num_tokens=all valid tokens),
              losses summed and gradients accumulated; max of |sum of losses - core whole
              loss| and max |accumulated grad - core whole grad|

Each difference is divided by max(1, |core value|) (max over the tensor for gradients), which
keeps cases with huge guarded ratios meaningful in float32; a row reports the worst scaled
difference over the cases and passes when every one is <= tol (1e-6). The exit status is
1 when any adapter target fails on any of the four.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from gmpo_plugins.compare.backends.base import FRAMEWORKS, CoreBackend, LossBackend, ParityTarget, PolicyLossCall
from gmpo_plugins.compare.parity.references import reference_targets
from gmpo_plugins.core.registry import get_loss
from gmpo_plugins.core.types import BatchInfo

TOLERANCE = 1e-6
SPLITS = (2, 4)


@dataclass(frozen=True)
class ParityCase:
    """One fixed batch: (B, T) tensors, (B,) advantages."""

    name: str
    log_probs: torch.Tensor
    old_log_probs: torch.Tensor
    advantages: torch.Tensor
    mask: torch.Tensor
    rollout_is_weights: torch.Tensor | None = None  # (B, T)


_REGISTERED: list[ParityTarget] = []


def register_parity_target(target: ParityTarget) -> None:
    """Add a target to every later ``parity`` run in this process."""
    _REGISTERED.append(target)


def parity_cases() -> list[ParityCase]:
    """Seeded batches, B = 8 rows, T = 24, chosen to be hard.

    Every case has rows of lengths 24, 13, 0 (empty), 7, 1, 24, 16, 4, advantages of
    both signs and an exact zero, and padding filled with +50 (must be ignored).

    near      log ratio ~ N(0, 0.3^2)
    far       log ratio ~ N(0, 3^2) with +-12 spikes: ratios far outside every clip range
    guard     as far, plus a +25 token in the length-1 row with A < 0 and -25 in a row
              with A > 0 (beyond the +-20 overflow guard)
    zero_adv  near, with every advantage 0
    bf16      near, with log-probs in bfloat16
    is_weights  near, with (B, T) rollout IS weights in [0.2, 2] (padding 50); run only by
              targets whose backend has ``accepts_rollout_is_weights = True`` (the core, verl's
              geo_mean and gspo): it compares how each aggregates token weights on a
              sequence-level loss, gradients included
    """
    generator = torch.Generator().manual_seed(20250727)
    batch, width = 8, 24
    lengths = torch.tensor([24, 13, 0, 7, 1, 24, 16, 4])
    mask = torch.arange(width)[None, :] < lengths[:, None]
    advantages = torch.tensor([1.3, -0.7, 0.9, 0.0, -1.5, 0.4, -0.2, 2.0])
    old = -(torch.rand(batch, width, generator=generator) * 3.0 + 0.05)
    noise = torch.randn(batch, width, generator=generator)

    def padded(values: torch.Tensor) -> torch.Tensor:
        return torch.where(mask, values, torch.full_like(values, 50.0))

    near = old + 0.3 * noise
    far = old + 3.0 * noise
    far[0, 3], far[1, 5], far[5, 10], far[6, 2] = 12.0, -12.0, -12.0, 12.0
    guard = far.clone()
    guard[4, 0], guard[7, 1] = old[4, 0] + 25.0, old[7, 1] - 25.0
    weights = 0.2 + 1.8 * torch.rand(batch, width, generator=generator)
    return [
        ParityCase("near", padded(near), padded(old), advantages, mask),
        ParityCase("far", padded(far), padded(old), advantages, mask),
        ParityCase("guard", padded(guard), padded(old), advantages, mask),
        ParityCase("zero_adv", padded(near), padded(old), torch.zeros_like(advantages), mask),
        ParityCase("bf16", padded(near).to(torch.bfloat16), padded(old).to(torch.bfloat16), advantages, mask),
        ParityCase("is_weights", padded(near), padded(old), advantages, mask, padded(weights)),
    ]


@dataclass
class Evaluation:
    """A target's result on one case: summed loss, accumulated grad (float64), metrics."""

    loss: float
    grad: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)


def evaluate(backend: LossBackend, loss_name: str, case: ParityCase, splits: int = 1) -> Evaluation:
    """Run ``case`` through ``backend`` in ``splits`` row-wise micro-batches."""
    hparams = get_loss(loss_name).resolve({})
    log_probs = case.log_probs.clone().requires_grad_(True)
    rows = case.mask.shape[0]
    info = BatchInfo(dp_size=1, global_batch_size=rows, global_num_tokens=int(case.mask.sum()))
    total, metrics = 0.0, {}
    for index in torch.arange(rows).chunk(splits):
        weights = None if case.rollout_is_weights is None else case.rollout_is_weights[index]
        loss, raw = backend.policy_loss(
            PolicyLossCall(
                log_probs=log_probs[index],
                old_log_probs=case.old_log_probs[index],
                advantages=case.advantages[index],
                mask=case.mask[index],
                loss_name=loss_name,
                hparams=hparams,
                batch_info=info,
                rollout_is_weights=weights,
            )
        )
        loss.backward()
        total += float(loss.detach().double())
        metrics = {key: float(value) for key, value in raw.items()}
    if log_probs.grad is None:
        raise RuntimeError(f"{backend.name}: the loss of {loss_name} does not depend on log_probs")
    return Evaluation(total, log_probs.grad.double(), metrics if splits == 1 else {})


@dataclass
class ParityRow:
    """Worst scaled differences of one (target, loss) over all cases (module docstring)."""

    label: str
    kind: str
    loss_name: str
    d_loss: float = 0.0
    d_grad: float = 0.0
    d_metric: float = 0.0
    metric_key: str = ""
    d_split: float = 0.0
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


def _scale(value: Any) -> float:
    return max(1.0, float(value.abs().max()) if isinstance(value, torch.Tensor) else abs(value))


def _worse(delta: float, current: float) -> bool:
    """Whether ``delta`` is a worse difference than ``current`` (NaN is the worst)."""
    return (math.isnan(delta) and not math.isnan(current)) or delta > current


def compare_target(target: ParityTarget, loss_name: str, cases: list[ParityCase], tol: float = TOLERANCE) -> ParityRow:
    """Differences of ``target`` from the core on every case (module docstring). A target
    that raises on a case fails that case (the exception is quoted)."""
    core = CoreBackend()
    row = ParityRow(target.label, target.kind, loss_name)

    def record(what: str, case: str, delta: float, field_name: str, metric_key: str = "") -> None:
        if not delta <= tol:  # NaN fails too
            row.failures.append(f"{what} on {case}: {delta:.3g}")
        if _worse(delta, getattr(row, field_name)) or (field_name == "d_metric" and not row.metric_key):
            setattr(row, field_name, delta)
            if metric_key:
                row.metric_key = metric_key

    for case in cases:
        if case.rollout_is_weights is not None and not getattr(target.backend, "accepts_rollout_is_weights", False):
            continue
        try:
            base = evaluate(core, loss_name, case)
        except Exception as exc:  # noqa: BLE001 - a broken (plugin) loss fails its rows, not the run
            row.failures.append(f"core raised on {case.name}: {type(exc).__name__}: {exc}")
            continue
        try:
            got = evaluate(target.backend, loss_name, case)
            splits = {k: evaluate(target.backend, loss_name, case, k) for k in SPLITS}
        except Exception as exc:  # noqa: BLE001 - any failure of the target is a parity failure
            row.failures.append(f"raised on {case.name}: {type(exc).__name__}: {exc}")
            continue
        record("loss", case.name, abs(got.loss - base.loss) / _scale(base.loss), "d_loss")
        record("grad", case.name, float((got.grad - base.grad).abs().max()) / _scale(base.grad), "d_grad")
        for key in sorted(set(got.metrics) & set(base.metrics)):
            delta = abs(got.metrics[key] - base.metrics[key]) / _scale(base.metrics[key])
            record(f"metric {key}", case.name, delta, "d_metric", key)
        split_invariant = get_loss(loss_name).split_invariant
        for k, split in splits.items():
            # a loss that depends on its micro-batch by definition: the core on the same micro-batches
            want = base if split_invariant else evaluate(core, loss_name, case, k)
            delta = max(
                abs(split.loss - want.loss) / _scale(want.loss),
                float((split.grad - want.grad).abs().max()) / _scale(want.grad),
            )
            record(f"{k}-way split", case.name, delta, "d_split")
    return row


def _framework_targets() -> tuple[list[ParityTarget], list[tuple[str, str]]]:
    targets: list[ParityTarget] = []
    skipped: list[tuple[str, str]] = []
    for info in FRAMEWORKS.values():
        if info.import_name is None:
            continue
        if importlib.util.find_spec(info.import_name) is None:
            skipped.append((f"{info.name} adapter", f"{info.import_name} is not installed here"))
            continue
        try:
            module = importlib.import_module(info.module)
            found = getattr(module, "parity_targets", None)
            targets.extend(
                found()
                if found is not None
                else [ParityTarget(f"{info.name} adapter", "adapter", module.make_backend())]
            )
        except ImportError as exc:
            skipped.append((f"{info.name} adapter", f"not importable here ({exc})"))
    return targets, skipped


def discover_targets() -> tuple[list[ParityTarget], list[tuple[str, str]]]:
    """(targets, skipped (label, reason)) in the order of the module docstring."""
    targets = [ParityTarget("core", "adapter", CoreBackend(), note="baseline; split behaviour checked")]
    found, skipped = _framework_targets()
    references, skipped_references = reference_targets()
    return targets + found + references + list(_REGISTERED), skipped + skipped_references


def run_parity(
    losses: Iterable[str] | None = None, tol: float = TOLERANCE
) -> tuple[list[ParityRow], list[tuple[str, str]]]:
    """Compare every discovered target on every loss it supports (all losses by default). A
    loss that requires an optional input (``LossSpec.requires``) the harness does not pass is
    skipped with its reason (``adapters.inputs.refusal``), once for all targets."""
    from gmpo_plugins.adapters.inputs import refusal
    from gmpo_plugins.core.registry import get_loss, list_losses

    names = list(losses) if losses is not None else [spec.name for spec in list_losses()]
    targets, skipped = discover_targets()
    cases = parity_cases()
    rows = []
    for name in names:
        reason = refusal(get_loss(name), "core", caller="the parity harness")
        if reason is not None:
            skipped.append((name, reason))
    for target in targets:
        for name in names:
            if refusal(get_loss(name), "core", caller="the parity harness") is None and target.backend.supports(name):
                rows.append(compare_target(target, name, cases, tol))
    return rows, skipped
