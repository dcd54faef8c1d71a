"""REAL (Rewards as Labels, arXiv 2602.05630), as ms-swift's ``loss_type="real"``: the samples of
a prompt's group classified by the sign of their advantage, each sample's score its mean log
ratio.

Groups come from ``LossInputs.group_ids`` (B,) (rows with equal ids: the samples of one prompt).
For row i with valid tokens t (|o_i| of them) and sequence advantage A_i:

    S_i  = sum_t clamp(log pi_theta - log pi_old, -R, R) / |o_i|     the row's mean log ratio,
                                                  R = log_ratio_bound (the guard of every loss)
    P_g  = {i in g : A_i > 0},   N_g = {i in g : A_i <= 0}    (rows with a valid token)
    L_g  = log(1 + sum_{j in N_g} rho_j e^{S_j / tau}) + log(1 + sum_{j in P_g} rho_j e^{-S_j / tau})
           if P_g and N_g are both non-empty, else 0 (ms-swift skips a group without both sides)
    loss = sum_i L_{g(i)} / N * dp_size                       (each row carries its group's loss)

tau = ``real_tau``; each log(1 + sum) is a log-sum-exp with a 0 logit. ms-swift averages the raw
log ratios; the guard changes S_i only where a token's |log ratio| exceeds R (20 by default).
rho_j is the row's rollout IS weight (the (B,) weight, or the mean of the (B, T) weights over its
valid tokens; 1 without weights), detached: it weighs the sample's term inside its group's sums,
so a row of weight 0 (masked by the rollout correction) leaves its group. ms-swift applies no
rollout IS weight to REAL (its per-token loss is zero and the group sums read only the scores),
and its off-policy sequence mask leaves a masked row in its group with score 0; with weights all
1 the two agree.

Normalisation: N is the number of sequences (``BatchInfo.global_batch_size``, or the local rows
with a valid token). With every group of size G whole on the micro-batch, ``sum_i L_{g(i)} / N``
is ``sum_g L_g / (N / G)``, ms-swift's division by the number of groups; with groups of unequal
size it weighs each group by its size. The positive side is ``A_i > 0`` and the negative one
``A_i <= 0``, as ms-swift (which reads the sign of the advantage, not the reward). A row without
a valid token belongs to no side and carries no loss (ms-swift would count it as a negative of
score 0). The KL term, when asked for, follows the registry's sequence-level convention
(seq-mean-token-mean); ms-swift takes the micro-batch's token mean.

Split dependence (declared: ``split_invariant=False``): L_g is a log-sum-exp over the whole
group, not a sum over its rows, so a split that cuts a group changes the gradient. A split that
keeps every group within one micro-batch and one rank, with the global count N, gives the whole
batch's gradient exactly (ms-swift requires its per-device batch to be a multiple of the group
size for the same reason). Not linear in the advantages (only their signs are read).

Gradient: with q_j = rho_j e^{S_j/tau} / (1 + sum_{N_g} rho e^{S/tau}) for j in N_g (and
q_j = rho_j e^{-S_j/tau} / (1 + sum_{P_g} rho e^{-S/tau}) for j in P_g), dL_g/dS_j = q_j / tau
for a negative and -q_j / tau for a positive, bounded by 1 / tau; each valid token of row j gets
that divided by |o_j|, times the group's share of the reduction.

Source: ms-swift ``swift/rlhf_trainers/grpo_trainer.py`` (the ``real`` branch of
``_compute_loss_and_metrics``); default ``real_tau`` 0.5 (``swift/rlhf_trainers/args_mixin.py``,
``GRPOArgumentsMixin``, and the REAL documentation page of ms-swift).

Non-finite values: a NaN or +-inf score reaches its group's log-sum-exp (the group's rows' losses
are non-finite) and the shared rule (``tail.finish``) makes the loss and gradient non-finite.
Shapes: log-prob tensors and mask (B, T); advantages (B,) or row-constant (B, T); group_ids (B,).
"""

from __future__ import annotations

import torch

from gmpo_plugins.core.per_token import COMMON_SOURCES
from gmpo_plugins.core.prepared import LOG_RATIO_GUARD, clamp_or_nan, prepare, sequence_is_weights
from gmpo_plugins.core.reduce import SEQUENCE, masked_sum
from gmpo_plugins.core.spec import LossSpec
from gmpo_plugins.core.tail import eager_row_stats, empty_loss, finish, is_empty, kl_rows
from gmpo_plugins.core.types import BatchInfo, LossInputs, LossOutput


def _side_loss(logits: torch.Tensor, members: torch.Tensor) -> torch.Tensor:
    """(B,): log(1 + sum_j members_ij e^{logits_j}) for ``logits`` (B,) and ``members`` (B, B)
    bool (row i's group's rows of one side), as a log-sum-exp with a 0 logit."""
    terms = torch.where(members, logits[None, :], -torch.inf)
    return torch.logsumexp(torch.cat([terms, torch.zeros_like(terms[:, :1])], dim=-1), dim=-1)


def real_loss(
    inputs: LossInputs,
    batch: BatchInfo,
    *,
    real_tau: float,
    kl_beta: float,
    kl_estimator: str,
    kl_clamp: float | None,
    log_ratio_bound: float,
) -> LossOutput:
    """REAL (module docstring)."""
    if is_empty(inputs):  # B = 0 or T = 0
        return empty_loss(inputs, kl=True)
    assert inputs.group_ids is not None  # LossSpec.requires
    p = prepare(inputs, sequence_level=True)
    dtype = p.log_ratio.dtype
    guarded = clamp_or_nan(p.log_ratio, -log_ratio_bound, log_ratio_bound)  # NaN where not finite
    scores = masked_sum(guarded, p.mask, dim=-1) / p.lengths.clamp_min(1)  # 0 on an empty row
    logits = scores / real_tau
    rho = sequence_is_weights(p.rollout_is_weights, p.mask, "arithmetic_mean", dtype)
    present = p.rows if rho is None else p.rows & (rho > 0)
    log_rho = torch.zeros_like(logits) if rho is None else torch.log(rho)
    groups = inputs.group_ids
    same = groups[:, None] == groups[None, :]  # (B, B): row j is in row i's group
    positive = same & (present & (p.advantages > 0))[None, :]
    negative = same & (present & (p.advantages <= 0))[None, :]
    group_loss = _side_loss(logits + log_rho, negative) + _side_loss(log_rho - logits, positive)
    both = positive.any(-1) & negative.any(-1)
    values = torch.where(both & p.rows, group_loss, torch.zeros((), dtype=dtype, device=logits.device))
    kl = kl_rows(inputs, p.mask, dtype, kl_beta=kl_beta, kl_estimator=kl_estimator, kl_clamp=kl_clamp, loss_name="real")
    none = torch.zeros_like(p.mask)
    return finish(
        values,
        eager_row_stats(p.log_ratio, p.mask, none, none),
        batch,
        inputs=inputs,
        reduction=SEQUENCE,
        kl=kl,
        kl_beta=kl_beta,
    )


REAL = LossSpec(
    name="real",
    fn=real_loss,
    description="ms-swift real: in-group classification of samples by advantage sign on their mean log ratio",
    defaults={
        "real_tau": 0.5,
        "kl_beta": 0.0,
        "kl_estimator": "k3",
        "kl_clamp": None,
        "log_ratio_bound": LOG_RATIO_GUARD,
    },
    sources={
        "real_tau": "ms-swift swift/rlhf_trainers/args_mixin.py GRPOArgumentsMixin real_tau 0.5",
        **COMMON_SOURCES,
    },
    sequence_level=True,
    split_invariant=False,  # a group's log-sum-exp spans its rows: exact only for splits that keep groups whole
    linear_in_advantages=False,  # only the advantages' signs are read
    requires=("group_ids",),
    formula="L_g = log(1 + sum_{A<=0} e^{S_j/tau}) + log(1 + sum_{A>0} e^{-S_j/tau}),  S_j = mean_t r_t",
    native=("ms-swift:real",),
)
