"""The one warning for a sequence-level loss run under a framework's default token-mean setting.

A sequence-level loss (the gmpo family, gspo) has its reduction fixed by the method: one
value per sequence, averaged over the sequences of the global batch. verl's and OpenRLHF's
default aggregation setting says ``token-mean``; the adapters accept it as that
per-sequence mean and say so once per process and loss (the framework's own entropy and
KL terms follow the setting, which is why it is worth setting explicitly).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, MutableSet
from typing import TypeVar

Key = TypeVar("Key", bound=Hashable)


def warn_token_mean_for_sequence_loss(
    logger: logging.Logger,
    warned: MutableSet[Key],
    key: Key,
    *,
    loss_setting: str,
    agg_setting: str,
    framework: str,
    consequence: str,
) -> None:
    """Log the warning once per ``key`` (recorded in ``warned``).

    Args:
        logger: the adapter's logger.
        warned: the adapter's set of keys already warned about in this process.
        key: what makes a warning distinct (e.g. the loss setting's value).
        loss_setting: the framework setting that chose the loss, e.g. ``loss_mode=gmpo``.
        agg_setting: the aggregation setting with ``{}`` for its value, e.g. ``--actor.loss_agg_mode {}``.
        framework: the framework's name, for "(verl's default)".
        consequence: what setting seq-mean-token-mean changes in the framework's own terms.
    """
    if key in warned:
        return
    warned.add(key)
    logger.warning(
        "gmpo_plugins: %s is sequence-level: its reduction is fixed by the method (a per-sequence value, "
        "averaged over the sequences of the global batch), so %s (%s's default) is treated as that "
        "per-sequence mean. Set %s to say so and silence this warning (%s).",
        loss_setting,
        agg_setting.format("token-mean"),
        framework,
        agg_setting.format("seq-mean-token-mean"),
        consequence,
    )
