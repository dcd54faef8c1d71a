"""The SkyRL releases the adapter serves and what differs between them, one row per release.

    release  cispo.cispo_eps_clip_low  cispo.cispo_eps_clip_high  CISPO band  cispo.cispo_anchor
    0.3      0.0                       5.0                        [1, 6]      (no such field)
    0.4      1.0                       4.0                        [0, 5]      "old" (or "rollout")

SkyRL's CISPO clamps the ratio to [1 - cispo_eps_clip_low, 1 + cispo_eps_clip_high] in both.
``options`` builds its field table from the row of the installed release (``installed``):
the defaults above label a value as SkyRL's default, and a release's default low (and any low
>= 1, a lower bound <= 0 that never binds) reads as the registry cispo's no lower clip.

The rest of what the adapter relies on is the same in both: ``PolicyLossRegistry`` and its 11
built-in loss types, the worker's loss call ``fn(log_probs, old_log_probs, advantages,
config=, loss_mask=, rollout_logprobs=)`` (0.4's ``loss_mask`` is float 0/1, 0.3's an integer
0/1: the core accepts both), and the advantage pre-scaling (``prescaling`` checks it on the
installed trainer). What 0.4 renamed elsewhere (``Experience.action_mask`` ->
``response_mask``, the Megatron wrapper's loss function) the adapter does not read.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from gmpo_plugins.adapters.upstream import installed_version, release_numbers


@dataclass(frozen=True)
class SkyRLRelease:
    """What the adapter reads differently in one SkyRL minor release (module docstring).

    minor                 ``"0.4"``: the release line this row serves
    cispo_eps_clip_low    the default of ``trainer.algorithm.cispo.cispo_eps_clip_low``
    cispo_eps_clip_high   the default of ``trainer.algorithm.cispo.cispo_eps_clip_high``
    cispo_anchor          the default of ``trainer.algorithm.cispo.cispo_anchor``; None where
                          the release has no such field
    """

    minor: str
    cispo_eps_clip_low: float
    cispo_eps_clip_high: float
    cispo_anchor: str | None


RELEASES = (
    SkyRLRelease("0.3", cispo_eps_clip_low=0.0, cispo_eps_clip_high=5.0, cispo_anchor=None),
    SkyRLRelease("0.4", cispo_eps_clip_low=1.0, cispo_eps_clip_high=4.0, cispo_anchor="old"),
)
"""Oldest first; the last row is the current release."""


def release_for(version: str | None) -> SkyRLRelease:
    """The row serving SkyRL ``version``: the newest release at or below it (a later release,
    outside the tested range, is read as the newest row; an older one as the oldest), the
    newest row when SkyRL is not installed (None)."""
    if version is None:
        return RELEASES[-1]
    at_or_below = [row for row in RELEASES if release_numbers(row.minor) <= release_numbers(version)]
    return at_or_below[-1] if at_or_below else RELEASES[0]


@functools.cache
def installed() -> SkyRLRelease:
    """The row serving the installed SkyRL (``release_for``; looked up once per process)."""
    return release_for(installed_version("skyrl"))
