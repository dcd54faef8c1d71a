r"""``gmpo-openrlhf``: OpenRLHF's own PPO/GRPO entry point with registry losses.

    gmpo-openrlhf <train_ppo_ray arguments> --actor.policy_loss_type gmpo \\
        --actor.eps_clip_low_high 0.4 0.4 --algo.advantage.estimator group_norm --algo.kl.use_loss ...

runs ``python -m openrlhf.cli.train_ppo_ray`` (``runpy``, as ``__main__``: OpenRLHF's parser,
validation and ``train(args)``, unchanged) with three additions:

1. ``install()`` in this driver process (the patch of PolicyLoss; version check).
2. ``--actor.policy_loss_type`` accepts ``options.policy_loss_choices()`` (argparse lists
   them when a name is unknown). The arguments are checked (``check_args``) as ``train(args)``
   receives them, after OpenRLHF's own normalisation in its ``__main__`` block (a single
   ``--algo.advantage.is_correction_threshold`` becomes ``[0, delta]``, ``--train.dynamic_batch_enable``
   turns ``--ds.packing_samples`` on, ...): at the first statement of ``train(args)``
   (``if not ray.is_initialized():``), before Ray starts. For a registry loss a PolicyLoss is
   built from them as ``ActorPPOTrainer`` builds it (an error of OpenRLHF's own constructor
   becomes a refusal naming its flags), and sequence-level losses need one advantage per
   sequence; a refusal is a usage error naming the flag.
3. The ``ray.init`` that ``train(args)`` makes gets ``hook.runtime_env(<OpenRLHF's runtime
   env>)``: OpenRLHF's env vars plus the worker setup hook, which patches PolicyLoss in
   every Ray worker (added once; left out when a ``ray job submit`` env carries it), and
   the driver's ``GMPO_PLUGINS_LOSS_HPARAMS`` in its ``env_vars`` (``hparam_sources``).
4. Opt-in, off by default: with ``GMPO_OPENRLHF_SCHEDULE_TIMEOUT=<seconds>`` (> 0),
   ``stall.StallWatch`` ends the run with exit status 1 and a message naming what waits when
   a placement group or actor stays unschedulable that long, instead of a silent wait.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import runpy
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from gmpo_plugins.adapters.hparam_sources import forward_override
from gmpo_plugins.adapters.openrlhf.hook import install, runtime_env
from gmpo_plugins.adapters.openrlhf.options import (
    OpenRLHFConfigError,
    check_advantages,
    policy_loss_choices,
    registry_spec,
)
from gmpo_plugins.adapters.openrlhf.patch import signature_mismatch
from gmpo_plugins.adapters.openrlhf.stall import StallWatch, timeout_from_env
from gmpo_plugins.adapters.openrlhf.version import UnsupportedOpenRLHFVersionError
from gmpo_plugins.core.registry import LossNameCollisionError

OPENRLHF_MAIN = "openrlhf.cli.train_ppo_ray"
PROG = "gmpo-openrlhf"
POLICY_LOSS_DEST = "actor.policy_loss_type"


# PolicyLoss's constructor keywords -> the train_ppo_ray flags ActorPPOTrainer builds them from
POLICY_LOSS_FLAGS = {
    "clip_eps_low": "--actor.eps_clip_low_high",
    "clip_eps_high": "--actor.eps_clip_low_high",
    "dual_clip": "--actor.dual_clip",
    "token_level_loss": "--actor.loss_agg_mode",
    "policy_loss_type": "--actor.policy_loss_type",
    "is_correction_level": "--algo.advantage.is_correction_level",
    "is_correction_mode": "--algo.advantage.is_correction_mode",
    "is_correction_gating": "--algo.advantage.is_correction_gating",
    "is_correction_threshold": "--algo.advantage.is_correction_threshold",
}


class _Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__("parser captured")
        self.parser = parser


class _ReachedTrain(Exception):
    """Raised at the start of ``train(args)`` when only the arguments are wanted."""


@dataclass
class _Parsing:
    """What ``_openrlhf_parsing`` saw: the parser, its flat namespace, the thread that parsed, the
    namespace ``train(args)`` receives (``hierarchize``'s, normalised in place), whether it was checked."""

    parser: argparse.ArgumentParser | None = None
    flat: argparse.Namespace | None = None
    thread: int | None = None
    args: Any = None
    checked: bool = False


@contextlib.contextmanager
def _replaced(obj: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def _policy_loss_action(parser: argparse.ArgumentParser) -> argparse.Action | None:
    return next((action for action in parser._actions if action.dest == POLICY_LOSS_DEST), None)


def check_args(args: Any) -> None:
    """Refuse what the arguments cannot run; raises OpenRLHFConfigError naming the flag.

    ``args``: train_ppo_ray's arguments as its ``train(args)`` receives them (``args.actor.eps_clip_low_high``,
    after OpenRLHF's normalisation: ``train_args``). The opt-in hidden-state log-probs are checked for any
    loss; OpenRLHF's own ppo/gspo are not checked otherwise."""
    _check_hidden_logprobs(args)
    loss_type = args.actor.policy_loss_type
    spec = registry_spec(loss_type)
    if spec is None:
        return
    from openrlhf.models import PolicyLoss  # already imported by train_ppo_ray

    why = signature_mismatch(PolicyLoss)  # another release: its arguments are not these (0.10.4: no loss_agg_mode)
    if why is not None:
        raise UnsupportedOpenRLHFVersionError(f"{why}; --actor.policy_loss_type {loss_type} cannot run")
    low, high = args.actor.eps_clip_low_high
    advantage = args.algo.advantage
    arguments = {  # as ActorPPOTrainer.__init__ builds it
        "clip_eps_low": low,
        "clip_eps_high": high,
        "dual_clip": args.actor.dual_clip,
        "token_level_loss": args.actor.loss_agg_mode == "token-mean",
        "policy_loss_type": loss_type,
        "is_correction_level": advantage.is_correction_level,
        "is_correction_mode": advantage.is_correction_mode,
        "is_correction_gating": advantage.is_correction_gating,
        "is_correction_threshold": advantage.is_correction_threshold,
    }
    try:
        PolicyLoss(**arguments)
    except (OpenRLHFConfigError, UnsupportedOpenRLHFVersionError, LossNameCollisionError):
        raise
    except (ValueError, AssertionError) as exc:  # OpenRLHF's own checks in PolicyLoss.__init__
        raise OpenRLHFConfigError(_refused_by_openrlhf(args, arguments, exc)) from None
    check_advantages(
        spec,
        loss_type,
        estimator=advantage.estimator,
        gamma=advantage.gamma,
        kl_use_loss=args.algo.kl.use_loss,
        kl_init_coef=args.algo.kl.init_coef,
    )


def _refused_by_openrlhf(args: Any, arguments: dict[str, Any], exc: BaseException) -> str:
    """One line naming the flags (with their values) of the keywords OpenRLHF's message names (all of
    them when it names none), then OpenRLHF's message."""
    named = [keyword for keyword in arguments if keyword in str(exc)] or list(arguments)
    flags = dict.fromkeys(POLICY_LOSS_FLAGS[keyword] for keyword in named)
    shown = ", ".join(f"{flag} {_flag_value(functools.reduce(getattr, flag[2:].split('.'), args))}" for flag in flags)
    return f"gmpo_plugins: OpenRLHF's PolicyLoss refuses {shown}: {exc}"


def _flag_value(value: Any) -> str:
    if isinstance(value, list | tuple):
        return " ".join(map(str, value))
    return str(value)


def _check_hidden_logprobs(args: Any) -> None:
    """The opt-in hidden-state log-probs refuse what they cannot honour, for any loss."""
    from gmpo_plugins.adapters.openrlhf.hidden_logprobs import HiddenLogProbsError, check_args

    try:
        check_args(args)
    except HiddenLogProbsError as exc:
        raise OpenRLHFConfigError(str(exc)) from None


@contextlib.contextmanager
def _openrlhf_parsing(*, capture: bool = False, stop_at_train: bool = False) -> Iterator[_Parsing]:
    """While active, the parser that declares ``--actor.policy_loss_type`` accepts the registry
    names, under the name ``gmpo-openrlhf`` (``capture``: raise _Captured with it instead of parsing),
    and ``check_args`` runs on the arguments ``train(args)`` receives, at its first statement
    (``ray.is_initialized()``, in the thread that parsed), a refusal being the parser's usage error
    (``stop_at_train``: then raise _ReachedTrain). The namespace is the one ``openrlhf.utils.config.hierarchize``
    returned, which the ``__main__`` block normalises in place. A ``ray.init`` before the check raises
    RuntimeError (an OpenRLHF whose entry point goes another way)."""
    import openrlhf.utils.config as config
    import ray

    seen = _Parsing()
    original_parse_args = argparse.ArgumentParser.parse_args
    original_hierarchize, original_is_initialized, original_init = config.hierarchize, ray.is_initialized, ray.init

    def parse_args(self, args=None, namespace=None):
        action = _policy_loss_action(self)
        if action is None:
            return original_parse_args(self, args, namespace)
        action.choices = policy_loss_choices()
        self.prog = PROG
        if capture:
            raise _Captured(self)
        seen.flat = original_parse_args(self, args, namespace)
        seen.parser, seen.thread = self, threading.get_ident()
        return seen.flat

    def hierarchize(args: Any) -> Any:
        result = original_hierarchize(args)
        if args is seen.flat:
            seen.args = result
        return result

    def is_initialized() -> bool:
        if seen.args is not None and not seen.checked and threading.get_ident() == seen.thread:
            seen.checked = True
            try:
                check_args(seen.args)
            except (OpenRLHFConfigError, UnsupportedOpenRLHFVersionError, LossNameCollisionError) as exc:
                assert seen.parser is not None
                seen.parser.error(str(exc))
            if stop_at_train:
                raise _ReachedTrain
        return original_is_initialized()

    @functools.wraps(original_init)
    def init(*args: Any, **kwargs: Any) -> Any:
        if seen.parser is not None and not seen.checked:
            raise RuntimeError(
                f"gmpo_plugins: {OPENRLHF_MAIN} called ray.init before its arguments were checked (its train(args) "
                "no longer starts with ray.is_initialized() after hierarchize(args)); this OpenRLHF is not supported"
            )
        return original_init(*args, **kwargs)

    with (
        _replaced(argparse.ArgumentParser, "parse_args", parse_args),
        _replaced(config, "hierarchize", hierarchize),
        _replaced(ray, "is_initialized", is_initialized),
        _replaced(ray, "init", init),
    ):
        yield seen


@contextlib.contextmanager
def _ray_init_with_hook() -> Iterator[None]:
    """``ray.init(..., runtime_env=E)`` becomes ``ray.init(..., runtime_env=runtime_env(E))``."""
    import ray

    original = ray.init

    @functools.wraps(original)
    def init(*args: Any, **kwargs: Any):
        kwargs["runtime_env"] = runtime_env(_with_loss_hparams(kwargs.get("runtime_env")))
        return original(*args, **kwargs)

    with _replaced(ray, "init", init):
        yield


def _with_loss_hparams(env: dict[str, Any] | None) -> dict[str, Any]:
    """The runtime env ``env`` whose ``env_vars`` carry GMPO_PLUGINS_LOSS_HPARAMS when the driver has it."""
    env = dict(env or {})
    env_vars = forward_override(env.get("env_vars"))
    if env_vars:
        env["env_vars"] = env_vars
    return env


def openrlhf_parser() -> argparse.ArgumentParser:
    """train_ppo_ray's own ArgumentParser (built under its ``if __name__ == "__main__":``,
    so re-run with runpy and captured at ``parse_args``), with the widened loss choices."""
    try:
        with _openrlhf_parsing(capture=True), _replaced(sys, "argv", [OPENRLHF_MAIN]):
            runpy.run_module(OPENRLHF_MAIN, run_name="__main__")
    except _Captured as captured:
        return captured.parser
    raise RuntimeError(f"gmpo_plugins: {OPENRLHF_MAIN} did not call parse_args")


def _until_train(argv: Sequence[str]) -> _Parsing:
    """train_ppo_ray's ``__main__`` block for ``argv`` up to the start of ``train(args)``, checked as
    ``gmpo-openrlhf argv`` checks it (a refusal: SystemExit 2 with the usage line); Ray is not started."""
    try:
        with (
            _openrlhf_parsing(stop_at_train=True) as seen,
            _replaced(sys, "argv", [PROG, *argv]),
        ):
            runpy.run_module(OPENRLHF_MAIN, run_name="__main__")
    except _ReachedTrain:
        return seen
    raise RuntimeError(f"gmpo_plugins: {OPENRLHF_MAIN} did not reach train(args)")


def train_args(argv: Sequence[str]) -> SimpleNamespace:
    """The arguments train_ppo_ray's ``train(args)`` receives for ``argv`` (nested: ``args.actor.policy_loss_type``),
    after OpenRLHF's parser (registry names accepted) and its normalisation, ``check_args`` applied
    as ``gmpo-openrlhf argv`` applies it; without training."""
    return _until_train(argv).args


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """``argv`` parsed exactly as ``gmpo-openrlhf argv`` parses it (flat dotted names, as OpenRLHF's
    parser returns them), ``check_args`` applied as ``gmpo-openrlhf argv`` applies it (``train_args``)."""
    seen = _until_train(argv)
    assert seen.flat is not None
    return seen.flat


def main(argv: Sequence[str] | None = None) -> None:
    """Console script ``gmpo-openrlhf`` (module docstring)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        install()
        watch = StallWatch(timeout_from_env())
    except (UnsupportedOpenRLHFVersionError, ValueError) as exc:
        raise SystemExit(str(exc)) from exc
    watch.start()
    try:
        with _openrlhf_parsing(), _ray_init_with_hook(), _replaced(sys, "argv", [PROG, *argv]):
            runpy.run_module(OPENRLHF_MAIN, run_name="__main__", alter_sys=True)
    except KeyboardInterrupt:
        if watch.message is None:
            raise
        raise SystemExit(1) from None  # the watch has written its message
    finally:
        watch.stop()


if __name__ == "__main__":
    main()
