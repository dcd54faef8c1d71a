"""SkyRL ``trainer.algorithm`` config -> registry-loss hyper-parameters, advantages and
``BatchInfo`` (no SkyRL import).

SkyRL calls a policy loss with its ``AlgorithmConfig`` (``config``). Translation
(``SKYRL_FIELDS``, ``hparam_sources``), for each loss that declares the hyper-parameter in
its spec (``spec.defaults``):

    eps_low     <- trainer.algorithm.eps_clip_low    log space for clip_space "log" (gmpo
    eps_high    <- trainer.algorithm.eps_clip_high   family: ratio kept in (e^-eps_low,
                                                     e^eps_high), paper value 0.4), ratio
                                                     space for "ratio" (grpo/dapo/dr_grpo/gspo)
    reduction   <- trainer.algorithm.loss_reduction  token_mean              -> token-mean
                                                     sequence_mean           -> seq-mean-token-mean
                                                     seq_mean_token_sum_norm -> seq-mean-token-sum-norm
    norm_length <- trainer.algorithm.max_seq_len     (seq_mean_token_sum_norm only)

Every other hyper-parameter comes from ``GMPO_PLUGINS_LOSS_HPARAMS`` (our entry point
forwards it to the Ray workers) or keeps its registry default: ``kl_beta`` stays 0 (SkyRL
adds its own KL term when ``use_kl_loss`` is set) and ``dual_clip`` stays None (SkyRL
applies ``clip_ratio_c`` only to its own ``dual_clip`` loss). The override cannot change
``reduction`` or ``norm_length``: SkyRL scales the advantages by ``loss_reduction`` and
``max_seq_len`` before the loss sees them. ``prompt_mean`` and
``token_mean_legacy`` have no core reduction and are refused. Sequence-level losses (the
gmpo family, gspo) have their reduction fixed by the method, a mean over sequences: they
accept ``sequence_mean`` only.

Normalisation. SkyRL's trainer scales the advantages of each global mini-batch before the
workers see them (``apply_loss_reduction_to_advantages_minibatch``), a loss returns a SUM
over its micro-batch's tokens, and the worker multiplies that sum by ``dp_size`` before the
data-parallel gradient average. With N sequences and M valid tokens in the global
mini-batch, |o_i| the valid tokens of sequence i and L = ``max_seq_len``:

    token_mean               A'_t = A_t / M              core advantages  A'            = A / M
    sequence_mean            A'_t = A_t / (N |o_i|)      core advantages  A' |o_i|      = A / N
    seq_mean_token_sum_norm  A'_t = A_t / (N L)          core advantages  A' L          = A / N

and the core is called with ``BatchInfo(dp_size=1, global_batch_size=1,
global_num_tokens=1)``: the global counts are already in the advantages. Every registry
policy-gradient term is positively homogeneous of degree 1 in the advantages (its clip
decisions depend on their signs only, which the scaling keeps), so

    core(A / N, counts 1) = core(A, global_batch_size=N)      (resp. M for token-mean)

which summed over micro-batches and ranks (``dp_size`` applied by SkyRL) is the core's
whole-mini-batch loss and gradient. N counts every row of the mini-batch, as SkyRL does
(the ``global_batch_size`` a framework passes to the core).
"""

from __future__ import annotations

from typing import Any

import torch

from gmpo_plugins.adapters.hparam_sources import ABSENT, Field, Resolution, announce, attribute, resolve
from gmpo_plugins.core.reduce import SEQ_MEAN_TOKEN_MEAN, SEQ_MEAN_TOKEN_SUM_NORM, TOKEN_MEAN
from gmpo_plugins.core.spec import LossSpec
from gmpo_plugins.core.types import BatchInfo

ALGORITHM = "trainer.algorithm"
TOKEN = "token_mean"
SEQUENCE = "sequence_mean"
SUM_NORM = "seq_mean_token_sum_norm"
CORE_REDUCTION = {TOKEN: TOKEN_MEAN, SEQUENCE: SEQ_MEAN_TOKEN_MEAN, SUM_NORM: SEQ_MEAN_TOKEN_SUM_NORM}


def _max_seq_len(config: Any) -> Any:
    """max_seq_len under seq_mean_token_sum_norm (the constant SkyRL scales advantages by)."""
    return getattr(config, "max_seq_len", None) if getattr(config, "loss_reduction", None) == SUM_NORM else ABSENT


SKYRL_FIELDS = (  # trainer.algorithm field -> registry hyper-parameter (SkyRL 0.3 defaults)
    Field("eps_low", f"{ALGORITHM}.eps_clip_low", 0.2, attribute("eps_clip_low")),
    Field("eps_high", f"{ALGORITHM}.eps_clip_high", 0.2, attribute("eps_clip_high")),
    Field(
        "reduction",
        f"{ALGORITHM}.loss_reduction",
        TOKEN,
        attribute("loss_reduction"),
        convert=CORE_REDUCTION.__getitem__,
        overridable=False,
    ),
    Field(
        "norm_length",
        f"{ALGORITHM}.max_seq_len",
        None,
        _max_seq_len,
        overridable=False,
        when="loss_reduction=seq_mean_token_sum_norm",
    ),
)
FIELDS = {row.hparam: row.name.removeprefix(f"{ALGORITHM}.") for row in SKYRL_FIELDS}


class SkyRLConfigError(ValueError):
    """A SkyRL ``trainer.algorithm`` setting the chosen registry loss cannot honour."""


def _field(name: str) -> str:
    return f"{ALGORITHM}.{name}"


def accepted_reductions(spec: LossSpec) -> list[str]:
    """The ``loss_reduction`` values ``spec`` accepts, in SkyRL's names."""
    if spec.sequence_level:
        return [SEQUENCE]
    if "reduction" not in spec.defaults:
        return [TOKEN]
    return [name for name, core in CORE_REDUCTION.items() if core in spec.reductions]


def _reduction(spec: LossSpec, config: Any, policy_loss_type: str) -> str:
    """SkyRL's ``loss_reduction`` checked against ``spec`` (SkyRLConfigError otherwise)."""
    value = getattr(config, "loss_reduction", None)
    accepted = accepted_reductions(spec)
    if value in accepted:
        return value
    field = _field("loss_reduction")
    hint = ""
    if value not in CORE_REDUCTION:
        why = f"{value!r} has no gmpo-plugins reduction (token_mean, sequence_mean and seq_mean_token_sum_norm do)"
    elif spec.sequence_level:
        why = f"{spec.name} is sequence-level: its reduction is fixed by the method, a mean over sequences"
    else:
        why = f"{spec.name} is defined by its reduction {spec.defaults.get('reduction', TOKEN_MEAN)!r}"
        hint = " (or choose the reduction freely with policy_loss_type=grpo)"
    raise SkyRLConfigError(
        f"gmpo_plugins: {field}={value!r} cannot be honoured by policy_loss_type={policy_loss_type}: {why}. "
        f"Set {field} to one of {accepted}{hint}."
    )


def resolution_from_config(spec: LossSpec, config: Any, policy_loss_type: str) -> Resolution:
    """Every hyper-parameter of ``spec`` from SkyRL's ``AlgorithmConfig`` and the override, with
    its source (module docstring; ``hparam_sources``).

    Raises SkyRLConfigError naming the SkyRL field when a value is invalid for the loss or
    cannot be expressed by it.
    """
    if config is None:
        raise SkyRLConfigError(
            f"gmpo_plugins: policy_loss_type={policy_loss_type} needs SkyRL's {ALGORITHM} config (config=None)"
        )
    reduction = _reduction(spec, config, policy_loss_type)
    if reduction == SUM_NORM and "norm_length" in spec.defaults:
        max_seq_len(config, policy_loss_type)
    return resolve(
        spec,
        SKYRL_FIELDS,
        config,
        framework="SkyRL",
        selector=f"policy_loss_type={policy_loss_type}",
        error=SkyRLConfigError,
    )


def hparams_from_config(spec: LossSpec, config: Any, policy_loss_type: str) -> dict[str, Any]:
    """The hyper-parameters ``spec`` is called with (``resolution_from_config``), announced once
    per process (``hparam_sources.announce``: the provenance line, the default warning)."""
    resolution = resolution_from_config(spec, config, policy_loss_type)
    announce(resolution)
    return resolution.params()


def max_seq_len(config: Any, policy_loss_type: str) -> int:
    """``max_seq_len``, required by ``seq_mean_token_sum_norm`` (SkyRL's validate_cfg too)."""
    value = getattr(config, "max_seq_len", None)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        field = _field("max_seq_len")
        raise SkyRLConfigError(
            f"gmpo_plugins: {field}={value!r} is not valid for policy_loss_type={policy_loss_type} with "
            f"{_field('loss_reduction')}={SUM_NORM}: it is the constant length every sequence's token sum is "
            "divided by, expected an int > 0"
        )
    return value


def core_advantages(
    advantages: torch.Tensor, mask: torch.Tensor, loss_reduction: str, length: int | None
) -> tuple[torch.Tensor, BatchInfo]:
    """(advantages for the core (B, T), ``BatchInfo``) from SkyRL's scaled advantages.

    advantages (B, T) float: SkyRL's pre-scaled per-token advantages; mask (B, T) 0/1 or
    bool; ``length`` = ``max_seq_len`` for seq_mean_token_sum_norm. See the module docstring.
    """
    unit_counts = BatchInfo(dp_size=1, global_batch_size=1, global_num_tokens=1)
    if loss_reduction == SEQUENCE:
        lengths = (mask != 0).sum(-1, keepdim=True).clamp_min(1).to(advantages.dtype)
        return advantages * lengths, unit_counts
    if loss_reduction == SUM_NORM:
        if length is None:
            raise ValueError(f"gmpo_plugins: loss_reduction={SUM_NORM} needs max_seq_len (length=None was passed)")
        return advantages * length, unit_counts
    return advantages, unit_counts
