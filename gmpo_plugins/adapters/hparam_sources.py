r"""Where each hyper-parameter of a registry loss comes from, the same way in every adapter.

Each adapter declares one table of ``Field`` rows: a framework setting (its own name, its
default) and the registry hyper-parameter it feeds. A row feeds every loss whose
``spec.defaults`` declares that hyper-parameter; rows for one hyper-parameter are tried in
order and the first one present wins (verl's ``clip_ratio_low``, then ``clip_ratio``).
Adding a framework setting for a hyper-parameter is one row.

Precedence, for each hyper-parameter of the loss:

    1. the override: ``GMPO_PLUGINS_LOSS_HPARAMS``, a JSON object {hparam: value} for the
       registry loss the run uses (TRL's ``loss_hparams`` argument is a second channel)
    2. the framework's field
    3. the loss's own default (``spec.defaults``)

The shared options every loss accepts beside its own resolve after the loss's own
hyper-parameters: the loss terms' (``core.terms.TERM_DEFAULTS``) the same way as a loss's own
where a row or the override sets them, left out (off) otherwise; the rollout correction's
(``core.correction.CORRECTION_DEFAULTS``) from the override only, passed as given (one at its
default, off, is left out).

A framework config cannot tell an explicit value from its default, so a field whose value
equals its default is labelled "framework default" and yields to an override; one
hyper-parameter set both by the override and by a field with a non-default value is an
error naming both. A row marked ``overridable=False`` (the framework uses the field beyond
the loss: SkyRL scales advantages by ``loss_reduction``) accepts an override only when it
agrees with the field.

Each hyper-parameter carries its source (``Resolved.source``)::

    override GMPO_PLUGINS_LOSS_HPARAMS
    framework field <name>      the field's value differs from its default
    framework default <name>    the field's value equals its default
    loss default

The driver forwards the variable to the Ray workers through the runtime env's ``env_vars``
(``forward_override``): ``gmpo-openrlhf`` and our SkyRL entry point do; for verl, whose
``main_ppo`` starts Ray, the integration page gives the override.

``python -m gmpo_plugins.adapters.hparam_sources <framework>`` prints a framework's table
(``field_table``) as the integration pages show it.

``announce`` logs one line per loss, once per process and on rank 0 only, under the
``gmpo_plugins`` logger at INFO, and gives one ``FrameworkDefaultWarning`` per loss when a
value taken from a framework default differs from the loss's own default (GMPO's 0.4
log-space band against the frameworks' 0.2, GSPO's 3e-4 / 4e-4), naming the field to set.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gmpo_plugins.adapters._common import check_translated_hparams
from gmpo_plugins.adapters.inputs import refuse_unsupplied
from gmpo_plugins.core.correction import CORRECTION_DEFAULTS
from gmpo_plugins.core.hparams import check_hparams
from gmpo_plugins.core.spec import LossSpec
from gmpo_plugins.core.terms import TERM_DEFAULTS

OVERRIDE_ENV = "GMPO_PLUGINS_LOSS_HPARAMS"
LOSS_DEFAULT = "loss default"
LOGGER_NAME = "gmpo_plugins"
ABSENT: Any = type("Absent", (), {"__repr__": lambda self: "ABSENT"})()
"""What ``Field.read`` returns when the setting is not given (e.g. null) or does not apply."""

logger = logging.getLogger(f"{LOGGER_NAME}.hparams")
_announced: set[tuple[str, str]] = set()


class FrameworkDefaultWarning(UserWarning):
    """A hyper-parameter was taken from a framework's default that differs from the loss's own."""


def _identity(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class Field:
    """One framework setting feeding one registry hyper-parameter.

    hparam       the registry hyper-parameter it feeds (any loss declaring it)
    name         the setting as the user writes it, e.g. ``actor_rollout_ref.actor.clip_ratio_low``
    default      the framework's default of the setting (its dataclass or argparse default)
    read         config -> the setting's value, or ``ABSENT`` (not set, or not applicable)
    convert      the setting's value -> the hyper-parameter's value (e.g. SkyRL's
                 ``sequence_mean`` -> ``seq-mean-token-mean``)
    overridable  False when the framework uses the setting beyond the loss
    when         when the row applies, for the docs (e.g. "clip_ratio_low is null")
    applies      spec -> whether the row feeds that loss at all (default: every loss that
                 declares ``hparam``); it reads what the spec declares, never its name
    """

    hparam: str
    name: str
    default: Any
    read: Callable[[Any], Any]
    convert: Callable[[Any], Any] = _identity
    overridable: bool = True
    when: str = ""
    applies: Callable[[LossSpec], bool] | None = None

    def feeds(self, spec: LossSpec) -> bool:
        """Whether this row feeds ``spec``: it declares ``hparam`` (every loss declares the loss
        terms' options, ``core.terms``) and ``applies`` allows it."""
        declared = self.hparam in spec.defaults or self.hparam in TERM_DEFAULTS
        return declared and (self.applies is None or self.applies(spec))


def own_default(spec: LossSpec, hparam: str) -> Any:
    """``spec``'s own default of ``hparam``: its ``defaults``, or the loss terms' (``TERM_DEFAULTS``)."""
    return spec.defaults[hparam] if hparam in spec.defaults else TERM_DEFAULTS[hparam]


def ratio_cap(spec: LossSpec) -> bool:
    """Whether ``spec``'s ratio clip is a one-sided cap: clip in ratio space with no lower clip
    by default (``eps_low`` None, e.g. cispo), so a framework's cap ``C`` is ``eps_high = C - 1``."""
    return spec.clip_space == "ratio" and "eps_low" in spec.defaults and spec.defaults["eps_low"] is None


def two_sided(spec: LossSpec) -> bool:
    """The complement of ``ratio_cap``: a loss whose clip bounds both sides by default."""
    return not ratio_cap(spec)


def attribute(attr: str, *, none_absent: bool = False) -> Callable[[Any], Any]:
    """A ``Field.read`` returning ``config.<attr>`` (``ABSENT`` when missing, or None with
    ``none_absent``); a dotted ``attr`` (``sapo.tau_pos``) follows nested configs."""

    def read(config: Any) -> Any:
        value = config
        for part in attr.split("."):
            value = getattr(value, part, ABSENT)
            if value is ABSENT:
                return ABSENT
        return ABSENT if none_absent and value is None else value

    return read


@dataclass(frozen=True)
class Resolved:
    """One hyper-parameter: its value and where it came from (module docstring)."""

    hparam: str
    value: Any
    source: str
    field: Field | None = None
    setting: str = ""
    """The setting to name for this hyper-parameter: the first row's (``epsilon_high``, not its
    fallback ``epsilon``)."""

    @property
    def from_framework_default(self) -> bool:
        """Whether the value is a framework setting's default."""
        return self.source.startswith("framework default")


@dataclass(frozen=True)
class Resolution:
    """Every hyper-parameter of ``spec`` for one framework config, with its source."""

    framework: str
    selector: str
    spec: LossSpec
    items: tuple[Resolved, ...]

    def params(self) -> dict[str, Any]:
        """The hyper-parameters to call the loss with (those not at the loss's default source)."""
        return {item.hparam: item.value for item in self.items if item.source != LOSS_DEFAULT}

    def line(self) -> str:
        """``gmpo_plugins: verl loss_mode=gmpo -> gmpo: eps_low=0.2 (framework default ...), ...``."""
        parts = ", ".join(f"{item.hparam}={item.value!r} ({item.source})" for item in self.items)
        return f"gmpo_plugins: {self.framework} {self.selector} -> {self.spec.name}: {parts or '(no hyper-parameters)'}"

    def default_warning(self) -> str | None:
        """The ``FrameworkDefaultWarning`` message, or None when no framework default differs
        from the loss's own default."""
        differing = [
            item
            for item in self.items
            if item.from_framework_default
            and item.field is not None
            and item.value != own_default(self.spec, item.hparam)
        ]
        if not differing:
            return None
        name = self.spec.name
        clauses = []
        for item in differing:
            assert item.field is not None
            own = own_default(self.spec, item.hparam)
            how = f"set {item.setting}"
            if item.field.overridable:
                how += f", or {OVERRIDE_ENV}='{json.dumps({item.hparam: own})}'"
            clauses.append(
                f"{item.hparam}={item.value!r} is {self.framework}'s default {item.field.name}, while {name}'s own "
                f"default is {own!r} ({how})"
            )
        keep = {item.hparam: item.value for item in differing if item.field is not None and item.field.overridable}
        silence = (
            f". To keep a framework default, pass it as {OVERRIDE_ENV}='{json.dumps(keep)}' (a field set to its "
            "default cannot be told from it)"
            if keep
            else ""
        )
        return f"gmpo_plugins: {self.framework} {self.selector}: " + "; ".join(clauses) + silence


def overrides_from_env(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``GMPO_PLUGINS_LOSS_HPARAMS`` parsed ({} when unset or empty); ValueError naming it
    when it is not a JSON object."""
    raw = (os.environ if environ is None else environ).get(OVERRIDE_ENV, "")
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"gmpo_plugins: {OVERRIDE_ENV} is not valid JSON ({exc}): {raw!r}") from None
    if not isinstance(value, dict):
        raise ValueError(
            f"gmpo_plugins: {OVERRIDE_ENV} must be a JSON object {{hparam: value}}, got {type(value).__name__}: {raw!r}"
        )
    return value


def _check_overrides(spec: LossSpec, channel: str, values: Mapping[str, Any], error: type[ValueError]) -> None:
    try:
        spec.resolve(values)  # unknown names (with did-you-mean) and out-of-range values
    except (TypeError, ValueError) as exc:
        raise error(f"gmpo_plugins: {channel}={json.dumps(values, default=repr)}: {exc}") from exc


def resolve(
    spec: LossSpec,
    fields: Sequence[Field],
    config: Any,
    *,
    framework: str,
    selector: str,
    error: type[ValueError],
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> Resolution:
    """Every hyper-parameter of ``spec`` from ``config`` through ``fields`` (module docstring).

    Args:
        spec: the registry loss.
        fields: the framework's table.
        config: what ``Field.read`` reads.
        framework: e.g. ``"verl"`` (messages).
        selector: how the config selects the loss, e.g. ``"loss_mode=gmpo"`` (messages).
        error: the adapter's configuration error.
        overrides: channel name -> {hparam: value}; None reads ``GMPO_PLUGINS_LOSS_HPARAMS``.

    Raises:
        error: a malformed or unknown override, an override that conflicts with a
            non-default field (naming both), a loss-term option in the override that needs an
            input the adapter does not pass (naming both, ``adapters.inputs``), or a value out
            of range (naming its setting).
    """
    if overrides is None:
        try:
            overrides = {OVERRIDE_ENV: overrides_from_env()}
        except ValueError as exc:
            raise error(str(exc)) from None
    override: dict[str, tuple[str, Any]] = {}
    for channel, values in overrides.items():
        _check_overrides(spec, channel, values, error)
        for hparam, value in values.items():
            if hparam in override:
                raise error(f"gmpo_plugins: {hparam} is set by both {override[hparam][0]} and {channel}; set it once")
            override[hparam] = (channel, value)
    refuse_unsupplied(spec, framework, error, hparams={hparam: value for hparam, (_, value) in override.items()})

    decided: dict[str, Resolved] = {}
    for row in fields:
        if not row.feeds(spec) or row.hparam in decided:
            continue
        raw = row.read(config)
        if raw is ABSENT:
            continue
        at_default = isinstance(raw, bool) == isinstance(row.default, bool) and raw == row.default
        if row.hparam in override:
            channel, value = override[row.hparam]
            agrees = not row.overridable and row.convert(raw) == value
            if not (at_default and row.overridable) and not agrees:
                why = (
                    f"{framework} uses {row.name} beyond the loss, so set that field instead"
                    if not row.overridable
                    else "set one of them"
                )
                raise error(
                    f"gmpo_plugins: {row.hparam} is set both by {channel} ({value!r}) and by {row.name}={raw!r}; {why}"
                )
            decided[row.hparam] = Resolved(row.hparam, value, f"override {channel}", row)
            continue
        kind = "framework default" if at_default else "framework field"
        first = next(other.name for other in fields if other.hparam == row.hparam and other.feeds(spec))
        decided[row.hparam] = Resolved(row.hparam, row.convert(raw), f"{kind} {row.name}", row, first)

    from_fields = {hparam: item.value for hparam, item in decided.items() if item.source.startswith("framework")}
    check_translated_hparams(
        spec,
        from_fields,
        setting_of=lambda hparam: decided[hparam].field.name,  # type: ignore[union-attr]
        context=selector,
        error=error,
    )
    items = []
    for hparam, default in spec.defaults.items():
        if hparam in decided:
            items.append(decided[hparam])
        elif hparam in override:
            items.append(Resolved(hparam, override[hparam][1], f"override {override[hparam][0]}"))
        else:
            items.append(Resolved(hparam, default, LOSS_DEFAULT))
    for hparam in TERM_DEFAULTS:  # listed where a field or the override sets them; off otherwise
        if hparam in decided:
            items.append(decided[hparam])
        elif hparam in override:
            items.append(Resolved(hparam, override[hparam][1], f"override {override[hparam][0]}"))
    for hparam, (channel, value) in override.items():  # the correction's options, where they act
        if hparam in CORRECTION_DEFAULTS and hparam not in spec.defaults and value != CORRECTION_DEFAULTS[hparam]:
            items.append(Resolved(hparam, value, f"override {channel}"))
    resolution = Resolution(framework, selector, spec, tuple(items))
    params = {**spec.defaults, **resolution.params()}
    try:
        optional = tuple(name for name, value in spec.defaults.items() if value is None)
        check_hparams(
            spec.name, params, reductions=spec.reductions, ratio_space=spec.clip_space == "ratio", optional=optional
        )
    except ValueError as exc:
        raise error(f"gmpo_plugins: {framework} {selector}: {exc}") from exc
    return resolution


def forward_override(env_vars: Mapping[str, str] | None) -> dict[str, str]:
    """A copy of a Ray runtime env's ``env_vars`` with this process's ``GMPO_PLUGINS_LOSS_HPARAMS``
    added (when set here and not already given there), so that Ray workers on any node read
    the override the driver was started with."""
    forwarded = dict(env_vars or {})
    value = os.environ.get(OVERRIDE_ENV)
    if value is not None and OVERRIDE_ENV not in forwarded:
        forwarded[OVERRIDE_ENV] = value
    return forwarded


def rank() -> int:
    """This process's rank: torch.distributed's when initialised, else ``RANK`` (0 when unset)."""
    distributed = sys.modules.get("torch.distributed")
    if distributed is not None and distributed.is_available() and distributed.is_initialized():
        return int(distributed.get_rank())
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def make_visible() -> None:
    """Let the ``gmpo_plugins`` logger's INFO lines reach the user unless logging was
    configured for it: level INFO when its level is unset, and a stderr handler when no
    handler would otherwise print them (Python's last-resort handler shows WARNING and up only)."""
    package = logging.getLogger(LOGGER_NAME)
    if package.level == logging.NOTSET:
        package.setLevel(logging.INFO)
    node: logging.Logger | None = package
    while node is not None:
        if node.handlers:
            return
        node = node.parent if node.propagate else None
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    package.addHandler(handler)


def announce(resolution: Resolution) -> None:
    """Log ``resolution.line()`` and warn ``resolution.default_warning()`` once per process and
    framework selector, on rank 0 only (module docstring)."""
    key = (resolution.framework, resolution.selector)
    if key in _announced:
        return
    _announced.add(key)
    if rank() != 0:
        return
    make_visible()
    logger.info(resolution.line())
    message = resolution.default_warning()
    if message is not None:
        warnings.warn(message, FrameworkDefaultWarning, stacklevel=3)


TABLES = {  # framework -> (module, attribute) of its Field table
    "verl": ("gmpo_plugins.adapters.verl.options", "VERL_FIELDS"),
    "openrlhf": ("gmpo_plugins.adapters.openrlhf.options", "OPENRLHF_FIELDS"),
    "trl": ("gmpo_plugins.adapters.trl.options", "TRL_FIELDS"),
    "skyrl": ("gmpo_plugins.adapters.skyrl.options", "SKYRL_FIELDS"),
}


def field_table(framework: str) -> str:
    """The framework's ``Field`` table as Markdown (the integration pages show it)."""
    import importlib

    module, attr = TABLES[framework]
    rows = [
        "| setting | feeds | setting's default | read when | override |",
        "|---|---|---|---|---|",
    ]
    for row in getattr(importlib.import_module(module), attr):
        override = "yes" if row.overridable else "only the same value"
        rows.append(f"| `{row.name}` | `{row.hparam}` | `{row.default!r}` | {row.when or 'always'} | {override} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(field_table(sys.argv[1]))
