"""``LossSpec``: one registered loss, callable as the functional API.

A loss function has the signature ``fn(inputs: LossInputs, batch: BatchInfo, **hparams)
-> LossOutput``; its spec adds the name, a one-line description, the default
hyper-parameters (which are also the complete list of accepted ones) and what the loss
requires of its inputs.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Optional, Protocol

from gmpo_plugins.core.hparams import check_hparams
from gmpo_plugins.core.types import BatchInfo, LossInputs, LossOutput
from gmpo_plugins.core.validation import validate_batch_info, validate_inputs


class LossFn(Protocol):
    """What ``LossSpec.fn`` is: ``fn(inputs, batch, **hparams) -> LossOutput``.

    The registry calls it with ``inputs`` and ``batch`` positionally and every
    hyper-parameter of ``LossSpec.defaults`` (updated by the caller's overrides, already
    checked) as a keyword, so a loss declares its hyper-parameters as keyword arguments
    (or takes ``**hparams``) and ``LossSpec.defaults`` lists all of them. The type checks
    the two positional arguments and the result; keywords are checked by the registry.
    """

    def __call__(self, inputs: LossInputs, batch: BatchInfo, /, *args: Any, **hparams: Any) -> LossOutput:
        """The micro-batch loss of ``inputs`` normalised by ``batch`` (``LossOutput``)."""
        ...


@dataclass(frozen=True)
class LossSpec:
    """A loss with its metadata.

    name            registry name, e.g. ``"gmpo"``
    fn              ``fn(inputs, batch, **hparams) -> LossOutput``
    description     one line for ``gmpo-plugins list``
    defaults        default hyper-parameters; no other keyword is accepted
    sequence_level  advantages must be one per sequence ((B,) or row-constant (B, T))
    clip_space      ``"log"`` when eps bound the log ratio (GMPO family), ``"ratio"``
                    when they bound the ratio itself (PPO/GRPO/GSPO), None without clip
    reductions      values accepted by the ``reduction`` hyper-parameter, if any
    provider        distribution that registered it (filled in by the registry)
    """

    name: str
    fn: LossFn
    description: str
    defaults: Mapping[str, Any] = field(default_factory=dict)
    sequence_level: bool = False
    clip_space: Optional[Literal["log", "ratio"]] = None
    reductions: tuple[str, ...] = ()
    provider: str = ""

    def resolve(self, overrides: Mapping[str, Any]) -> dict[str, Any]:
        """Defaults updated with ``overrides``; unknown names raise TypeError with the valid ones."""
        unknown = [key for key in overrides if key not in self.defaults]
        if unknown:
            hints = "".join(
                f" (did you mean {close[0]!r} for {key!r}?)"
                for key in unknown
                if (close := difflib.get_close_matches(key, list(self.defaults), n=1))
            )
            raise TypeError(
                f"{self.name}: unknown hyper-parameter(s) {unknown}; valid: {sorted(self.defaults)}{hints}"
            )
        params = {**self.defaults, **overrides}
        check_hparams(self.name, params, reductions=self.reductions, ratio_space=self.clip_space == "ratio")
        return params

    def __call__(
        self,
        inputs: LossInputs,
        batch: Optional[BatchInfo] = None,
        *,
        validate: bool = True,
        **hparams: Any,
    ) -> LossOutput:
        """Compute the loss of one micro-batch.

        Hyper-parameters and the structure of the inputs (types, dtypes, shapes, devices)
        are always checked; no tensor is read for that. validate=True also checks values
        (finite, 0/1 mask, one advantage per sequence), which synchronises with the device;
        with validate=False the call never synchronises.
        """
        params = self.resolve(hparams)
        batch = BatchInfo() if batch is None else batch
        validate_inputs(inputs, sequence_level=self.sequence_level, values=validate)
        validate_batch_info(batch, values=validate)
        return self.fn(inputs, batch, **params)
