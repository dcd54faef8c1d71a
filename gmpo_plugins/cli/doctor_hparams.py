"""``gmpo-plugins doctor --framework F SETTING...``: the hyper-parameters a run would train with.

The settings are the framework's own, as its launcher takes them, read by the framework's
own config code; the adapter then resolves them exactly as in a run
(``adapters.hparam_sources``), ``GMPO_PLUGINS_LOSS_HPARAMS`` included:

    verl      Hydra overrides of ppo_trainer.yaml   actor_rollout_ref.actor.policy_loss.loss_mode=gmpo ...
    skyrl     SkyRL's overrides                     trainer.algorithm.policy_loss_type=gmpo ...
    openrlhf  train_ppo_ray flags, after ``--``     -- --actor.policy_loss_type gmpo ...
    trl       GRPOConfig fields, and loss=<name>    loss=gmpo epsilon=0.3 ...

The result (``Resolution``, or None when the framework's own loss is selected) carries the
provenance line and the default warning, which are not logged here; the adapters' other
one-time warnings (a sequence-level loss under token-mean) show as in a run.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

from gmpo_plugins.adapters.hparam_sources import Resolution
from gmpo_plugins.cli.errors import UsageError
from gmpo_plugins.core.registry import get_loss


def _verl(settings: Sequence[str]) -> tuple[str, Resolution | None]:
    import verl
    from hydra import compose, initialize_config_dir
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    from gmpo_plugins.adapters.verl.options import resolution_from_config
    from gmpo_plugins.adapters.verl.policy_loss import MARKER

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = compose(config_name="ppo_trainer", overrides=list(settings))
    # the composed actor section, read as the actor dataclass is (attributes); not converted to the
    # dataclass, whose checks of batch sizes do not concern the loss
    actor = config.actor_rollout_ref.actor
    loss_mode = actor.policy_loss.get("loss_mode", "vanilla")
    name = getattr(get_policy_loss_fn(loss_mode), MARKER, None)
    selector = f"loss_mode={loss_mode}"
    if name is None:
        return selector, None
    return selector, resolution_from_config(get_loss(name), actor, actor.loss_agg_mode, loss_mode)


def _skyrl(settings: Sequence[str]) -> tuple[str, Resolution | None]:
    from skyrl.train.config import SkyRLTrainConfig

    from gmpo_plugins.adapters.skyrl.options import resolution_from_config
    from gmpo_plugins.adapters.skyrl.registration import is_ours, register_losses, skyrl_policy_loss_registry

    register_losses()
    algorithm = SkyRLTrainConfig.from_cli_overrides(list(settings)).trainer.algorithm
    name = algorithm.policy_loss_type
    loss = skyrl_policy_loss_registry().get(name)
    selector = f"policy_loss_type={name}"
    if not is_ours(loss):
        return selector, None
    return selector, resolution_from_config(get_loss(loss.loss), algorithm, name)


def _openrlhf(settings: Sequence[str]) -> tuple[str, Resolution | None]:
    from gmpo_plugins.adapters.openrlhf.cli import openrlhf_parser
    from gmpo_plugins.adapters.openrlhf.options import loss_resolution

    args = vars(openrlhf_parser().parse_args(list(settings)))
    loss_type = args["actor.policy_loss_type"]
    low, high = args["actor.eps_clip_low_high"] or (args["actor.eps_clip"], args["actor.eps_clip"])
    resolution = loss_resolution(  # the PolicyLoss arguments ActorPPOTrainer builds from these flags
        loss_type,
        clip_eps_low=low,
        clip_eps_high=high,
        dual_clip=args["actor.dual_clip"],
        token_level_loss=args["actor.loss_agg_mode"] == "token-mean",
    )
    return f"--actor.policy_loss_type={loss_type}", resolution


def _trl(settings: Sequence[str]) -> tuple[str, Resolution | None]:
    import torch
    from transformers import HfArgumentParser
    from trl import GRPOConfig

    from gmpo_plugins.adapters.trl.options import loss_resolution

    loss = "gmpo"
    argv = ["--output_dir", tempfile.gettempdir()]
    if not torch.cuda.is_available() and not any(s.startswith("use_cpu=") for s in settings):
        argv += ["--use_cpu", "true"]  # GRPOConfig refuses its bf16 default without a GPU; the loss does not care
    for setting in settings:
        key, sep, value = setting.partition("=")
        if not sep:
            raise UsageError(f"TRL setting {setting!r}: expected FIELD=VALUE (a GRPOConfig field, or loss=NAME)")
        if key == "loss":
            loss = value
        else:
            argv += [f"--{key}", value]
    (args,) = HfArgumentParser(GRPOConfig).parse_args_into_dataclasses(argv)
    return f"RegistryGRPOTrainer(loss={loss!r})", loss_resolution(args, get_loss(loss))


FRAMEWORKS: dict[str, Callable[[Sequence[str]], tuple[str, Resolution | None]]] = {
    "verl": _verl,
    "openrlhf": _openrlhf,
    "trl": _trl,
    "skyrl": _skyrl,
}


def resolve_settings(framework: str, settings: Sequence[str]) -> tuple[str, Resolution | None]:
    """(how the settings select the loss, the resolution or None for the framework's own loss).

    Raises UsageError with the framework's or the adapter's one-line message for settings
    that the framework or the loss refuses.
    """
    try:
        return FRAMEWORKS[framework](settings)
    except UsageError:
        raise
    except SystemExit as exc:  # argparse of the framework (it printed its message)
        raise UsageError(f"{framework} refused the settings (exit status {exc.code})") from None
    except Exception as exc:  # noqa: BLE001 - any refusal of the framework or the adapter, as one line
        message = " ".join(str(exc).split())
        raise UsageError(f"{framework}: {type(exc).__name__}: {message}") from None


def as_dict(framework: str, selector: str, resolution: Resolution | None) -> dict[str, Any]:
    """The ``--json`` form of ``resolve_settings``'s result."""
    if resolution is None:
        return {"framework": framework, "selector": selector, "loss": None, "hparams": [], "warning": None}
    return {
        "framework": framework,
        "selector": selector,
        "loss": resolution.spec.name,
        "line": resolution.line(),
        "hparams": [{"name": i.hparam, "value": i.value, "source": i.source} for i in resolution.items],
        "warning": resolution.default_warning(),
    }
