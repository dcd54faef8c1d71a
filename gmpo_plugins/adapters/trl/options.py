"""GRPOConfig fields -> registry-loss hyper-parameters, and the fields we refuse.

Translation (``TRL_FIELDS``, ``hparam_sources``; every registry loss receives only what its
spec accepts):

    eps_low   <- args.epsilon                       (log space for the gmpo family,
    eps_high  <- args.epsilon_high or args.epsilon   ratio space for grpo/dapo/dr_grpo/gspo:
                                                     the same meaning TRL gives them)
    kl_beta   <- args.beta                          (k3 KL, per-sequence mean for sequence-level
                                                     losses, as TRL's GMPOTrainer)
    norm_length <- args.max_completion_length       (Dr.GRPO's constant, as TRL's 'dr_grpo')
    tau_pos, tau_neg <- args.sapo_temperature_pos, args.sapo_temperature_neg      (sapo)
    vespo_k_pos, vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg <- args.<same name>  (vespo)
    entropy_coef, top_entropy_quantile <- args.<same name>   (the loss terms, ``core.terms``,
                                                     every loss; TRL's own copies never act:
                                                     ``_compute_loss`` is replaced whole)

The loss terms: TRL's ``top_entropy_quantile`` keeps the tokens whose entropy is at or above
``torch.quantile`` of the micro-batch's valid entropies at 1 - rho (``get_high_entropy_mask``),
as the registry's term does, except that TRL gathers the valid entropies of that micro-batch
from every process and the registry's threshold is each process's own (the term is declared
split-dependent). TRL's ``entropy_coef`` subtracts coef * (mean entropy over the micro-batch's
kept tokens) / accumulation steps; the registry's bonus is aggregated by the loss's own
reduction over the global batch (the same value when every micro-batch holds as many kept
tokens and the loss is token-mean). Both read the differentiable entropies of TRL's forward
(``LossInputs.entropy``); ``nll_coef`` and losses that read rewards (``topr``) get the
per-sample total reward of TRL's reward functions (``LossInputs.rewards``, ``trainer``).

A loss whose ratio clip is a one-sided cap (``hparam_sources.ratio_cap``: cispo) takes
``eps_high = epsilon_high - 1`` (TRL's cispo caps the ratio at ``epsilon_high`` itself) and
nothing from ``epsilon`` (TRL's cispo has no lower clip; with ``epsilon_high`` None TRL would
cap at ``epsilon``, 0.2, so the loss's own cap 1 + 4.0 applies instead).

anything else comes from ``loss_hparams`` (e.g. ``log_ratio_bound``, ``reduction``,
``kl_estimator``) or from ``GMPO_PLUGINS_LOSS_HPARAMS``, and is checked by the loss spec
(unknown names and bad values raise). The variable may also replace a translated
hyper-parameter whose field is at its GRPOConfig default; ``loss_hparams`` may not (it
names the field to set instead).

Refused, because the registry loss would otherwise silently ignore them (TRL's own
GMPOTrainer ignores most of these, trl #6095/#6808):

    loss_type                  anything but the GRPOConfig default: the registry loss
                               replaces TRL's loss formulations (its default 'dapo' is
                               unused: GRPOConfig has no neutral value)
    importance_sampling_level  anything but 'token' (pick a sequence-level loss instead)
    delta                      INTELLECT-2 two-sided clip
    off_policy_mask_threshold  off-policy sequence masking
    use_adaptive_entropy       the adaptive entropy coefficient (the registry's bonus is static)
    use_liger_kernel=True with entropy_coef != 0 or top_entropy_quantile < 1 (either channel):
                               the fused-linear path computes no differentiable entropy
    use_bias_correction_kl     when beta != 0: TRL multiplies its KL by the ratio; ours does not
    epsilon_high / beta        when the chosen loss has no eps_high / kl_beta

Supported and translated elsewhere: ``use_liger_kernel=True`` (the loss then runs on the
fused-linear path, ``trainer``), vLLM importance-sampling correction (as
``rollout_is_weights``), ``tool_mask``, ``mask_truncated_completions``, the MoE router
auxiliary loss, gradient accumulation and data parallelism (``normalisation``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from gmpo_plugins.adapters.hparam_sources import (
    OVERRIDE_ENV,
    Field,
    Resolution,
    announce,
    attribute,
    overrides_from_env,
    ratio_cap,
    resolve,
    two_sided,
)
from gmpo_plugins.adapters.inputs import refusal, refuse_unsupplied
from gmpo_plugins.core.spec import LossSpec


def _config(
    field: str,
    default: Any,
    hparam: str,
    when: str = "not None",
    applies: Callable[[LossSpec], bool] | None = None,
    convert: Callable[[Any], Any] | None = None,
) -> Field:
    read = attribute(field, none_absent=True)
    name = f"GRPOConfig.{field}"
    if convert is None:
        return Field(hparam, name, default, read, when=when, applies=applies)
    return Field(hparam, name, default, read, convert=convert, when=when, applies=applies)


def _cap_offset(cap: Any) -> Any:
    """TRL's cispo cap ``epsilon_high`` (the ratio's maximum) as the registry's offset ``cap - 1``."""
    return cap - 1 if isinstance(cap, (int, float)) and not isinstance(cap, bool) else cap


TRL_FIELDS = (  # GRPOConfig field -> registry hyper-parameter (TRL 1.16 defaults)
    _config("epsilon", 0.2, "eps_low", when="always; not for a one-sided cap", applies=two_sided),
    _config(
        "epsilon_high",
        None,
        "eps_high",
        when="not None, for a one-sided ratio cap (cispo): the cap C, as eps_high = C - 1",
        applies=ratio_cap,
        convert=_cap_offset,
    ),
    _config("epsilon_high", None, "eps_high", when="not None; not for a one-sided cap", applies=two_sided),
    _config("epsilon", 0.2, "eps_high", when="epsilon_high is None; not for a one-sided cap", applies=two_sided),
    _config("sapo_temperature_pos", 1.0, "tau_pos", when="always"),
    _config("sapo_temperature_neg", 1.05, "tau_neg", when="always"),
    _config("vespo_k_pos", 2.0, "vespo_k_pos", when="always"),
    _config("vespo_lambda_pos", 3.0, "vespo_lambda_pos", when="always"),
    _config("vespo_k_neg", 3.0, "vespo_k_neg", when="always"),
    _config("vespo_lambda_neg", 2.0, "vespo_lambda_neg", when="always"),
    _config("beta", 0.0, "kl_beta", when="always"),
    _config("max_completion_length", 512, "norm_length"),  # None: no maximum, the loss's constant
    _config("entropy_coef", 0.0, "entropy_coef", when="always"),
    _config("top_entropy_quantile", 1.0, "top_entropy_quantile", when="always"),
)
TRANSLATED = {  # loss hyper-parameter -> the GRPOConfig field it is first taken from
    row.hparam: row.name.removeprefix("GRPOConfig.") for row in reversed(TRL_FIELDS)
}


def field_for(spec: LossSpec, hparam: str, value: Any) -> tuple[str, Any] | None:
    """The GRPOConfig (field, value) that gives ``spec`` ``hparam=value`` (the first row that
    feeds it, its conversion inverted), or None when no field carries it (the inverse of
    ``TRL_FIELDS``, for building configs)."""
    row = next((row for row in TRL_FIELDS if row.hparam == hparam and row.feeds(spec)), None)
    if row is None:
        return None
    setting = value + 1 if row.convert is _cap_offset and value is not None else value
    return row.name.removeprefix("GRPOConfig."), setting


FUSED_PATH = "TRL's fused-linear path (use_liger_kernel=True)"
FUSED_SUPPLIED = ("rewards", "group_ids")
"""The optional inputs the fused-linear path passes: not the entropy, which it computes
without gradient (``core.fused_linear``)."""


class UnsupportedTRLOptionError(ValueError):
    """A GRPOConfig option the registry loss cannot honour."""


def _default(args: Any, name: str) -> Any:
    for f in dataclasses.fields(type(args)):
        if f.name == name:
            return f.default
    raise AttributeError(f"{type(args).__name__} has no field {name!r}")


def refusals(args: Any, spec: LossSpec) -> list[str]:
    """Messages for every option of ``args`` that ``spec`` cannot honour (empty when fine)."""
    name = spec.name
    found: list[str] = []
    loss_type_default = _default(args, "loss_type")
    if args.loss_type != loss_type_default:
        found.append(
            f"loss_type={args.loss_type!r}: the registry loss {name!r} replaces TRL's loss formulations; "
            f"leave loss_type at its default {loss_type_default!r} and choose the loss with loss=... "
            "(e.g. loss='dapo', 'grpo', 'dr_grpo', 'gspo', 'gmpo')"
        )
    if args.importance_sampling_level != "token":
        found.append(
            f"importance_sampling_level={args.importance_sampling_level!r}: the registry loss defines its own "
            "ratio level; leave it at 'token' (use loss='gspo' for a sequence-level ratio)"
        )
    if args.delta is not None:
        found.append(f"delta={args.delta}: the two-sided (INTELLECT-2) clip is not supported; set delta=None")
    if args.off_policy_mask_threshold is not None:
        found.append(
            f"off_policy_mask_threshold={args.off_policy_mask_threshold}: off-policy sequence masking is not "
            "supported; set off_policy_mask_threshold=None"
        )
    if args.use_adaptive_entropy:
        found.append(
            "use_adaptive_entropy=True: the registry's entropy bonus has a constant coefficient "
            "(GRPOConfig.entropy_coef); set use_adaptive_entropy=False"
        )
    if args.beta != 0.0:
        if "kl_beta" not in spec.defaults:
            found.append(f"beta={args.beta}: loss {name!r} has no KL term (no kl_beta); set beta=0.0")
        elif args.use_bias_correction_kl:
            found.append(
                "use_bias_correction_kl=True: with beta != 0 TRL would multiply its KL by the importance ratio; "
                f"loss {name!r} adds beta * KL without it; set use_bias_correction_kl=False"
            )
    if args.epsilon_high is not None and "eps_high" not in spec.defaults:
        found.append(f"epsilon_high={args.epsilon_high}: loss {name!r} has no clip range; set epsilon_high=None")
    found.extend(_group_refusals(args, spec))
    return found


WHOLE_GROUPS = "compares the completions of a prompt with each other, so each micro-batch must hold whole groups"


def _group_refusals(args: Any, spec: LossSpec) -> list[str]:
    """Messages for the settings under which TRL hands a split-dependent loss that reads groups
    (``real``) a micro-batch with part of a group: TRL shuffles a generation batch across its
    ``steps_per_generation`` micro-batches, and gives each process a contiguous slice of
    ``per_device_train_batch_size * steps_per_generation`` rows of the grouped batch."""
    if "group_ids" not in spec.requires or spec.split_invariant:
        return []
    found = []
    if args.steps_per_generation != 1:
        found.append(
            f"steps_per_generation={args.steps_per_generation}: loss {spec.name!r} {WHOLE_GROUPS}, and TRL "
            "shuffles a generation batch across its steps_per_generation micro-batches; set steps_per_generation=1"
        )
    if args.per_device_train_batch_size % args.num_generations:
        found.append(
            f"per_device_train_batch_size={args.per_device_train_batch_size}: loss {spec.name!r} {WHOLE_GROUPS}, "
            f"and a process's rows then cut a group of num_generations={args.num_generations}; make it a multiple "
            "of num_generations"
        )
    return found


def loss_resolution(args: Any, spec: LossSpec, loss_hparams: Mapping[str, Any] | None = None) -> Resolution:
    """Every hyper-parameter of ``spec`` with its source, after refusing what it cannot honour.

    Raises UnsupportedTRLOptionError naming every refused GRPOConfig option, and the
    spec's own TypeError/ValueError for unknown or out-of-range hyper-parameters; first, for a
    loss that requires an input the adapter does not pass (``adapters.inputs``).
    """
    refuse_unsupplied(spec, "TRL", UnsupportedTRLOptionError)
    extra = dict(loss_hparams or {})
    for key in extra:
        row = next((row for row in TRL_FIELDS if row.hparam == key and row.feeds(spec)), None)
        if row is not None:
            raise UnsupportedTRLOptionError(
                f"loss_hparams[{key!r}]: set {row.name} instead (the adapter takes {key} from it)"
            )
    problems = refusals(args, spec)
    if problems:
        raise UnsupportedTRLOptionError(
            f"RegistryGRPOTrainer(loss={spec.name!r}) cannot honour: " + "; ".join(problems)
        )
    spec.resolve(extra)  # unknown names and bad values of loss_hparams raise now, not at the first step
    try:
        env = overrides_from_env()
    except ValueError as exc:
        raise UnsupportedTRLOptionError(str(exc)) from None
    resolution = resolve(
        spec,
        TRL_FIELDS,
        args,
        framework="TRL",
        selector=f"RegistryGRPOTrainer(loss={spec.name!r})",
        error=UnsupportedTRLOptionError,
        overrides={OVERRIDE_ENV: env, "loss_hparams": extra},
    )
    if args.use_liger_kernel:
        reason = refusal(spec, "TRL", FUSED_PATH, resolution.params(), supplied=FUSED_SUPPLIED)
        if reason is not None:
            raise UnsupportedTRLOptionError(f"gmpo_plugins: {reason}; set use_liger_kernel=False")
    return resolution


def loss_hparams_from_args(args: Any, spec: LossSpec, loss_hparams: Mapping[str, Any] | None = None) -> dict:
    """The hyper-parameters ``spec`` is called with (``loss_resolution``), announced once per
    process (``hparam_sources.announce``: the provenance line, the default warning)."""
    resolution = loss_resolution(args, spec, loss_hparams)
    announce(resolution)
    return resolution.params()
