"""The optional loss inputs each adapter passes, and the refusal of a loss that needs another.

A loss lists the optional ``LossInputs`` fields it reads in ``LossSpec.requires`` (``topr``:
``rewards``), and the loss terms' options add theirs (``LossSpec.inputs_for``: ``entropy_coef``
and ``top_entropy_quantile`` read ``entropy``, ``nll_coef`` reads ``rewards``), as do the
correction options that read the rollout log-probs (``rollout_is``, ``rollout_rs``,
``rollout_bypass``). ``SUPPLIED``
says which of them each framework's adapter passes; a loss that requires one its adapter does
not pass is refused by name, with the reason, where the adapter first sees the loss
(``refuse_unsupplied``, first in each adapter's translation of the loss's settings, before any
check of them); the support table, the compare backends, the parity
harness and ``gmpo-plugins doctor`` give the same reason (``refusal``). The audit needs no
rule: it compares the frameworks' own losses, and none ships these. Passing an input later is
one entry of ``SUPPLIED``. A term or correction option set in the override that needs an input the adapter
does not pass is refused the same way, naming the option (``hparam_sources.resolve``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gmpo_plugins.core.correction import CORRECTION_DEFAULTS
from gmpo_plugins.core.spec import LossSpec
from gmpo_plugins.core.terms import TERM_DEFAULTS, required_inputs

SUPPLIED: dict[str, tuple[str, ...]] = {
    "verl": (),
    "trl": ("rewards", "entropy", "group_ids"),
    "openrlhf": ("rollout_log_probs", "rewards"),
    "skyrl": ("rollout_log_probs",),
}
"""Framework (lower case) -> the optional ``LossInputs`` fields its adapter passes to a loss
(TRL: the per-sample total reward of its reward functions, the differentiable per-token
entropy of its forward, and each row's group (the completions of one prompt, as TRL groups them
for its advantages); on its fused-linear path the entropy is not passed, which that path
refuses by name itself: ``adapters.trl.options``; OpenRLHF and SkyRL: the rollout engine's
log-probs, with the setting of ``ROLLOUT_SETTINGS``; OpenRLHF also each sample's reward, from the
experience its training step trains on: ``adapters.openrlhf.episode_rewards``)."""

GROUP_SETTINGS: dict[str, str] = {
    "trl": "steps_per_generation=1, per_device_train_batch_size a multiple of num_generations",
}
"""Framework (lower case) -> the setting under which each micro-batch holds whole groups, which a
split-dependent loss that reads ``group_ids`` (``real``) needs (the support table names it; the
adapter refuses other settings by name)."""

ROLLOUT_SETTINGS: dict[str, str] = {
    "openrlhf": "--algo.advantage.is_correction_level token --algo.advantage.is_correction_mode clip "
    "--algo.advantage.is_correction_threshold 1 1",
    "skyrl": "generator.sampling_params.logprobs=1",
}
"""Framework (lower case) -> the setting with which it passes the rollout log-probs to the loss
without a correction of its own (the support table names it beside a loss that reads them)."""

ROLLOUT_READERS = ("rollout_bypass", "rollout_is", "rollout_rs")
"""The correction options that read ``rollout_log_probs`` when set (``Correction.needs_rollout``)."""

DESCRIPTIONS = {
    "rewards": "per-sequence rewards",
    "group_ids": "group ids (the rows that share a prompt)",
    "rollout_log_probs": "the rollout engine's log-probs",
    "ref_log_probs": "reference log-probs",
    "rollout_is_weights": "precomputed IS weights",
    "entropy": "per-token entropy",
}
"""Field -> how a refusal names it."""


def missing_inputs(
    spec: LossSpec,
    framework: str,
    hparams: Mapping[str, Any] | None = None,
    supplied: Sequence[str] | None = None,
) -> tuple[str, ...]:
    """The fields a call of ``spec`` with ``hparams`` reads (``LossSpec.inputs_for``) that the
    ``framework`` adapter does not pass (any name case), or that are not in ``supplied`` when
    given."""
    passed = SUPPLIED.get(framework.lower(), ()) if supplied is None else supplied
    return tuple(name for name in spec.inputs_for(hparams or {}) if name not in passed)


def refusal(
    spec: LossSpec,
    framework: str,
    caller: str | None = None,
    hparams: Mapping[str, Any] | None = None,
    supplied: Sequence[str] = (),
) -> str | None:
    """``"topr needs per-sequence rewards, which the verl adapter does not pass yet"``, or None
    when the adapter passes every input the loss requires; ``caller`` names another caller
    that passes only the fields ``supplied`` (``"the parity harness"``: none). With
    ``hparams``, the loss-term options set there count too, and the refusal names them
    (``"gmpo with entropy_coef=0.01 needs per-token entropy, ..."``)."""
    missing = missing_inputs(spec, framework, hparams, None if caller is None else supplied)
    if not missing:
        return None
    needs = " and ".join(DESCRIPTIONS.get(name, name) for name in missing)
    named = [f"{key}={value!r}" for key, value in (hparams or {}).items() if _reads_input(key, value)]
    subject = f"{spec.name} with {', '.join(named)}" if named else spec.name
    return f"{subject} needs {needs}, which {caller or f'the {framework} adapter'} does not pass yet"


def _reads_input(option: str, value: Any) -> bool:
    """True when the loss-term or correction ``option`` set to ``value`` reads an optional input."""
    if option in TERM_DEFAULTS:
        return bool(required_inputs({option: value}))
    return option in ROLLOUT_READERS and value != CORRECTION_DEFAULTS[option]


def refuse_unsupplied(
    spec: LossSpec, framework: str, error: type[ValueError] = ValueError, hparams: Mapping[str, Any] | None = None
) -> None:
    """Raise ``error`` with ``refusal``'s reason when the adapter cannot call ``spec`` (with
    the loss-term options of ``hparams``)."""
    reason = refusal(spec, framework, hparams=hparams)
    if reason is not None:
        raise error(f"gmpo_plugins: {reason}")
