"""Proof, on the first training step, that the loss TRL back-propagates is the registry's,
decided before any weight changes.

``RegistryGRPOTrainer`` overrides GRPOTrainer's private ``_compute_loss``. A TRL release
that routes the loss around it (releases before 1.x did for ``use_liger_kernel``), or that
back-propagates another tensor, would train TRL's own loss without a word. So the first
``training_step`` runs with a ``LossProof``:

    _compute_loss          watch(out.loss): the autograd node of the registry loss (0-dim)
    accelerator.backward   check(loss) before the backward pass runs: the registry loss was
                           computed AND the tensor TRL back-propagates (whatever it scaled or
                           added) reaches that node through its autograd graph; otherwise
                           ``UpstreamDriftError`` naming the TRL version
    training_step end      verify(): the step went through ``accelerator.backward``

The decision comes before the backward pass, so before any optimiser step, also where the step
is taken inside ``accelerator.backward`` (accelerate steps a DeepSpeed engine there at the
accumulation boundary, so with ``gradient_accumulation_steps=1`` a check made after the
backward pass would come after the first update). ``RegistryGRPOTrainer`` intercepts
``accelerator.backward`` on its own accelerator for the first step only. Later steps run
without the proof (no cost).
"""

from __future__ import annotations

import torch

from gmpo_plugins.adapters.upstream import TESTED, UpstreamDriftError, framework_version


def depends_on(tensor: torch.Tensor, node: object) -> bool:
    """Whether the autograd graph of ``tensor`` reaches ``node`` (an autograd node, ``grad_fn``):
    a walk over ``next_functions`` from ``tensor.grad_fn``, each node visited once."""
    stack, seen = [tensor.grad_fn], set()
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        if current is node:
            return True
        seen.add(id(current))
        stack.extend(following for following, _ in current.next_functions)
    return False


class LossProof:
    """Whether the registry loss of one training step was computed and is what TRL back-propagates."""

    def __init__(self, loss: str) -> None:
        self.loss = loss
        self.computed = False
        self.node: object = None
        self.checked = False

    def watch(self, loss: torch.Tensor) -> None:
        """Record the registry loss tensor (0-dim) of this step."""
        self.computed = True
        self.node = loss.grad_fn

    def check(self, backpropagated: torch.Tensor) -> None:
        """Before the backward pass of ``backpropagated``: raise UpstreamDriftError unless it
        depends on the registry loss of this step."""
        self.checked = True
        if not self.computed:
            self._refuse(
                "GRPOTrainer.compute_loss never called RegistryGRPOTrainer._compute_loss (the loss is routed around it)"
            )
        if self.node is None or not depends_on(backpropagated, self.node):
            self._refuse(
                "the tensor TRL back-propagates does not depend on the registry loss RegistryGRPOTrainer returned"
            )

    def verify(self) -> None:
        """After the step (``training_step`` returns before the optimizer steps): raise
        UpstreamDriftError unless its backward pass went through ``check``."""
        if not self.checked:
            self._refuse(
                "the training step did not back-propagate through accelerator.backward (the loss cannot be checked)",
                "before the optimizer step",
            )

    def _refuse(self, what: str, when: str = "before the backward pass and any optimizer step") -> None:
        raise UpstreamDriftError(
            f"gmpo_plugins: in the first training step of {framework_version('trl')}, {what}, so TRL's own loss "
            f"would train instead of the registry loss {self.loss!r}. Refused {when}; the TRL adapter is tested "
            f"with trl{TESTED['trl'].specifier}"
        )
