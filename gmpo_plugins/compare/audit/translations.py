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

A registry loss without an entry for a framework is "not shipped" there. ``PER_MICRO_BATCH``
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


@dataclass(frozen=True)
class From:
    """A config field's value: the registry default of hyper-parameter ``name``, or ``if_none``
    where that default is None and the framework spells "off" otherwise."""

    name: str
    if_none: Any = None

    def value(self, hparams: Mapping[str, Any]) -> Any:
        """The field's value for the registry's resolved ``hparams``."""
        found = hparams[self.name]
        return self.if_none if found is None else found


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
    },
    "skyrl": {
        "grpo": Reference("regular", _fields(_SKYRL, loss_reduction="sequence_mean")),
        "dapo": Reference("regular", _fields(_SKYRL, loss_reduction="token_mean")),
        "dr_grpo": Reference(
            "regular",
            _fields(_SKYRL, loss_reduction="seq_mean_token_sum_norm") | {"max_seq_len": From("norm_length")},
        ),
        "gspo": Reference("gspo", _fields(_SKYRL, loss_reduction="sequence_mean"), ("sequence_log_ratio_clamp_10",)),
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
    },
}


def translation(framework: str, loss_name: str) -> Translation | None:
    """The framework's translation of ``loss_name``, None when it does not ship it."""
    return TRANSLATIONS[framework].get(loss_name)


def check_conventions() -> None:
    """ValueError naming the first translation that names an unknown convention."""
    for framework, losses in TRANSLATIONS.items():
        for loss_name, entry in losses.items():
            for name in getattr(entry, "conventions", ()):
                if name not in CONVENTIONS:
                    raise ValueError(f"{framework}/{loss_name}: unknown convention {name!r}")
