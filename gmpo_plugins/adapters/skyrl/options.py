"""SkyRL ``trainer.algorithm`` config -> registry-loss hyper-parameters, advantages and
``BatchInfo`` (no SkyRL import).

SkyRL calls a policy loss with its ``AlgorithmConfig`` (``config``). Translation
(``skyrl_fields`` with the installed release's defaults, ``releases``; ``hparam_sources``),
for each loss that declares the hyper-parameter in its spec (``spec.defaults``):

    eps_low     <- trainer.algorithm.eps_clip_low    log space for clip_space "log" (gmpo
    eps_high    <- trainer.algorithm.eps_clip_high   family: ratio kept in (e^-eps_low,
                                                     e^eps_high), paper value 0.4), ratio
                                                     space for "ratio" (grpo/dapo/dr_grpo/gspo)
    reduction   <- trainer.algorithm.loss_reduction  token_mean              -> token-mean
                                                     sequence_mean           -> seq-mean-token-mean
                                                     seq_mean_token_sum_norm -> seq-mean-token-sum-norm
    norm_length <- trainer.algorithm.max_seq_len     (seq_mean_token_sum_norm only)
    eps_low, eps_high <- trainer.algorithm.cispo.cispo_eps_clip_low/_high for a one-sided
                   ratio cap (cispo; ``hparam_sources.ratio_cap``), the same offsets from 1;
                   the release's default low (0.3: 0.0, a clamp at 1; 0.4: 1.0, a clamp at
                   0) and any low >= 1 read as the registry's no lower clip
    rollout_bypass <- trainer.algorithm.cispo.cispo_anchor (0.4) "rollout", for a one-sided
                   ratio cap (cispo): the ratio is taken against ``rollout_logprobs`` instead
                   of the old log-probs (the core's ``rollout_bypass``: old_log_probs :=
                   rollout_log_probs), as SkyRL's own cispo; SkyRL's TIS or the core's
                   ``rollout_is`` beside it (the off-policy correction twice), no rollout
                   log-probs, and "rollout" with any other loss (SkyRL reads the field in its
                   cispo only) are refused naming the field
    tau_pos, tau_neg           <- sapo.tau_pos, sapo.tau_neg
    delta_low, delta_high      <- dppo.delta_low, dppo.delta_high  (dppo_tv and dppo_kl)
    clip_cov_ratio, clip_cov_lb, clip_cov_ub <- clip_cov.clip_ratio, .clip_cov_lb, .clip_cov_ub
    kl_cov_ratio, ppo_kl_coef  <- kl_cov.kl_cov_frac (a fraction, 0.2 = 20%), kl_cov.ppo_kl_coef

Rollout log-probs: SkyRL passes ``rollout_logprobs`` to the loss when the rollout engine
returns them (``generator.sampling_params.logprobs``, 1 by default); they become
``LossInputs.rollout_log_probs``, for a loss that reads them (``decoupled_ppo``, ``m2po``),
the core's correction options (``adapters.rollout_source``) and the ratio's anchor under
``cispo.cispo_anchor="rollout"``. SkyRL's own
``off_policy_correction.tis_ratio_type`` (its IS weights, ``off_policy``) beside the core's
correction (an option set in the override, or the loss's own) is refused naming both.

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
global_num_tokens=1)``: the global counts are already in the advantages. A loss whose spec
declares ``linear_in_advantages`` is positively homogeneous of degree 1 in the advantages
(its clip and gate decisions depend on their signs only, which the scaling keeps), so

    core(A / N, counts 1) = core(A, global_batch_size=N)      (resp. M for token-mean)

which summed over micro-batches and ranks (``dp_size`` applied by SkyRL) is the core's
whole-mini-batch loss and gradient. A loss that is not (dro's beta penalty, kl_cov's KL
term, clip_cov's absolute covariance thresholds) is refused, naming why: its value at the
scaled advantages is another objective. With ``sequence_mean`` a loss that sums each
sequence's tokens (luspo's seq-mean-token-sum) gets the same advantages A / N. N counts
every row of the mini-batch, as SkyRL does (the ``global_batch_size`` a framework passes to
the core).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from gmpo_plugins.adapters.hparam_sources import (
    ABSENT,
    OVERRIDE_ENV,
    Field,
    Resolution,
    Resolved,
    announce,
    attribute,
    overrides_from_env,
    ratio_cap,
    resolve,
    two_sided,
)
from gmpo_plugins.adapters.inputs import ROLLOUT_SETTINGS, refuse_unsupplied
from gmpo_plugins.adapters.rollout_source import refuse_double, refuse_missing
from gmpo_plugins.adapters.skyrl.releases import RELEASES, SkyRLRelease, installed
from gmpo_plugins.core.correction import split_correction
from gmpo_plugins.core.reduce import SEQ_MEAN_TOKEN_MEAN, SEQ_MEAN_TOKEN_SUM, SEQ_MEAN_TOKEN_SUM_NORM, TOKEN_MEAN
from gmpo_plugins.core.spec import LossSpec
from gmpo_plugins.core.types import BatchInfo

ALGORITHM = "trainer.algorithm"
LOGPROBS_SETTING = ROLLOUT_SETTINGS["skyrl"]
TOKEN = "token_mean"
SEQUENCE = "sequence_mean"
SUM_NORM = "seq_mean_token_sum_norm"
CORE_REDUCTION = {TOKEN: TOKEN_MEAN, SEQUENCE: SEQ_MEAN_TOKEN_MEAN, SUM_NORM: SEQ_MEAN_TOKEN_SUM_NORM}


SUM_CORE_REDUCTION = {**CORE_REDUCTION, SEQUENCE: SEQ_MEAN_TOKEN_SUM}


def sums_sequences(spec: LossSpec) -> bool:
    """Whether ``spec`` sums each sequence's tokens instead of averaging them (its reductions
    have seq-mean-token-sum, not seq-mean-token-mean): SkyRL's ``sequence_mean`` carries it,
    since the adapter restores |o_i| in the advantages (module docstring)."""
    return SEQ_MEAN_TOKEN_SUM in spec.reductions and SEQ_MEAN_TOKEN_MEAN not in spec.reductions


def _max_seq_len(config: Any) -> Any:
    """max_seq_len under seq_mean_token_sum_norm (the constant SkyRL scales advantages by)."""
    return getattr(config, "max_seq_len", None) if getattr(config, "loss_reduction", None) == SUM_NORM else ABSENT


def _cispo_low(release: SkyRLRelease) -> Any:
    """A reader of cispo.cispo_eps_clip_low: ABSENT (the registry cispo's no lower clip) at the
    release's default (0.3's 0.0 clamps below at 1 in SkyRL's own cispo, 0.4's 1.0 at 0) and
    at any value >= 1 (a lower bound 1 - value <= 0 never binds: the ratio is positive)."""
    read = attribute("cispo.cispo_eps_clip_low")

    def cispo_low(config: Any) -> Any:
        value = read(config)
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        return ABSENT if value == release.cispo_eps_clip_low or (is_number and value >= 1.0) else value

    return cispo_low


_NOT_CAP = "always; not for a one-sided ratio cap (cispo)"


def _algorithm(field: str, default: Any, hparam: str, when: str = "") -> Field:
    return Field(hparam, f"{ALGORITHM}.{field}", default, attribute(field), when=when)


@functools.cache
def skyrl_fields(release: SkyRLRelease) -> tuple[Field, ...]:
    """The ``trainer.algorithm`` field -> registry hyper-parameter table with ``release``'s
    field defaults (``releases``; the rows are the same in every release)."""
    low = release.cispo_eps_clip_low
    return (
        Field(
            "eps_low",
            f"{ALGORITHM}.cispo.cispo_eps_clip_low",
            low,
            _cispo_low(release),
            when="< 1" + (f" and not {low!r}" if low < 1 else "") + ", for a one-sided ratio cap (cispo)",
            applies=ratio_cap,
        ),
        Field(
            "eps_high",
            f"{ALGORITHM}.cispo.cispo_eps_clip_high",
            release.cispo_eps_clip_high,
            attribute("cispo.cispo_eps_clip_high"),
            when="for a one-sided ratio cap (cispo)",
            applies=ratio_cap,
        ),
        Field("eps_low", f"{ALGORITHM}.eps_clip_low", 0.2, attribute("eps_clip_low"), when=_NOT_CAP, applies=two_sided),
        Field(
            "eps_high", f"{ALGORITHM}.eps_clip_high", 0.2, attribute("eps_clip_high"), when=_NOT_CAP, applies=two_sided
        ),
        _algorithm("sapo.tau_pos", 1.0, "tau_pos"),
        _algorithm("sapo.tau_neg", 1.05, "tau_neg"),
        _algorithm("dppo.delta_low", 0.2, "delta_low"),
        _algorithm("dppo.delta_high", 0.2, "delta_high"),
        _algorithm("clip_cov.clip_ratio", 2e-4, "clip_cov_ratio"),
        _algorithm("clip_cov.clip_cov_lb", 1.0, "clip_cov_lb"),
        _algorithm("clip_cov.clip_cov_ub", 5.0, "clip_cov_ub"),
        _algorithm("kl_cov.kl_cov_frac", 0.2, "kl_cov_ratio", when="always (a fraction, as the registry's)"),
        _algorithm("kl_cov.ppo_kl_coef", 1.0, "ppo_kl_coef"),
        Field(
            "reduction",
            f"{ALGORITHM}.loss_reduction",
            TOKEN,
            attribute("loss_reduction"),
            convert=SUM_CORE_REDUCTION.__getitem__,
            overridable=False,
            when="for a loss whose per-sequence reduction is a token sum (luspo): sequence_mean -> seq-mean-token-sum",
            applies=sums_sequences,
        ),
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


SKYRL_FIELDS = skyrl_fields(RELEASES[-1])
"""The table with the current release's defaults, as the integration page shows it; a run reads
the installed release's (``skyrl_fields(releases.installed())``)."""
FIELDS = {row.hparam: row.name.removeprefix(f"{ALGORITHM}.") for row in SKYRL_FIELDS}


class SkyRLConfigError(ValueError):
    """A SkyRL ``trainer.algorithm`` setting the chosen registry loss cannot honour."""


def _field(name: str) -> str:
    return f"{ALGORITHM}.{name}"


def accepted_reductions(spec: LossSpec) -> list[str]:
    """The ``loss_reduction`` values ``spec`` accepts, in SkyRL's names."""
    if "reduction" in spec.defaults:
        table = SUM_CORE_REDUCTION if sums_sequences(spec) else CORE_REDUCTION
        return [name for name, core in table.items() if core in spec.reductions]
    return [SEQUENCE] if spec.sequence_level else [TOKEN]


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


ANCHOR = "cispo.cispo_anchor"
ANCHOR_OLD = "old"
ANCHOR_ROLLOUT = "rollout"
BYPASS = "rollout_bypass"
TIS = "off_policy_correction.tis_ratio_type"


def rollout_anchored(spec: LossSpec, config: Any) -> bool:
    """Whether ``spec``'s ratio is anchored at SkyRL's ``rollout_logprobs``:
    ``cispo.cispo_anchor="rollout"`` (SkyRL 0.4) with a one-sided ratio cap (cispo)."""
    return ratio_cap(spec) and attribute(ANCHOR)(config) == ANCHOR_ROLLOUT


def _cispo_anchor(spec: LossSpec, config: Any, policy_loss_type: str) -> bool:
    """``cispo.cispo_anchor`` (SkyRL 0.4, absent in 0.3) checked against ``spec``: True for
    "rollout" with a one-sided ratio cap (cispo), which SkyRL's own cispo then takes against
    ``rollout_logprobs``; False when absent or "old". SkyRLConfigError naming the field for
    another value, for "rollout" with any other loss (SkyRL reads the field in its cispo only,
    every other loss takes its ratio against the old log-probs) and for "rollout" beside
    SkyRL's TIS (SkyRL's cispo refuses that too: the anchor is the off-policy correction)."""
    value = attribute(ANCHOR)(config)
    if value is ABSENT or value == ANCHOR_OLD:
        return False
    field = _field(ANCHOR)
    if value != ANCHOR_ROLLOUT:
        raise SkyRLConfigError(
            f"gmpo_plugins: {field}={value!r} is not supported by policy_loss_type={policy_loss_type}: "
            f"expected {ANCHOR_OLD!r} or {ANCHOR_ROLLOUT!r}"
        )
    if not ratio_cap(spec):
        raise SkyRLConfigError(
            f"gmpo_plugins: {field}={value!r} is not supported by policy_loss_type={policy_loss_type}: SkyRL "
            f"reads it in its cispo only, and {spec.name} is not a CISPO loss (its ratio is against the old "
            f"log-probs). Set {field}={ANCHOR_OLD!r}; to take {spec.name}'s ratio against the rollout "
            f"log-probs, set {OVERRIDE_ENV}='{{\"{BYPASS}\": true}}'"
        )
    kind = attribute(TIS)(config)
    if kind is not ABSENT and kind is not None:
        tis = _field(TIS)
        raise SkyRLConfigError(
            f"gmpo_plugins: {field}={value!r} with {tis}={kind} is not supported by policy_loss_type="
            f"{policy_loss_type}: the ratio against the rollout log-probs is already the off-policy correction, "
            f"and TIS would apply it twice (SkyRL's own cispo refuses it too). Set {tis}=null"
        )
    return True


def _anchor_at_rollout(resolution: Resolution, policy_loss_type: str) -> Resolution:
    """``resolution`` with ``rollout_bypass=True`` from ``cispo.cispo_anchor="rollout"`` (the
    core's old_log_probs := rollout_log_probs), named so on the provenance line; SkyRLConfigError
    naming both when the override sets ``rollout_bypass`` to False or the resolved options
    weight by the rollout ratio (``rollout_is``) on top of it."""
    field = _field(ANCHOR)
    own = f"{field}={ANCHOR_ROLLOUT!r}"
    try:
        override = overrides_from_env()
    except ValueError as exc:
        raise SkyRLConfigError(str(exc)) from None
    if override.get(BYPASS, True) is not True:
        raise SkyRLConfigError(
            f"gmpo_plugins: {BYPASS} is set both by {OVERRIDE_ENV} ({override[BYPASS]!r}) and by {own} (True, "
            f"the ratio against the rollout log-probs) for policy_loss_type={policy_loss_type}; set one of them"
        )
    correction, _ = split_correction({**resolution.spec.correction, **resolution.params()})
    if correction.rollout_is is not None:
        raise SkyRLConfigError(
            f"gmpo_plugins: {own} and rollout_is={correction.rollout_is!r} are not supported together by "
            f"policy_loss_type={policy_loss_type}: the ratio against the rollout log-probs is already the "
            f"off-policy correction, and the IS weight would apply it twice. Remove rollout_is from {OVERRIDE_ENV}"
        )
    items = tuple(item for item in resolution.items if item.hparam != BYPASS)
    bypass = Resolved(BYPASS, True, f"framework field {own}: the ratio against rollout_logprobs")
    return Resolution(resolution.framework, resolution.selector, resolution.spec, (*items, bypass))


def refuse_no_rollout(spec: LossSpec, hparams: dict[str, Any], config: Any, policy_loss_type: str) -> None:
    """Raise SkyRLConfigError when the call of ``spec`` with ``hparams`` reads the rollout
    log-probs, which SkyRL did not pass (or will not: ``generator.sampling_params.logprobs``
    null): naming ``cispo.cispo_anchor`` when that setting is what reads them, else what does
    (``rollout_source.refuse_missing``)."""
    if hparams.get(BYPASS) is True and rollout_anchored(spec, config):
        field = _field(ANCHOR)
        raise SkyRLConfigError(
            f"gmpo_plugins: {field}={ANCHOR_ROLLOUT!r} takes the ratio of policy_loss_type={policy_loss_type} "
            f"against the rollout engine's log-probs (rollout_logprobs), which SkyRL passes to the loss only with "
            f"{LOGPROBS_SETTING}; set it, or {field}={ANCHOR_OLD!r}"
        )
    refuse_missing(spec, hparams, framework="SkyRL", setting=LOGPROBS_SETTING, error=SkyRLConfigError)


def resolution_from_config(spec: LossSpec, config: Any, policy_loss_type: str) -> Resolution:
    """Every hyper-parameter of ``spec`` from SkyRL's ``AlgorithmConfig`` and the override, with
    its source (module docstring; ``hparam_sources``).

    Raises SkyRLConfigError for a loss that requires an input the adapter does not pass
    (``adapters.inputs``), and naming the SkyRL field when a value is invalid for the loss or
    cannot be expressed by it.
    """
    refuse_unsupplied(spec, "SkyRL", SkyRLConfigError)
    if config is None:
        raise SkyRLConfigError(
            f"gmpo_plugins: policy_loss_type={policy_loss_type} needs SkyRL's {ALGORITHM} config (config=None)"
        )
    if not spec.linear_in_advantages:
        raise SkyRLConfigError(
            f"gmpo_plugins: policy_loss_type={policy_loss_type} is not supported through SkyRL: SkyRL divides the "
            f"advantages by the batch counts of {_field('loss_reduction')} before the loss sees them, and "
            f"{spec.name} is not linear in the advantages (a term or threshold that does not scale with them), "
            "so the counts cannot be recovered; SkyRL ships its own version of it where it has one"
        )
    anchored = _cispo_anchor(spec, config, policy_loss_type)
    reduction = _reduction(spec, config, policy_loss_type)
    if reduction == SUM_NORM and "norm_length" in spec.defaults:
        max_seq_len(config, policy_loss_type)
    resolution = resolve(
        spec,
        skyrl_fields(installed()),
        config,
        framework="SkyRL",
        selector=f"policy_loss_type={policy_loss_type}",
        error=SkyRLConfigError,
    )
    if anchored:
        resolution = _anchor_at_rollout(resolution, policy_loss_type)
    kind = getattr(getattr(config, "off_policy_correction", None), "tis_ratio_type", None)
    if kind is not None:
        field = f"{_field('off_policy_correction')}.tis_ratio_type"
        refuse_double(
            spec,
            resolution.params(),
            own=f"{field}={kind}",
            error=SkyRLConfigError,
            instead=f" ({field}=null leaves the rollout log-probs to the registry's)",
        )
    return resolution


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
