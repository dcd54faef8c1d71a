"""A loss fed one NaN advantage, to see what OpenRLHF's trainer does with a non-finite gradient
(test-only; never shipped).

``--actor.policy_loss_type nonfinite_gmpo`` is the registry's ``gmpo`` (its spec, under another name)
whose function gets the advantage of the first valid token of the micro-batch's first row replaced by
NaN: a bad input at a valid position, as a broken reward or advantage estimator would give. The
registry's rule makes the loss and the gradient NaN.

A gmpo_plugins plugin: the run declares this module as an entry point of the ``gmpo_plugins`` group in
a temporary ``.dist-info`` folder on its ``PYTHONPATH`` (``tests.broken_plugins.distribution``), which
Ray passes on to its workers, so the registry of every process (the driver's ``gmpo-openrlhf`` and
``PolicyModelActor``) lists it.

Forced non-default path: the run sets ``GMPO_PLUGINS_VALIDATE=never`` in its environment, the state
of every call after a process's first. On the default path the adapter's first call in a process
checks values and raises: naming the input where the NaN comes in with the inputs (as at every
adapter's call site: tests/core/test_nonfinite.py), and here, where the NaN comes in inside the loss
after that check, with the registry's LossResultError on the loss's non-finite result. Setting the
variable inside the loss, as the verl and SkyRL stand-ins do, would be too late: the adapter asks
whether to check before it calls the loss. Only this run calls this loss.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gmpo_plugins.core.losses.gmpo import GMPO
from gmpo_plugins.plugin import BatchInfo, LossInputs, LossOutput, hookimpl

NAME = "nonfinite_gmpo"
ENTRY_POINTS = f"[gmpo_plugins]\nnonfinite = {__name__}\n"


def nonfinite_gmpo(inputs: LossInputs, batch: BatchInfo, **hparams: Any) -> LossOutput:
    column = int(inputs.mask[0].nonzero()[0, 0])
    advantages = inputs.advantages.clone()  # OpenRLHF's are per token, (B, A)
    advantages[0, column] = float("nan")
    return GMPO.fn(dataclasses.replace(inputs, advantages=advantages), batch, **hparams)


@hookimpl
def gmpo_plugins_losses():
    description = "gmpo with one NaN advantage per micro-batch (test-only)"
    return [dataclasses.replace(GMPO, name=NAME, fn=nonfinite_gmpo, description=description, native=())]
