"""Check a verl config's policy-loss settings before training starts.

verl looks ``loss_mode`` up and the adapter reads the actor fields only at the first actor
update, after Ray, the workers and the first rollout have started. ``check_policy_loss``
does both lookups up front on the composed config, so a launcher can fail in seconds:

    actor = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    check_policy_loss(actor, config.algorithm.get("rollout_correction"))
    # VerlConfigError naming the verl setting, or None

``algorithm.rollout_correction`` under a registry ``loss_mode`` (verl 0.9.1, v1 and legacy
trainer; what the loss receives):

    decoupled (bypass_mode=false)  verl recomputes old_log_prob with the actor, computes the
                                   IS weights (rollout_is) and the rejection mask (rollout_rs)
                                   from old_log_prob - rollout_log_probs and passes them as
                                   ``rollout_is_weights`` and ``response_mask``: the registry
                                   loss multiplies by the weights once and averages over the
                                   mask; nothing is applied a second time.
    bypass (bypass_mode=true)      verl passes old_log_prob = the rollout log-probs, no IS
                                   weights, no rejection mask, and calls the configured
                                   ``loss_mode`` (not its bypass loss): rollout_is, rollout_rs
                                   and loss_type=reinforce would be ignored, so they are
                                   refused; loss_type=ppo_clip (verl's default) is what the
                                   registry loss computes with its own ratio clipping.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gmpo_plugins.adapters.load_failure import STAND_IN
from gmpo_plugins.adapters.verl.options import ACTOR, VerlConfigError, hparams_from_config
from gmpo_plugins.adapters.verl.policy_loss import MARKER
from gmpo_plugins.core.registry import get_loss

CORRECTION = "algorithm.rollout_correction"
BYPASS_LOSS_TYPE = "ppo_clip"  # verl's bypass loss_type that a registry loss's own clipped ratio computes


def _get(config: Any, key: str, default: Any = None) -> Any:
    if isinstance(config, Mapping):
        return config.get(key, default)
    return getattr(config, key, default)


def check_rollout_correction(rollout_correction: Any, loss_mode: str) -> None:
    """Refuse ``algorithm.rollout_correction`` settings that verl would not apply to the registry
    loss ``loss_mode`` (bypass mode's rollout_is, rollout_rs and loss_type other than ppo_clip;
    module docstring). ``rollout_correction``: verl's config node or dataclass, or None."""
    if rollout_correction is None or not _get(rollout_correction, "bypass_mode", False):
        return
    ignored = []
    for key in ("rollout_is", "rollout_rs"):
        if _get(rollout_correction, key) is not None:
            ignored.append(f"{CORRECTION}.{key}={_get(rollout_correction, key)}")
    loss_type = _get(rollout_correction, "loss_type", BYPASS_LOSS_TYPE)
    if loss_type != BYPASS_LOSS_TYPE:
        ignored.append(f"{CORRECTION}.loss_type={loss_type}")
    if ignored:
        raise VerlConfigError(
            f"gmpo_plugins: {', '.join(ignored)} with {CORRECTION}.bypass_mode=true would be ignored under "
            f"{ACTOR}.policy_loss.loss_mode={loss_mode}: in bypass mode verl calls the registry loss with the "
            "rollout log-probs as old_log_prob, no IS weights and no rejection mask, and never runs its bypass "
            f"loss. Set them to null (and loss_type={BYPASS_LOSS_TYPE}: the registry loss's own clipped ratio "
            f"against the rollout policy), or use decoupled mode ({CORRECTION}.bypass_mode=false), where verl "
            "passes its IS weights and rejection mask to the loss."
        )


def check_policy_loss(actor_config: Any, rollout_correction: Any = None) -> None:
    """Raise VerlConfigError if verl would refuse ``policy_loss.loss_mode`` (its message, which
    lists the valid names), if the name is a stand-in that would raise at the first update (a
    name two distributions claim, or a package that failed to load: its message), or a
    gmpo-plugins loss cannot honour the actor's fields or ``rollout_correction``
    (``check_rollout_correction``).

    Args:
        actor_config: verl's actor dataclass (e.g. ``FSDPActorConfig``).
        rollout_correction: verl's ``algorithm.rollout_correction`` (config node, dataclass or None).
    """
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    loss_mode = actor_config.policy_loss.get("loss_mode", "vanilla")
    try:
        fn = get_policy_loss_fn(loss_mode)
    except ValueError as error:
        raise VerlConfigError(f"{ACTOR}.policy_loss.loss_mode={loss_mode}: {error}") from None
    refusal = getattr(fn, STAND_IN, None)
    if refusal is not None:
        raise VerlConfigError(f"{ACTOR}.policy_loss.loss_mode={loss_mode}: {refusal}")
    name = getattr(fn, MARKER, None)
    if name is not None:
        hparams_from_config(get_loss(name), actor_config, actor_config.loss_agg_mode, loss_mode)
        check_rollout_correction(rollout_correction, loss_mode)
