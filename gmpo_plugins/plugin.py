"""The API for writing a loss plugin: a plugin imports from this module only.

A plugin is a distribution that declares an entry point in the group ``gmpo_plugins``
pointing at a module with a ``gmpo_plugins_losses`` hook implementation::

    # pyproject.toml
    [project.entry-points.gmpo_plugins]
    my_losses = "my_package.losses"

    # my_package/losses.py
    from gmpo_plugins.plugin import (
        TOKEN_MEAN, BatchInfo, LossInputs, LossOutput, LossSpec, hookimpl, prepare, reduce_tokens,
    )

    def reinforce_loss(inputs: LossInputs, batch: BatchInfo) -> LossOutput:
        p = prepare(inputs, sequence_level=False)          # compute dtype, bool mask, (B, T) advantages
        loss = reduce_tokens(-p.advantages * p.log_probs, p.mask, batch, TOKEN_MEAN)
        return LossOutput(loss=loss, metrics={"policy_loss": loss.detach()})

    @hookimpl
    def gmpo_plugins_losses() -> list[LossSpec]:
        return [LossSpec(name="reinforce", fn=reinforce_loss, description="REINFORCE, token-mean")]

After ``pip install`` the loss is ``gmpo_plugins.get_loss("reinforce")``, appears in
``gmpo-plugins list`` and is available to every adapter (verl, OpenRLHF, TRL) by name.

What a loss receives and returns:

- ``LossInputs``: ``log_probs``, ``old_log_probs``, ``mask`` (B, T), ``advantages`` (B,)
  or (B, T), optional ``ref_log_probs`` (B, T) and ``rollout_is_weights`` (B, T) or (B,);
  validated before the call. The rollout correction's options (``rollout_is``, ...) are taken
  by the registry for every loss and applied to these inputs before the call (weights, mask,
  old log-probs), so a loss never sees them; on a sequence-level loss a (B, T) weight of 0 has
  already removed its token from ``mask``.
- ``BatchInfo``: ``dp_size`` and the global counts (``global_batch_size`` sequences,
  ``global_num_tokens`` tokens) that make micro-batch losses add up to the mini-batch
  loss; ``reduce_tokens`` / ``reduce_sequences`` apply them.
- ``LossOutput``: the scalar ``loss`` and a dict of detached scalar ``metrics``.
- Hyper-parameters arrive as keywords; ``LossSpec.defaults`` lists every one the function
  takes (``LossFn`` is the function's type).

Everything else in the package (``gmpo_plugins.core.*``, the adapters, compare, bench) is
internal: it may change between releases without notice.
"""

from gmpo_plugins.core.hookspecs import hookimpl
from gmpo_plugins.core.prepared import PreparedBatch, prepare
from gmpo_plugins.core.reduce import (
    REDUCTIONS,
    SEQ_MEAN_TOKEN_MEAN,
    SEQ_MEAN_TOKEN_SUM_NORM,
    TOKEN_MEAN,
    masked_mean,
    masked_sum,
    reduce_sequences,
    reduce_tokens,
)
from gmpo_plugins.core.spec import LossFn, LossSpec
from gmpo_plugins.core.types import BatchInfo, Clip, Impl, LossInputs, LossOutput, Reduction

__all__ = [
    "REDUCTIONS",
    "SEQ_MEAN_TOKEN_MEAN",
    "SEQ_MEAN_TOKEN_SUM_NORM",
    "TOKEN_MEAN",
    "BatchInfo",
    "Clip",
    "Impl",
    "LossFn",
    "LossInputs",
    "LossOutput",
    "LossSpec",
    "PreparedBatch",
    "Reduction",
    "hookimpl",
    "masked_mean",
    "masked_sum",
    "prepare",
    "reduce_sequences",
    "reduce_tokens",
]
