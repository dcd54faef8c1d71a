"""Check a verl actor config's policy-loss settings before training starts.

verl looks ``loss_mode`` up and the adapter reads the actor fields only at the first actor
update, after Ray, the workers and the first rollout have started. ``check_policy_loss``
does both lookups up front on the composed config, so a launcher can fail in seconds:

    actor = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    check_policy_loss(actor)   # VerlConfigError naming the verl setting, or None
"""

from __future__ import annotations

from typing import Any

from gmpo_plugins.adapters.load_failure import STAND_IN
from gmpo_plugins.adapters.verl.options import ACTOR, VerlConfigError, hparams_from_config
from gmpo_plugins.adapters.verl.policy_loss import MARKER
from gmpo_plugins.core.registry import get_loss


def check_policy_loss(actor_config: Any) -> None:
    """Raise VerlConfigError if verl would refuse ``policy_loss.loss_mode`` (its message, which
    lists the valid names), if the name is a stand-in that would raise at the first update (a
    name two distributions claim, or a package that failed to load: its message), or a
    gmpo-plugins loss cannot honour the actor's fields.

    Args:
        actor_config: verl's actor dataclass (e.g. ``FSDPActorConfig``).
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
