r"""``gmpo-openrlhf``: OpenRLHF's own PPO/GRPO entry point with registry losses.

    gmpo-openrlhf <train_ppo_ray arguments> --actor.policy_loss_type gmpo \\
        --actor.eps_clip_low_high 0.4 0.4 --algo.advantage.estimator group_norm --algo.kl.use_loss ...

runs ``python -m openrlhf.cli.train_ppo_ray`` (``runpy``, as ``__main__``: OpenRLHF's parser,
validation and ``train(args)``, unchanged) with three additions:

1. ``install()`` in this driver process (the patch of PolicyLoss; version check).
2. ``--actor.policy_loss_type`` accepts ``options.policy_loss_choices()`` (argparse lists
   them when a name is unknown). For a registry loss the parsed arguments are checked
   before anything starts: a PolicyLoss is built from them as ``ActorPPOTrainer`` builds
   it, and sequence-level losses need one advantage per sequence; a refusal is a usage
   error naming the flag.
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
from collections.abc import Iterator, Sequence
from typing import Any

from gmpo_plugins.adapters.hparam_sources import forward_override
from gmpo_plugins.adapters.openrlhf.hook import install, runtime_env
from gmpo_plugins.adapters.openrlhf.options import (
    OpenRLHFConfigError,
    check_advantages,
    policy_loss_choices,
    registry_spec,
)
from gmpo_plugins.adapters.openrlhf.stall import StallWatch, timeout_from_env
from gmpo_plugins.adapters.openrlhf.version import UnsupportedOpenRLHFVersionError
from gmpo_plugins.core.registry import LossNameCollisionError

OPENRLHF_MAIN = "openrlhf.cli.train_ppo_ray"
PROG = "gmpo-openrlhf"
POLICY_LOSS_DEST = "actor.policy_loss_type"


class _Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__("parser captured")
        self.parser = parser


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


def check_args(namespace: argparse.Namespace) -> None:
    """Refuse a registry loss the parsed (flat, dotted) train_ppo_ray arguments cannot run;
    raises OpenRLHFConfigError. OpenRLHF's own ppo/gspo are not checked."""

    def arg(name: str) -> Any:
        return getattr(namespace, name)

    _check_hidden_logprobs(namespace)
    loss_type = arg(POLICY_LOSS_DEST)
    spec = registry_spec(loss_type)
    if spec is None:
        return
    from openrlhf.models import PolicyLoss  # already imported by train_ppo_ray

    low, high = arg("actor.eps_clip_low_high") or (arg("actor.eps_clip"), arg("actor.eps_clip"))
    PolicyLoss(  # as ActorPPOTrainer.__init__ builds it; a refusal raises here
        clip_eps_low=low,
        clip_eps_high=high,
        dual_clip=arg("actor.dual_clip"),
        token_level_loss=arg("actor.loss_agg_mode") == "token-mean",
        policy_loss_type=loss_type,
        is_correction_level=arg("algo.advantage.is_correction_level"),
        is_correction_mode=arg("algo.advantage.is_correction_mode"),
        is_correction_gating=arg("algo.advantage.is_correction_gating"),
        is_correction_threshold=arg("algo.advantage.is_correction_threshold"),
    )
    check_advantages(
        spec,
        loss_type,
        estimator=arg("algo.advantage.estimator"),
        gamma=arg("algo.advantage.gamma"),
        kl_use_loss=arg("algo.kl.use_loss"),
        kl_init_coef=arg("algo.kl.init_coef"),
    )


def _check_hidden_logprobs(namespace: argparse.Namespace) -> None:
    """The opt-in hidden-state log-probs refuse what they cannot honour, for any loss."""
    from gmpo_plugins.adapters.openrlhf.hidden_logprobs import HiddenLogProbsError, check_args

    try:
        check_args(namespace)
    except HiddenLogProbsError as exc:
        raise OpenRLHFConfigError(str(exc)) from None


@contextlib.contextmanager
def _openrlhf_parsing(capture: bool) -> Iterator[None]:
    """While active, the parser that declares ``--actor.policy_loss_type`` accepts the
    registry names and checks them, under the name ``gmpo-openrlhf`` (``capture``: raise
    _Captured with it instead of parsing)."""
    original = argparse.ArgumentParser.parse_args

    def parse_args(self, args=None, namespace=None):
        action = _policy_loss_action(self)
        if action is None:
            return original(self, args, namespace)
        action.choices = policy_loss_choices()
        self.prog = PROG
        if capture:
            raise _Captured(self)
        parsed = original(self, args, namespace)
        try:
            check_args(parsed)
        except (OpenRLHFConfigError, UnsupportedOpenRLHFVersionError, LossNameCollisionError) as exc:
            self.error(str(exc))
        return parsed

    with _replaced(argparse.ArgumentParser, "parse_args", parse_args):
        yield


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


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """``argv`` parsed exactly as ``gmpo-openrlhf argv`` parses it (flat dotted names), without
    training: OpenRLHF's parser, registry names accepted, ``check_args`` applied."""
    parser = openrlhf_parser()
    with _openrlhf_parsing(capture=False):
        return parser.parse_args(list(argv))


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
        with _openrlhf_parsing(capture=False), _ray_init_with_hook(), _replaced(sys, "argv", [PROG, *argv]):
            runpy.run_module(OPENRLHF_MAIN, run_name="__main__", alter_sys=True)
    except KeyboardInterrupt:
        if watch.message is None:
            raise
        raise SystemExit(1) from None  # the watch has written its message
    finally:
        watch.stop()


if __name__ == "__main__":
    main()
