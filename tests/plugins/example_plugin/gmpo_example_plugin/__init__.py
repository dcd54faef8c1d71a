"""An example loss plugin: plain REINFORCE with a token-mean, registered through the
``gmpo_plugins`` entry point of this distribution (see its pyproject.toml). It imports
only ``gmpo_plugins.plugin``, the API for plugin authors.

    L = -sum_{i,t} m_t * A_i * log pi_theta(o_t) / M * dp_size     (M: global valid tokens)
"""

from gmpo_plugins.plugin import (
    TOKEN_MEAN,
    BatchInfo,
    LossInputs,
    LossOutput,
    LossSpec,
    hookimpl,
    prepare,
    reduce_tokens,
)


def reinforce_loss(inputs: LossInputs, batch: BatchInfo) -> LossOutput:
    p = prepare(inputs, sequence_level=False)
    loss = reduce_tokens(-p.advantages * p.log_probs, p.mask, batch, TOKEN_MEAN)
    return LossOutput(loss=loss, metrics={"policy_loss": loss.detach()})


@hookimpl
def gmpo_plugins_losses() -> list[LossSpec]:
    return [LossSpec(name="example_reinforce", fn=reinforce_loss, description="REINFORCE, token-mean (example plugin)")]
