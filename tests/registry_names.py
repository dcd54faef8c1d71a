"""Loss names read from the registry, so that tests cover a new built-in loss without a list to
edit (tests/core/test_registry.py pins the set of built-ins itself)."""

from __future__ import annotations

from gmpo_plugins import list_losses
from gmpo_plugins.adapters.inputs import refusal
from gmpo_plugins.core.registry import DISTRIBUTION


def builtin_losses(*, sequence_level: bool | None = None, fused: bool | None = None) -> list[str]:
    """Names of the losses this distribution registers, optionally only the sequence-level
    (``True``) or token-level (``False``) ones, and only those with (``fused=True``) or without
    a fused path (``"torch"`` among their ``impls``), in registration order."""
    return [
        spec.name
        for spec in list_losses()
        if spec.provider == DISTRIBUTION
        and (sequence_level is None or spec.sequence_level == sequence_level)
        and (fused is None or ("torch" in spec.impls) == fused)
    ]


def adapter_losses(framework: str) -> list[str]:
    """Names of the registered losses the ``framework`` adapter can call: those whose required
    inputs (``LossSpec.requires``) it passes (``adapters.inputs.refusal``)."""
    return [spec.name for spec in list_losses() if refusal(spec, framework) is None]


def refused_losses(framework: str) -> list[str]:
    """Names of the registered losses the ``framework`` adapter refuses for a missing input."""
    return [spec.name for spec in list_losses() if refusal(spec, framework) is not None]
