"""What in a registry loss's call reads the rollout engine's log-probs, and which core correction it applies.

An adapter passes the framework's rollout log-probs (B, T) as ``LossInputs.rollout_log_probs``
where the framework has them at the loss call site. Two refusals, by name, at the earliest
point the adapter knows the settings:

    missing  the loss requires them (``LossSpec.inputs_for``: ``decoupled_ppo``, ``m2po``) or a
             correction option set in the hyper-parameters reads them (``rollout_bypass``,
             ``rollout_is``, ``rollout_rs``: ``core.correction``), and the framework's setting
             that makes it pass them is off (``refuse_missing``)
    twice    the framework's own rollout IS correction is on, and the core applies one too: a
             correction option set in the hyper-parameters, or the loss's own correction
             defaults (``LossSpec.correction``); the two would correct for the rollout policy
             twice (``refuse_double``)

No torch, no framework import.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gmpo_plugins.core.correction import CORRECTION_DEFAULTS, split_correction
from gmpo_plugins.core.spec import LossSpec

FIELD = "rollout_log_probs"


def _set_options(hparams: Mapping[str, Any]) -> dict[str, Any]:
    """The correction options ``hparams`` sets away from their defaults."""
    return {
        key: value for key, value in hparams.items() if key in CORRECTION_DEFAULTS and value != CORRECTION_DEFAULTS[key]
    }


def rollout_readers(spec: LossSpec, hparams: Mapping[str, Any]) -> tuple[str, ...]:
    """What reads ``rollout_log_probs`` in a call of ``spec`` with ``hparams``: the loss's name
    when it requires them, and ``option=value`` for each set correction option that does
    (``rollout_bypass``, ``rollout_is``, ``rollout_rs``); empty when nothing does."""
    readers = [spec.name] if FIELD in spec.inputs_for(hparams) else []
    options = _set_options(hparams)
    for key in ("rollout_bypass", "rollout_is", "rollout_rs"):
        if key in options:
            readers.append(f"{key}={options[key]!r}")
    return tuple(readers)


def core_correction(spec: LossSpec, hparams: Mapping[str, Any]) -> str | None:
    """The core correction a call of ``spec`` with ``hparams`` applies, named as the user sets
    it (``"rollout_is='token'"``, ``"decoupled_ppo's own correction (rollout_is='token', ...)"``),
    or None when it applies none (``Correction.active`` is False)."""
    correction, _ = split_correction({**spec.correction, **hparams})
    if not correction.active:
        return None
    given = _set_options(hparams)
    parts = [f"{key}={value!r}" for key, value in given.items() if key != "rollout_mask_count"]
    own = {key: value for key, value in spec.correction.items() if key not in given}
    if own:
        listed = ", ".join(f"{key}={value!r}" for key, value in own.items())
        parts.append(f"{spec.name}'s own correction ({listed})")
    return " and ".join(parts)


def refuse_missing(
    spec: LossSpec, hparams: Mapping[str, Any], *, framework: str, setting: str, error: type[ValueError]
) -> None:
    """Raise ``error`` naming what reads the rollout log-probs and the framework ``setting``
    that makes the framework pass them, when something does (``rollout_readers``)."""
    readers = rollout_readers(spec, hparams)
    if readers:
        raise error(
            f"gmpo_plugins: {' and '.join(readers)} needs the rollout engine's log-probs (rollout_log_probs), "
            f"which {framework} passes to the loss only with {setting}"
        )


def refuse_double(
    spec: LossSpec, hparams: Mapping[str, Any], *, own: str, error: type[ValueError], instead: str = ""
) -> None:
    """Raise ``error`` naming the framework's correction ``own`` and the core's
    (``core_correction``) when the core applies one; ``instead`` ends the message (how to keep
    only one)."""
    core = core_correction(spec, hparams)
    if core is not None:
        raise error(
            f"gmpo_plugins: {own} (the framework's rollout IS correction) and {core} (the registry's) would both "
            f"correct for the rollout policy, twice; use one of them{instead}"
        )
