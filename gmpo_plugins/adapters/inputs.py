"""The optional loss inputs each adapter passes, and the refusal of a loss that needs another.

A loss lists the optional ``LossInputs`` fields it reads in ``LossSpec.requires`` (``topr``:
``rewards``). ``SUPPLIED`` says which of them each framework's adapter passes; a loss that
requires one its adapter does not pass is refused by name, with the reason, where the adapter
first sees the loss (``refuse_unsupplied``, first in each adapter's translation of the loss's
settings, before any check of them); the support table, the compare backends, the parity
harness and ``gmpo-plugins doctor`` give the same reason (``refusal``). The audit needs no
rule: it compares the frameworks' own losses, and none ships these. Passing an input later is
one entry of ``SUPPLIED``.
"""

from __future__ import annotations

from gmpo_plugins.core.spec import LossSpec

SUPPLIED: dict[str, tuple[str, ...]] = {"verl": (), "trl": (), "openrlhf": (), "skyrl": ()}
"""Framework (lower case) -> the optional ``LossInputs`` fields its adapter passes to a loss."""

DESCRIPTIONS = {
    "rewards": "per-sequence rewards",
    "group_ids": "group ids (the rows that share a prompt)",
    "rollout_log_probs": "the rollout engine's log-probs",
    "ref_log_probs": "reference log-probs",
    "rollout_is_weights": "precomputed IS weights",
}
"""Field -> how a refusal names it."""


def missing_inputs(spec: LossSpec, framework: str) -> tuple[str, ...]:
    """The fields of ``spec.requires`` the ``framework`` adapter does not pass (any name case)."""
    supplied = SUPPLIED.get(framework.lower(), ())
    return tuple(name for name in spec.requires if name not in supplied)


def refusal(spec: LossSpec, framework: str, caller: str | None = None) -> str | None:
    """``"topr needs per-sequence rewards, which the verl adapter does not pass yet"``, or None
    when the adapter passes every input the loss requires; ``caller`` names another caller
    that passes none of them (``"the parity harness"``)."""
    missing = missing_inputs(spec, framework) if caller is None else spec.requires
    if not missing:
        return None
    needs = " and ".join(DESCRIPTIONS.get(name, name) for name in missing)
    return f"{spec.name} needs {needs}, which {caller or f'the {framework} adapter'} does not pass yet"


def refuse_unsupplied(spec: LossSpec, framework: str, error: type[ValueError] = ValueError) -> None:
    """Raise ``error`` with ``refusal``'s reason when the adapter cannot call ``spec``."""
    reason = refusal(spec, framework)
    if reason is not None:
        raise error(f"gmpo_plugins: {reason}")
