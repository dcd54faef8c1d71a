"""The verl releases the adapter serves and what differs between them, one row per release.

    release  policy_loss.dro_beta   verl.plugins entry points    loss_agg_mode token-sum
    0.8      (no such field)        not loaded                   refused by verl's config
    0.9      null (verl requires    loaded at ``import verl``    accepted
             it for its own dro)

``gmpo_plugins.adapters.verl.options`` builds its field table from the row of the installed
release (``installed``): on 0.8 there is no ``policy_loss.dro_beta`` to read, so the registry's
``dro`` takes ``dro_beta`` from ``GMPO_PLUGINS_LOSS_HPARAMS`` or its own default (0.1), and its
provenance line says which; bare ``dro`` is then the registry's loss, as verl 0.8 ships no ``dro``
of its own. ``compare.audit.translations`` reads the same row (0.8: no ``dro``, no ``token-sum``).
Importable without verl (the newest row serves when verl is not installed).

0.8 does not import the ``verl.plugins`` entry points (0.9's ``verl/__init__.py`` does), so the
losses are registered only where a module of this package is imported: verl's
``VERL_USE_EXTERNAL_MODULES`` (in the driver and, inherited, every worker) naming
``gmpo_plugins.adapters.verl_plugin`` (the entry point's module: the losses, and the policy-loss
check in verl's ``validate_config``, ``verl_driver_check``) or ``gmpo_plugins.adapters.verl`` (the
losses only), or ``actor_rollout_ref.model.external_lib=gmpo_plugins.adapters.verl`` (the workers).
Without the check the same errors come at the first actor update.

The rest of what the adapter relies on is the same in both: ``ppo_loss``
(``verl/workers/utils/losses.py``, the only policy-loss call site) and the counts it writes into
``config.global_batch_info`` before every call, ``POLICY_LOSS_REGISTRY`` /
``get_policy_loss_fn``, the loss's keyword signature and its ``(loss, metrics)`` return, and
the actor fields of ``options`` other than ``dro_beta``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from gmpo_plugins.adapters.upstream import installed_version, release_numbers


@dataclass(frozen=True)
class VerlRelease:
    """What differs in one verl minor release (module docstring).

    minor            ``"0.9"``: the release line this row serves
    dro_beta         whether ``PolicyLossConfig`` has ``dro_beta`` (verl ships its own ``dro``)
    entry_points     whether ``import verl`` imports the ``verl.plugins`` entry points
    token_sum        whether verl's actor config accepts ``loss_agg_mode=token-sum``
    """

    minor: str
    dro_beta: bool
    entry_points: bool
    token_sum: bool


RELEASES = (
    VerlRelease("0.8", dro_beta=False, entry_points=False, token_sum=False),
    VerlRelease("0.9", dro_beta=True, entry_points=True, token_sum=True),
)
"""Oldest first; the last row is the current release."""


def release_for(version: str | None) -> VerlRelease:
    """The row serving verl ``version``: the newest release at or below it (a later release,
    outside the tested range, is read as the newest row; an older one as the oldest), the
    newest row when verl is not installed (None)."""
    if version is None:
        return RELEASES[-1]
    at_or_below = [row for row in RELEASES if release_numbers(row.minor) <= release_numbers(version)]
    return at_or_below[-1] if at_or_below else RELEASES[0]


@functools.cache
def installed() -> VerlRelease:
    """The row serving the installed verl (``release_for``; looked up once per process)."""
    return release_for(installed_version("verl"))
