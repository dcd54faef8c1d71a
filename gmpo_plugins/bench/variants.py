"""The callables compared by the bench, each one forward+backward on the same inputs.

fused    ``get_loss(name)(inputs, batch, validate=False)``: the registry path (fused
         where the loss has a fused path, else its only formulation)
eager    the loss's unfused formulation (``impl="eager"``), the test oracle; absent
         for losses that have no fused path (their registry path is eager)
verl     verl's built-in ``geo_mean`` policy loss (``compute_policy_loss_geo_mean``),
         GMPO as verl ships it, when verl is importable
floor    ``torch.where(mask, log_probs, old_log_probs)`` into a new tensor: one read
         of the inputs and one write of a gradient-sized tensor (and, as a stricter
         reference, the same into a preallocated buffer)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace

import torch

from gmpo_plugins.core.spec import LossSpec
from gmpo_plugins.core.types import BatchInfo, LossInputs

# the optional LossInputs that make_case can build (LossSpec.requires names them)
OPTIONAL_INPUTS = ("rollout_log_probs", "rewards", "group_ids")


@dataclass
class Case:
    """One (B, T, dtype, device) input set; ``log_probs`` is a leaf that requires grad."""

    inputs: LossInputs
    batch: BatchInfo

    @property
    def log_probs(self) -> torch.Tensor:
        return self.inputs.log_probs

    def clear_grad(self) -> None:
        """Drop the gradient of the previous call."""
        self.inputs.log_probs.grad = None

    def for_spec(self, spec: LossSpec) -> Case:
        """The case as ``spec`` is called: the optional inputs it requires (``LossSpec.requires``),
        no others, so a loss that does not read them is timed on the plain inputs. The tensors
        are shared (the same ``log_probs`` leaf)."""
        kept: dict[str, torch.Tensor | None] = {
            name: getattr(self.inputs, name) if name in spec.requires else None for name in OPTIONAL_INPUTS
        }
        return Case(dataclasses.replace(self.inputs, **kept), self.batch)  # type: ignore[arg-type]


def make_case(
    batch_size: int,
    length: int,
    dtype: torch.dtype,
    device: torch.device,
    seed: int = 0,
    requires: tuple[str, ...] = (),
) -> Case:
    """Log ratios ~ N(0, 0.3^2), row i valid on its first L_i tokens with L_i uniform in
    [T/2, T], advantages (B,) ~ N(0, 1); the optional inputs ``requires`` names
    (``LossSpec.requires``): rollout log-probs ~ old + N(0, 0.1^2), rewards (B,) in {0, 1}, group
    ids of groups of 4 consecutive rows."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    old = -3.0 * torch.rand(batch_size, length, generator=g)
    log_probs = old + 0.3 * torch.randn(batch_size, length, generator=g)
    lengths = torch.randint(max(1, length // 2), length + 1, (batch_size,), generator=g)
    mask = torch.arange(length)[None, :] < lengths[:, None]
    advantages = torch.randn(batch_size, generator=g)
    inputs = LossInputs(
        log_probs=log_probs.to(device=device, dtype=dtype).requires_grad_(),
        old_log_probs=old.to(device=device, dtype=dtype),
        advantages=advantages.to(device=device, dtype=dtype),
        mask=mask.to(device),
    )
    if "rollout_log_probs" in requires:
        rollout = old + 0.1 * torch.randn(batch_size, length, generator=g)
        inputs.rollout_log_probs = rollout.to(device=device, dtype=dtype)
    if "rewards" in requires:
        inputs.rewards = (torch.rand(batch_size, generator=g) < 0.5).to(device=device, dtype=dtype)
    if "group_ids" in requires:
        inputs.group_ids = (torch.arange(batch_size) // 4).to(device)
    return Case(inputs, BatchInfo(dp_size=1, global_batch_size=batch_size))


def _backward(case: Case, loss: torch.Tensor) -> None:
    case.clear_grad()
    loss.backward()


def has_eager(spec: LossSpec) -> bool:
    """True for a loss with a fused path and its eager oracle (``"eager"`` in ``LossSpec.impls``)."""
    return "eager" in spec.impls


def fused(spec: LossSpec, case: Case) -> Callable[[], None]:
    def call() -> None:
        _backward(case, spec(case.inputs, case.batch, validate=False).loss)

    return call


def eager(spec: LossSpec, case: Case) -> Callable[[], None]:
    params = dict(spec.defaults)

    def call() -> None:
        _backward(case, spec.fn(case.inputs, case.batch, impl="eager", **params).loss)

    return call


def floor(case: Case) -> Callable[[], None]:
    inputs = case.inputs

    def call() -> None:
        torch.where(inputs.mask, inputs.log_probs.detach(), inputs.old_log_probs)

    return call


def floor_preallocated(case: Case) -> Callable[[], None]:
    """The floor writing into one buffer allocated once: without the first-touch page
    faults of a fresh gradient-sized allocation (which every real backward pays)."""
    inputs = case.inputs
    out = torch.empty_like(inputs.log_probs, requires_grad=False)

    def call() -> None:
        torch.where(inputs.mask, inputs.log_probs.detach(), inputs.old_log_probs, out=out)

    return call


def verl_geo_mean(case: Case, eps: float = 0.4) -> tuple[Callable[[], None] | None, str]:
    """verl's geo_mean forward+backward, or (None, why) when verl cannot be imported.
    verl wants (B, T) advantages (an expanded view here, no copy) and reads its metrics
    with ``.item()``."""
    try:
        from verl.trainer.ppo.core_algos import compute_policy_loss_geo_mean
    except Exception as exc:  # noqa: BLE001 - any import failure means "not available"
        return None, f"verl not importable ({type(exc).__name__}: {exc}); verl geo_mean skipped"
    inputs = case.inputs
    config = SimpleNamespace(clip_ratio=eps, clip_ratio_low=eps, clip_ratio_high=eps)
    advantages = inputs.advantages[:, None].expand_as(inputs.log_probs)

    def call() -> None:
        loss, _ = compute_policy_loss_geo_mean(
            old_log_prob=inputs.old_log_probs,
            log_prob=inputs.log_probs,
            advantages=advantages,
            response_mask=inputs.mask,
            loss_agg_mode="token-mean",
            config=config,
        )
        _backward(case, loss)

    return call, ""
