"""The registry's setting of each loss, translated into each framework's own call and config:
data only. Adding a loss to the audit means adding its entries here.

``TRANSLATIONS[framework][loss]`` is

    Reference(call, fields, conventions, note)
        call         the framework's own entry point for the loss: verl's loss_mode
                     (``get_policy_loss_fn``), TRL's trainer class, SkyRL's policy_loss_type
                     (``PolicyLossRegistry``), OpenRLHF's policy_loss_type (``PolicyLoss``),
                     Liger-Kernel's loss_type (``LigerFusedLinearGRPOLoss``)
        fields       the config fields a user sets: verl ``ActorConfig``, TRL ``GRPOConfig`` /
                     ``GMPOConfig``, SkyRL ``AlgorithmConfig``, OpenRLHF ``PolicyLoss`` and
                     Liger-Kernel ``LigerFusedLinearGRPOLoss`` arguments; ``From(name)`` is the
                     registry loss's default of hyper-parameter ``name`` (``spec.resolve({})``);
                     a dotted name ``section.field`` sets a field of a nested config (verl's
                     ``policy_loss``, SkyRL's ``sapo``, ``cispo``, ``clip_cov``, ...)
        conventions  names of ``conventions.CONVENTIONS`` the framework's result differs by
        note         what a user of the framework must know to get this setting (shown in the docs)
    CannotExpress(reason)
        the framework ships the method but cannot be set to the registry's setting

A registry loss without an entry for a framework is "not shipped" there. ``VARIANTS`` adds rows
for a loss at other settings than its defaults (grpo's token-sum reductions). ``PER_MICRO_BATCH``
names the registry losses that depend on their batch by definition (their token selection
is a quantile of the batch): their split behaviour is compared with the registry's on the
same micro-batches, not with the whole batch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gmpo_plugins.compare.audit.conventions import CONVENTIONS
from gmpo_plugins.core.registry import get_loss


@dataclass(frozen=True)
class From:
    """A config field's value: the registry default of hyper-parameter ``name`` plus ``offset``
    (a framework that spells a bound as the value itself, not its distance from 1), or
    ``if_none`` where that default is None and the framework spells "off" otherwise."""

    name: str
    if_none: Any = None
    offset: float = 0.0

    def value(self, hparams: Mapping[str, Any]) -> Any:
        """The field's value for the registry's resolved ``hparams``."""
        found = hparams[self.name]
        if found is None:
            return self.if_none
        return found + self.offset if self.offset else found


@dataclass(frozen=True)
class Reference:
    """A framework's own implementation of a registry loss (module docstring)."""

    call: str
    fields: Mapping[str, Any] = field(default_factory=dict)
    conventions: tuple[str, ...] = ()
    note: str = ""

    def settings(self, hparams: Mapping[str, Any]) -> dict[str, Any]:
        """``fields`` with every ``From`` replaced by its value for ``hparams``."""
        return {key: value.value(hparams) if isinstance(value, From) else value for key, value in self.fields.items()}

    def label(self) -> str:
        """The call and its fixed fields, as the table shows them."""
        fixed = [f"{key}={value}" for key, value in self.fields.items() if not isinstance(value, From)]
        return " ".join([self.call, *fixed])

    def spelled(self, hparams: Mapping[str, Any]) -> str:
        """The call and every field with its value for ``hparams``, as a user sets them."""
        return " ".join([self.call, *(f"{key}={value}" for key, value in self.settings(hparams).items())])


def sections(settings: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """(top-level fields, {section: its fields}) of resolved settings with dotted names."""
    top: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for key, value in settings.items():
        section, dot, name = key.partition(".")
        if dot:
            nested.setdefault(section, {})[name] = value
        else:
            top[key] = value
    return top, nested


@dataclass(frozen=True)
class CannotExpress:
    """The framework ships the method but cannot be set to the registry's setting."""

    reason: str


Translation = Reference | CannotExpress


PER_MICRO_BATCH = frozenset({"clip_cov", "kl_cov"})

VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "grpo:token-sum": ("grpo", {"reduction": "token-sum"}),
    "grpo:seq-mean-token-sum": ("grpo", {"reduction": "seq-mean-token-sum"}),
}
"""Audit rows beyond a loss's defaults: ``row: (registry loss, the hyper-parameters it sets)``;
a row is audited as a loss of its own (its translations are entries of ``TRANSLATIONS``)."""


def registry_setting(row: str) -> tuple[str, dict[str, Any]]:
    """(registry loss, its resolved hyper-parameters) of an audit row (a loss or a ``VARIANTS`` row)."""
    loss_name, overrides = VARIANTS.get(row, (row, {}))
    return loss_name, dict(get_loss(loss_name).resolve(overrides))


def _fields(names: Mapping[str, str], **fixed: Any) -> dict[str, Any]:
    """``{framework field: From(core name)}`` for the clip bounds, plus fixed fields."""
    return {framework: From(core) for framework, core in names.items()} | fixed


_VERL = {"clip_ratio_low": "eps_low", "clip_ratio_high": "eps_high"}
_TRL = {"epsilon": "eps_low", "epsilon_high": "eps_high"}
_SKYRL = {"eps_clip_low": "eps_low", "eps_clip_high": "eps_high"}
_OPENRLHF = {"clip_eps_low": "eps_low", "clip_eps_high": "eps_high"}
_LIGER = {"epsilon_low": "eps_low", "epsilon_high": "eps_high"}
_NO_CLIP = 1000.0  # log-space bound no log ratio of the batches reaches: GMPO without clipping
_NO_CLIP_NOTE = "no switch turns the clip off; a log-space bound of 1000 is never reached"
_DUAL = {"clip_ratio_c": From("dual_clip", if_none=math.inf)}
_DUAL_NOTE = (
    "verl's vanilla loss applies dual-clip PPO to A < 0 with clip_ratio_c = 3 unless told otherwise; the "
    "registry's dual_clip=None is clip_ratio_c=inf"
)

_NO_LOWER = 1.0  # a ratio clip offset of 1 puts the lower bound at 0, which no ratio reaches
_VERL_CISPO_NOTE = (
    "verl clips the weight to [1 - clip_ratio_low, 1 + clip_ratio_high] (its PPO bounds, 0.2 each unless told "
    "otherwise); the registry's eps_low=None (no lower clip) is clip_ratio_low=1"
)
_VERL_DPPO_NOTE = (
    "verl reads the trust region from its PPO bounds (clip_ratio_low/high) and truncates the weight at "
    "clip_ratio_c (3 unless told otherwise); the registry's ratio_cap=None is clip_ratio_c=inf"
)
_TRL_CISPO_NOTE = (
    "TRL caps the weight at epsilon_high itself, not 1 + epsilon_high, with no lower clip: eps_high=4 is 5"
)
_COV = {
    "clip_cov_ratio": From("clip_cov_ratio"),
    "clip_cov_lb": From("clip_cov_lb"),
    "clip_cov_ub": From("clip_cov_ub"),
}


def _section(section: str, names: Mapping[str, Any]) -> dict[str, Any]:
    """``names`` as fields of the nested config ``section`` (dotted names)."""
    return {f"{section}.{name}": value for name, value in names.items()}


def _vespo(prefix: str = "vespo_") -> dict[str, Any]:
    """The four VESPO shape fields (TRL's and Liger-Kernel's names)."""
    names = ("k_pos", "lambda_pos", "k_neg", "lambda_neg")
    return {f"{prefix}{name}": From(f"vespo_{name}") for name in names}


_SAPO_TRL = {"sapo_temperature_pos": From("tau_pos"), "sapo_temperature_neg": From("tau_neg")}

TRANSLATIONS: dict[str, dict[str, Translation]] = {
    "verl": {
        "grpo": Reference("vanilla", _fields(_VERL, loss_agg_mode="seq-mean-token-mean") | _DUAL, note=_DUAL_NOTE),
        "dapo": Reference("vanilla", _fields(_VERL, loss_agg_mode="token-mean") | _DUAL, note=_DUAL_NOTE),
        "dr_grpo": Reference(
            "vanilla",
            _fields(_VERL, loss_agg_mode="seq-mean-token-sum-norm")
            | {"loss_scale_factor": From("norm_length")}
            | _DUAL,
            note=_DUAL_NOTE,
        ),
        "grpo:token-sum": Reference("vanilla", _fields(_VERL, loss_agg_mode="token-sum") | _DUAL, note=_DUAL_NOTE),
        "grpo:seq-mean-token-sum": Reference(
            "vanilla", _fields(_VERL, loss_agg_mode="seq-mean-token-sum") | _DUAL, note=_DUAL_NOTE
        ),
        "gspo": Reference(
            "gspo", _fields(_VERL, loss_agg_mode="seq-mean-token-mean"), ("sequence_log_ratio_clamp_10",)
        ),
        "gmpo": Reference("geo_mean", _fields(_VERL, loss_agg_mode="token-mean"), ("no_overflow_guard",)),
        "gmpo_noclip": Reference(
            "geo_mean",
            {"clip_ratio_low": _NO_CLIP, "clip_ratio_high": _NO_CLIP, "loss_agg_mode": "token-mean"},
            ("no_overflow_guard",),
            note=_NO_CLIP_NOTE,
        ),
        "cispo": Reference(
            "cispo",
            {
                "clip_ratio_low": From("eps_low", if_none=_NO_LOWER),
                "clip_ratio_high": From("eps_high"),
                "loss_agg_mode": "token-mean",
            },
            note=_VERL_CISPO_NOTE,
        ),
        "sapo": Reference(
            "sapo",
            {"tau_pos": From("tau_pos"), "tau_neg": From("tau_neg"), "loss_agg_mode": "seq-mean-token-mean"},
            ("sapo_reduction_fixed",),
            note="verl's sapo reduces by seq-mean-token-mean whatever loss_agg_mode says",
        ),
        "gpg": Reference("gpg", {"loss_agg_mode": "token-mean"}),
        "dro": Reference(
            "dro",
            {"policy_loss.dro_beta": From("dro_beta"), "loss_agg_mode": "token-mean"},
            ("no_overflow_guard",),
            note="verl requires policy_loss.dro_beta (null unless set)",
        ),
        "dppo_tv": Reference(
            "dppo_tv",
            {
                "clip_ratio_low": From("delta_low"),
                "clip_ratio_high": From("delta_high"),
                "clip_ratio_c": From("ratio_cap", if_none=math.inf),
                "loss_agg_mode": "token-mean",
            },
            note=_VERL_DPPO_NOTE,
        ),
        "dppo_kl": Reference(
            "dppo_kl",
            {
                "clip_ratio_low": From("delta_low"),
                "clip_ratio_high": From("delta_high"),
                "clip_ratio_c": From("ratio_cap", if_none=math.inf),
                "loss_agg_mode": "token-mean",
            },
            note=_VERL_DPPO_NOTE,
        ),
        "clip_cov": Reference(
            "clip_cov",
            _fields(_VERL, loss_agg_mode="token-mean") | _section("policy_loss", _COV),
            ("no_overflow_guard", "random_candidates"),
        ),
        "kl_cov": Reference(
            "kl_cov",
            {"loss_agg_mode": "token-mean"}
            | _section("policy_loss", {"kl_cov_ratio": From("kl_cov_ratio"), "ppo_kl_coef": From("ppo_kl_coef")}),
            ("no_overflow_guard", "covariance_ties"),
            note="verl's config defaults to kl_cov_ratio=2e-4 and ppo_kl_coef=0.1",
        ),
    },
    "trl": {
        "grpo": Reference("GRPOTrainer", _fields(_TRL, loss_type="grpo"), ("no_overflow_guard",)),
        "dapo": Reference("GRPOTrainer", _fields(_TRL, loss_type="dapo"), ("no_overflow_guard",)),
        "dr_grpo": Reference(
            "GRPOTrainer",
            _fields(_TRL, loss_type="dr_grpo") | {"max_completion_length": From("norm_length")},
            ("no_overflow_guard",),
        ),
        "gspo": Reference(
            "GRPOTrainer",
            _fields(_TRL, loss_type="grpo", importance_sampling_level="sequence"),
            ("no_overflow_guard",),
        ),
        "gmpo": Reference("GMPOTrainer", _fields(_TRL), ("no_overflow_guard", "empty_row_constant")),
        "gmpo_noclip": Reference(
            "GMPOTrainer",
            {"epsilon": _NO_CLIP, "epsilon_high": _NO_CLIP},
            ("no_overflow_guard", "empty_row_constant"),
            note=_NO_CLIP_NOTE,
        ),
        "cispo": Reference(
            "GRPOTrainer",
            {"loss_type": "cispo", "epsilon_high": From("eps_high", offset=1.0)},
            ("no_overflow_guard",),
            note=_TRL_CISPO_NOTE,
        ),
        "sapo": Reference("GRPOTrainer", {"loss_type": "sapo"} | _SAPO_TRL, ("no_overflow_guard",)),
        "luspo": Reference(
            "GRPOTrainer",
            _fields(_TRL, loss_type="luspo", importance_sampling_level="sequence"),
            ("no_overflow_guard",),
        ),
        "vespo": Reference("GRPOTrainer", {"loss_type": "vespo"} | _vespo()),
    },
    "skyrl": {
        "grpo": Reference("regular", _fields(_SKYRL, loss_reduction="sequence_mean")),
        "dapo": Reference("regular", _fields(_SKYRL, loss_reduction="token_mean")),
        "dr_grpo": Reference(
            "regular",
            _fields(_SKYRL, loss_reduction="seq_mean_token_sum_norm") | {"max_seq_len": From("norm_length")},
        ),
        "gspo": Reference("gspo", _fields(_SKYRL, loss_reduction="sequence_mean"), ("sequence_log_ratio_clamp_10",)),
        "cispo": Reference(
            "cispo",
            {"loss_reduction": "token_mean"}
            | _section(
                "cispo",
                {
                    "cispo_eps_clip_low": From("eps_low", if_none=_NO_LOWER),
                    "cispo_eps_clip_high": From("eps_high"),
                },
            ),
            note="SkyRL clips the weight to [1 - cispo_eps_clip_low, 1 + cispo_eps_clip_high] (by default 0 and 5 in "
            "0.3: a lower bound at 1; 1 and 4 in 0.4: none); the registry's eps_low=None is cispo_eps_clip_low=1",
        ),
        "sapo": Reference(
            "sapo",
            {"loss_reduction": "sequence_mean"}
            | _section("sapo", {"tau_pos": From("tau_pos"), "tau_neg": From("tau_neg")}),
        ),
        "dppo_tv": Reference(
            "dppo",
            {"loss_reduction": "token_mean"}
            | _section(
                "dppo", {"dppo_type": "binary_tv", "delta_low": From("delta_low"), "delta_high": From("delta_high")}
            ),
            ("dppo_value_form", "clamp_stops_gradient"),
        ),
        "dppo_kl": Reference(
            "dppo",
            {"loss_reduction": "token_mean"}
            | _section(
                "dppo", {"dppo_type": "binary_kl", "delta_low": From("delta_low"), "delta_high": From("delta_high")}
            ),
            ("dppo_value_form", "clamp_stops_gradient", "binary_kl_nan_kept"),
            note="SkyRL's dppo.delta_low/high default to 0.2 for both variants; 0.05 is the paper's for binary_kl",
        ),
        "clip_cov": Reference(
            "clip_cov",
            _fields(_SKYRL, loss_reduction="token_mean")
            | _section(
                "clip_cov",
                {
                    "clip_ratio": From("clip_cov_ratio"),
                    "clip_cov_lb": From("clip_cov_lb"),
                    "clip_cov_ub": From("clip_cov_ub"),
                },
            ),
            ("no_overflow_guard", "random_candidates", "prescaled_advantages"),
        ),
        "rollout_is": Reference(
            "rollout_is",
            _fields(_SKYRL, loss_reduction="token_mean"),
            note="SkyRL's rollout_is takes its ratio against the rollout log-probs (the audit passes the old "
            "log-probs as those); in the registry: rollout_is with rollout_bypass=True and the rollout log-probs",
        ),
        "importance_sampling": Reference(
            "importance_sampling", {"loss_reduction": "token_mean"}, ("no_overflow_guard",)
        ),
        "kl_cov": Reference(
            "kl_cov",
            {"loss_reduction": "token_mean"}
            | _section("kl_cov", {"kl_cov_frac": From("kl_cov_ratio"), "ppo_kl_coef": From("ppo_kl_coef")}),
            ("no_overflow_guard", "covariance_ties", "prescaled_advantages"),
            note="SkyRL's kl_cov_frac is the fraction itself (int(n * kl_cov_frac) tokens), 0.2 unless told otherwise",
        ),
    },
    "openrlhf": {
        "grpo": Reference("ppo", _fields(_OPENRLHF, token_level_loss=False), ("empty_rows_not_counted",)),
        "dapo": Reference("ppo", _fields(_OPENRLHF, token_level_loss=True)),
        "dr_grpo": CannotExpress(
            "PolicyLoss reduces by token mean or sequence mean only (--actor.loss_agg_mode); no per-sequence token "
            "sum over a constant length"
        ),
        "gspo": Reference("gspo", _fields(_OPENRLHF), ("no_overflow_guard", "empty_rows_not_counted")),
    },
    "liger": {
        "grpo": Reference("LigerFusedLinearGRPOLoss", _fields(_LIGER, loss_type="grpo"), ("no_overflow_guard",)),
        "dapo": Reference("LigerFusedLinearGRPOLoss", _fields(_LIGER, loss_type="dapo"), ("no_overflow_guard",)),
        "dr_grpo": Reference(
            "LigerFusedLinearGRPOLoss",
            _fields(_LIGER, loss_type="dr_grpo") | {"max_completion_length": From("norm_length")},
            ("no_overflow_guard",),
        ),
        "gspo": Reference(
            "LigerFusedLinearGRPOLoss",
            _fields(_LIGER, loss_type="grpo", importance_sampling_level="sequence"),
            ("no_overflow_guard",),
        ),
        "cispo": Reference(
            "LigerFusedLinearGRPOLoss",
            {"loss_type": "cispo", "epsilon_high": From("eps_high", offset=1.0)},
            ("no_overflow_guard", "shifted_log_probs"),
            note="Liger-Kernel caps the weight at epsilon_high itself, as TRL: eps_high=4 is 5",
        ),
        "sapo": Reference("LigerFusedLinearGRPOLoss", {"loss_type": "sapo"} | _SAPO_TRL, ("no_overflow_guard",)),
        "luspo": Reference(
            "LigerFusedLinearGRPOLoss",
            _fields(_LIGER, loss_type="luspo", importance_sampling_level="sequence"),
            ("no_overflow_guard",),
        ),
        "vespo": Reference("LigerFusedLinearGRPOLoss", {"loss_type": "vespo"} | _vespo(), ("shifted_log_probs",)),
    },
}


def translation(framework: str, loss_name: str) -> Translation | None:
    """The framework's translation of ``loss_name``, None when it does not ship it (for verl,
    in the installed release: ``_in_installed_verl``)."""
    entry = TRANSLATIONS[framework].get(loss_name)
    return _in_installed_verl(loss_name, entry) if framework == "verl" else entry


def _in_installed_verl(loss_name: str, entry: Translation | None) -> Translation | None:
    """``entry`` as the installed verl release has it (``adapters.verl_releases``): verl 0.8 ships
    no ``dro`` and its actor config refuses ``loss_agg_mode=token-sum``."""
    from gmpo_plugins.adapters.verl_releases import installed

    release = installed()
    if loss_name == "dro" and not release.dro_beta:
        return None
    if loss_name == "grpo:token-sum" and not release.token_sum:
        return CannotExpress(f"verl {release.minor}'s actor config refuses loss_agg_mode=token-sum")
    return entry


def check_conventions() -> None:
    """ValueError naming the first translation that names an unknown convention."""
    for framework, losses in TRANSLATIONS.items():
        for loss_name, entry in losses.items():
            for name in getattr(entry, "conventions", ()):
                if name not in CONVENTIONS:
                    raise ValueError(f"{framework}/{loss_name}: unknown convention {name!r}")
