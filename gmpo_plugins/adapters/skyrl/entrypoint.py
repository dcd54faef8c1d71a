r"""SkyRL's own training entry point with the registry losses registered first.

    python -m gmpo_plugins.adapters.skyrl <SkyRL overrides>
    python -m skyrl.train.entrypoints.main_base \\
        trainer.override_entrypoint=gmpo_plugins.adapters.skyrl.entrypoint <SkyRL overrides>

Both register the losses in the driver, then run ``skyrl.train.entrypoints.main_base.main``
with the same overrides (``trainer.override_entrypoint`` removed: it is SkyRL's hook for
this, not a config field). The Ray runtime env SkyRL builds also carries this driver's
``GMPO_PLUGINS_LOSS_HPARAMS`` (``forward_loss_hparams``). SkyRL's ``initialize_ray`` then pushes the registry to its Ray
registry actor, where every worker finds it. ``--names`` prints which
``policy_loss_type`` runs which registry loss.

Before SkyRL starts Ray, the overrides are read into SkyRL's config, validated by SkyRL
(``validate_cfg``) and by the selected registry loss (``check_config``): a setting the loss
cannot honour (``loss_reduction`` it cannot express, ``eps_clip_low=0`` with gmpo, a loss or
correction option that reads the rollout log-probs, or ``cispo.cispo_anchor=rollout``, with
``generator.sampling_params.logprobs=null``, ...) or a
``policy_loss_type`` nobody registered exits with status 2 and one line naming the setting,
within seconds, instead of failing at the loss's first call inside a Ray worker. So does a
SkyRL whose trainer no longer pre-scales the advantages as the adapter relies on
(``prescaling``), checked only when ``policy_loss_type`` selects a registry loss: a run of
SkyRL's own losses is not affected.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from typing import Any

from gmpo_plugins.adapters.hparam_sources import forward_override
from gmpo_plugins.adapters.skyrl.options import SkyRLConfigError, hparams_from_config, refuse_no_rollout
from gmpo_plugins.adapters.skyrl.prescaling import check_prescaling
from gmpo_plugins.adapters.skyrl.registration import SkyRLName, is_ours, register_losses
from gmpo_plugins.adapters.upstream import UpstreamDriftError
from gmpo_plugins.core.registry import get_loss

OVERRIDE = "trainer.override_entrypoint="


def table(names: Sequence[SkyRLName]) -> str:
    """One line per registry loss: the policy_loss_type values that select it."""
    lines = ["registry loss     SkyRL trainer.algorithm.policy_loss_type"]
    for name in names:
        if name.bare is not None:
            types = f"{name.bare}  or  {name.prefixed}"
        else:
            types = f"{name.prefixed}  ('{name.loss}' alone is {name.taken_by})"
        lines.append(f"{name.loss:<17} {types}")
    return "\n".join(lines)


def check_config(cfg: Any) -> None:
    """Validate SkyRL's config ``cfg`` as SkyRL does, then, when ``policy_loss_type`` selects a
    registry loss, translate its settings as the loss will (``hparams_from_config``).

    Raises SkyRL's own error (ValueError, AssertionError, ...) for a setting SkyRL refuses,
    SkyRLConfigError naming the SkyRL field the loss cannot honour, or UpstreamDriftError when
    SkyRL's trainer no longer pre-scales the advantages (``prescaling``).
    """
    from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry
    from skyrl.train.utils import validate_cfg

    validate_cfg(cfg)
    name = cfg.trainer.algorithm.policy_loss_type
    loss = PolicyLossRegistry.get(name)
    if is_ours(loss):
        spec = get_loss(loss.loss)
        hparams = hparams_from_config(spec, cfg.trainer.algorithm, name)
        if cfg.generator.sampling_params.logprobs is None:  # the engine returns no rollout log-probs
            refuse_no_rollout(spec, hparams, cfg.trainer.algorithm, name)
        check_prescaling()


def forward_loss_hparams() -> None:
    """Make SkyRL's ``initialize_ray`` put this driver's GMPO_PLUGINS_LOSS_HPARAMS into the Ray
    runtime env's ``env_vars`` (``hparam_sources.forward_override``), for workers on any node."""
    from skyrl.train.utils import utils

    prepare = utils.prepare_runtime_environment
    if getattr(prepare, "__gmpo_plugins_forwards__", False):
        return

    @functools.wraps(prepare)
    def prepare_runtime_environment(cfg: Any) -> dict[str, str]:
        return forward_override(prepare(cfg))

    prepare_runtime_environment.__gmpo_plugins_forwards__ = True  # type: ignore[attr-defined]
    utils.prepare_runtime_environment = prepare_runtime_environment


def main(argv: Sequence[str] | None = None) -> None:
    """Register, check the config, then run SkyRL's ``main_base.main()`` on ``argv`` (default
    ``sys.argv[1:]``); exit status 2 with one line for a configuration that ``check_config`` refuses."""
    args = list(sys.argv[1:] if argv is None else argv)
    names = register_losses(check_trainer=False)  # checked by check_config, for registry losses only
    if args == ["--names"]:
        print(table(names))
        return
    from skyrl.train.config import SkyRLTrainConfig
    from skyrl.train.entrypoints.main_base import main as skyrl_main

    overrides = [arg for arg in args if not arg.startswith(OVERRIDE)]
    try:
        check_config(SkyRLTrainConfig.from_cli_overrides(overrides))
    except (AssertionError, ValueError, TypeError, SkyRLConfigError, UpstreamDriftError) as exc:
        print(f"python -m gmpo_plugins.adapters.skyrl: invalid configuration: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    sys.argv = [sys.argv[0], *overrides]
    forward_loss_hparams()
    skyrl_main()
