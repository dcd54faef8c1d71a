"""Proof, on the first training step, that the loss TRL back-propagated is the registry's.

``RegistryGRPOTrainer`` overrides GRPOTrainer's private ``_compute_loss``. A TRL release
that routes the loss around it (releases before 1.x did for ``use_liger_kernel``), or that
back-propagates another tensor, would train TRL's own loss without a word. So the first
``training_step`` runs with a ``LossProof``:

    _compute_loss      watch(out.loss): a hook on the registry loss tensor (0-dim), which
                       autograd calls when a backward pass goes through it
    training_step end  verify(): the registry loss was computed AND the backward pass TRL
                       ran (``accelerator.backward``, whatever it scaled or added) reached it;
                       otherwise ``UpstreamDriftError`` naming the TRL version

``training_step`` returns before the optimizer steps, so a refused step has changed no
weight. Later steps run without the proof (no cost).
"""

from __future__ import annotations

import torch

from gmpo_plugins.adapters.upstream import TESTED, UpstreamDriftError, framework_version


class LossProof:
    """Whether the registry loss of one training step was computed and back-propagated."""

    def __init__(self, loss: str) -> None:
        self.loss = loss
        self.computed = False
        self.reached = False

    def watch(self, loss: torch.Tensor) -> None:
        """Record the registry loss tensor (0-dim) of this step."""
        self.computed = True
        if loss.requires_grad:
            loss.register_hook(self._reached)

    def _reached(self, grad: torch.Tensor) -> None:
        self.reached = True

    def verify(self) -> None:
        """Raise UpstreamDriftError unless the registry loss was computed and back-propagated."""
        if self.computed and self.reached:
            return
        if not self.computed:
            what = (
                "GRPOTrainer.compute_loss never called RegistryGRPOTrainer._compute_loss (the loss is routed around it)"
            )
        else:
            what = "the tensor TRL back-propagated does not depend on the registry loss RegistryGRPOTrainer returned"
        raise UpstreamDriftError(
            f"gmpo_plugins: in the first training step of {framework_version('trl')}, {what}, so TRL's own loss "
            f"would train instead of the registry loss {self.loss!r}. Refused before the optimizer step; the TRL "
            f"adapter is tested with trl{TESTED['trl'].specifier}"
        )
