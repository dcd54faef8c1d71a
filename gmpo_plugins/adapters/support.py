"""Which registry loss each framework reaches, and how: one Markdown table, from the specs.

Per loss and framework, a cell gives the framework's own version (``LossSpec.native``) and
the setting that selects the registry's, or the reason it is refused:

    verl      ``loss_mode=<name>``; ``gmpo_plugins.<name>`` where verl ships the name
    TRL       ``RegistryGRPOTrainer(loss="<name>")`` (the trainer's own argument: never shared)
    OpenRLHF  ``--actor.policy_loss_type <name>`` (prefixed where OpenRLHF owns the name); a
              loss none of whose reductions ``--actor.loss_agg_mode`` names takes its
              ``reduction`` from ``GMPO_PLUGINS_LOSS_HPARAMS``
    SkyRL     ``policy_loss_type=<name>`` (prefixed where SkyRL ships the name); refused for
              a loss not ``linear_in_advantages`` (SkyRL pre-scales the advantages)

A loss that ``requires`` an optional input (``LossSpec.requires``) the adapter does not pass
is refused with ``inputs.refusal``'s reason, as the adapter refuses it; one that reads the
rollout log-probs names the framework setting that passes them (``inputs.ROLLOUT_SETTINGS``), one
that reads whole groups the setting that keeps them whole (``inputs.GROUP_SETTINGS``).

The names follow the registration rule (``names.PREFIX``) as the frameworks installed here
ship them (``native``). ``python -m gmpo_plugins.adapters.support`` prints the table
(docs/losses.md shows it).
"""

from __future__ import annotations

from gmpo_plugins.adapters.inputs import GROUP_SETTINGS, ROLLOUT_SETTINGS, refusal
from gmpo_plugins.adapters.names import PREFIX
from gmpo_plugins.core.losses import BUILTIN_LOSSES
from gmpo_plugins.core.reduce import SEQ_MEAN_TOKEN_MEAN, TOKEN_MEAN
from gmpo_plugins.core.spec import LossSpec

FRAMEWORKS = ("verl", "trl", "openrlhf", "skyrl")
LABELS = {"verl": "verl", "trl": "TRL", "openrlhf": "OpenRLHF", "skyrl": "SkyRL"}
OPENRLHF_OWN = ("ppo", "gspo")


def _native(spec: LossSpec, framework: str) -> list[str]:
    return [entry.split(":", 1)[1] for entry in spec.native if entry.startswith(f"{framework}:")]


def _name(spec: LossSpec, framework: str) -> str:
    owned = spec.name in _native(spec, framework) or (framework == "openrlhf" and spec.name in OPENRLHF_OWN)
    return PREFIX + spec.name if owned else spec.name


def cell(spec: LossSpec, framework: str) -> str:
    """One table cell: ``native: ...; `setting` `` or ``refused: why``."""
    native = _native(spec, framework)
    own = f"native: {', '.join(native)}; " if native else ""
    reason = refusal(spec, LABELS[framework])
    if reason is not None:
        return f"{own}refused: {reason}"
    setting = _setting(spec, framework)
    if "rollout_log_probs" in spec.requires and framework in ROLLOUT_SETTINGS and not setting.startswith("refused"):
        setting = f"{setting} with `{ROLLOUT_SETTINGS[framework]}`"
    if "group_ids" in spec.requires and not spec.split_invariant and framework in GROUP_SETTINGS:
        setting = f"{setting} with `{GROUP_SETTINGS[framework]}`"
    return own + setting


def _setting(spec: LossSpec, framework: str) -> str:
    """The setting that selects ``spec`` in ``framework``, or ``refused: why`` (SkyRL)."""
    name = _name(spec, framework)
    if framework == "verl":
        return f"`loss_mode={name}`"
    if framework == "trl":  # the trainer's own argument: no name to share
        return f'`loss="{spec.name}"`'
    if framework == "openrlhf":
        reductions = spec.reductions if "reduction" in spec.defaults else ()
        override = reductions and not {TOKEN_MEAN, SEQ_MEAN_TOKEN_MEAN} & set(reductions)
        how = f" with `GMPO_PLUGINS_LOSS_HPARAMS` `reduction={reductions[0]}`" if override else ""
        return f"`{name}`{how}"
    if not spec.linear_in_advantages:
        return "refused: not linear in the advantages, which SkyRL pre-scales"
    return f"`policy_loss_type={name}`"


def support_table() -> str:
    """The built-in losses x frameworks table as Markdown (module docstring)."""
    rows = ["| loss | verl | TRL | OpenRLHF | SkyRL |", "|---|---|---|---|---|"]
    for spec in sorted(BUILTIN_LOSSES, key=lambda spec: spec.name):
        rows.append(f"| `{spec.name}` | " + " | ".join(cell(spec, fw) for fw in FRAMEWORKS) + " |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(support_table())
