"""Framework backends: how ``gmpo-plugins compare`` computes a policy loss through a
framework's own call path, and where each framework runs.

The trainer (``gmpo_plugins.compare.experiment.trainer``) owns everything except the loss: sampling,
rewards, advantages, the model's log-probs, the optimizer. For every mini-batch it calls

    loss, metrics = backend.policy_loss(PolicyLossCall(
        log_probs=...,      # (B, T) float32, requires grad: current policy, response tokens
        old_log_probs=...,  # (B, T) float32, detached: policy that sampled the rollout
        advantages=...,     # (B,)   float32: group-normalised, one per sequence
        mask=...,           # (B, T) bool: valid response tokens (EOS included)
        loss_name="gmpo",   # a name of the gmpo_plugins registry
        hparams={...},      # the loss's complete hyper-parameters in core names and core
                            # units (spec.resolve({})): eps_low/eps_high are in log space
                            # for spec.clip_space == "log", ratio space for "ratio"
        batch_info=BatchInfo(dp_size=1, global_batch_size=B, global_num_tokens=mask.sum()),
    ))
    loss.backward()

and steps the optimizer. Identical tensors go into every backend, so for one seed every
framework sees identical rollouts until their losses (and hence updates) differ.

Writing a backend for framework ``X`` (an adapter author's job):

1. Create ``gmpo_plugins/compare/backends/X.py`` with ``make_backend() -> LossBackend``.
   Import the framework inside functions (lazily). ``policy_loss`` must go through the
   framework's real loss call site (verl: ``core_algos.get_policy_loss_fn(...)`` /
   ``ppo_loss``; OpenRLHF: ``PolicyLoss``), translating tensor layout (e.g. (B,) advantages
   to (B, T)), hyper-parameter names (``eps_low`` -> ``clip_ratio_low``) and metric names
   back to core names: ``policy_loss, clip_frac_low, clip_frac_high, clip_frac, ppo_kl,
   log_ratio_min, log_ratio_max, seq_weight_min, seq_weight_mean, seq_weight_max``.
   Metrics a framework does not report may be left out (shown as "-"). Values may be
   floats or 0-dim tensors. ``supports(loss_name)`` says which registry losses it runs;
   ``compare`` rejects the others with a usage error. ``PolicyLossCall.token_advantages``,
   ``refuse_uncarried``, ``strip_prefix`` and ``OwnLosses`` are the translations several
   backends share.
2. Add a ``FrameworkInfo`` line to ``FRAMEWORKS`` below (name, module, the framework's
   import name).
3. Optionally define ``parity_targets() -> Iterable[ParityTarget]`` in the same module
   (see ``gmpo_plugins.compare.parity.harness``); without it the backend itself is the target.

Where a framework runs (``resolve_runner``):

- ``GMPO_PLUGINS_PYTHON_<NAME>`` set (e.g. ``GMPO_PLUGINS_PYTHON_VERL=/venvs/verl/bin/python``):
  in a subprocess of that interpreter (a relative path taken from the current folder and made
  absolute, since ``frameworks`` runs each trainer in its own folder);
- ``core``, or the framework importable in this interpreter: in this process;
- ``./.nox/<name>/bin/python`` exists (made and kept by ``nox -r -s <name>``): in a subprocess of it;
- otherwise a usage error telling the user to run ``python3 -m nox -r -s <name>`` first.

Before any warm-up, ``compare`` asks each subprocess framework which requested losses it
does not support (``run_one --check-losses``, seconds: it only imports the framework).
A subprocess run is ``<python> -m gmpo_plugins.compare.experiment.run_one`` with the initial model
saved under the report folder, so it needs gmpo-plugins, torch and transformers in its
environment (not rich or matplotlib). It prints one metrics record per step (JSON, prefixed
with ``RECORD_PREFIX``) on stdout; the parent merges them into its report.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import subprocess
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import torch

from gmpo_plugins.core.registry import get_loss
from gmpo_plugins.core.types import BatchInfo, LossInputs

Metric = float | torch.Tensor
RECORD_PREFIX = "GMPO_COMPARE_RECORD "
SUPPORT_PREFIX = "GMPO_COMPARE_UNSUPPORTED "
SUPPORT_CHECK_TIMEOUT_S = 120.0
PYTHON_ENV_PREFIX = "GMPO_PLUGINS_PYTHON_"


class BackendError(Exception):
    """A framework that cannot be used as asked (not installed, no adapter, unsupported loss)."""


@dataclass(frozen=True)
class PolicyLossCall:
    """One mini-batch's policy-loss call in core tensors and core names (module docstring).

    Args:
        log_probs: (B, T) current policy's log-probs of the response tokens (requires grad).
        old_log_probs: (B, T) log-probs of the policy that sampled the rollout (detached).
        advantages: (B,) one per sequence, or (B, T) per token.
        mask: (B, T) valid response tokens.
        loss_name: a name of the gmpo_plugins registry.
        hparams: the loss's complete hyper-parameters in core names and units (``spec.resolve({})``).
        batch_info: the global counts the loss normalises by.
        rollout_is_weights: (B, T) rollout importance-sampling weights, or None; only backends with
            ``accepts_rollout_is_weights = True`` take them (``require_no_rollout_is_weights``).
    """

    log_probs: torch.Tensor
    old_log_probs: torch.Tensor
    advantages: torch.Tensor
    mask: torch.Tensor
    loss_name: str
    hparams: Mapping[str, Any]
    batch_info: BatchInfo
    rollout_is_weights: torch.Tensor | None = None

    def token_advantages(self, mask: torch.Tensor) -> torch.Tensor:
        """(B, T) advantages: (B,) advantages spread over ``mask`` (the call's mask in the
        framework's dtype), A_i * m_it, as GRPO lays them out per token; (B, T) ones as given."""
        return self.advantages[:, None] * mask if self.advantages.dim() == 1 else self.advantages

    def require_no_rollout_is_weights(self, backend: str) -> None:
        """BackendError when this call carries rollout IS weights that ``backend`` cannot apply."""
        if self.rollout_is_weights is not None:
            raise BackendError(
                f"{backend}: rollout_is_weights: this backend does not take rollout IS weights "
                "(accepts_rollout_is_weights is False); expected None"
            )


class LossBackend(Protocol):
    """The policy loss of one framework, called with core tensors and core names."""

    name: str

    def supports(self, loss_name: str) -> bool:
        """Whether ``policy_loss`` can compute the registry loss ``loss_name``."""

    def policy_loss(self, call: PolicyLossCall) -> tuple[torch.Tensor, Mapping[str, Metric]]:
        """Scalar loss to back-propagate and metrics under core names (module docstring)."""


@dataclass(frozen=True)
class ParityTarget:
    """A loss call path that ``gmpo-plugins parity`` compares with the core: an adapter
    (must match) or a third-party reference (differences reported; ``compare.parity.harness``)."""

    label: str
    kind: Literal["adapter", "reference"]
    backend: LossBackend
    note: str = ""


class CoreBackend:
    """The gmpo_plugins core itself: ``get_loss(loss_name)(LossInputs(...), batch_info)``."""

    name = "core"
    accepts_rollout_is_weights = True  # parity's IS-weight case (``compare.parity.harness``)

    def supports(self, loss_name: str) -> bool:
        get_loss(loss_name)
        return True

    def policy_loss(self, call: PolicyLossCall) -> tuple[torch.Tensor, Mapping[str, Metric]]:
        inputs = LossInputs(
            call.log_probs, call.old_log_probs, call.advantages, call.mask, rollout_is_weights=call.rollout_is_weights
        )
        out = get_loss(call.loss_name)(inputs, call.batch_info, **call.hparams)
        return out.loss, out.metrics


def refuse_uncarried(
    framework: str, where: str, loss_name: str, hparams: Mapping[str, Any], carried: Iterable[str]
) -> None:
    """BackendError for the first of ``hparams`` that ``framework`` cannot carry (its name is
    not in ``carried``) and that differs from the registry default of ``loss_name``.

    Args:
        framework: the framework's name, first in the message.
        where: what carries the hyper-parameters there (e.g. "verl's actor config").
        loss_name: the registry loss whose defaults apply.
        hparams: core names and values.
        carried: the core names the framework translates.
    """
    names = sorted(carried)
    defaults = get_loss(loss_name).defaults
    for name, value in hparams.items():
        if name not in names and value != defaults.get(name):
            raise BackendError(
                f"{framework}: {loss_name} hyper-parameter {name}={value!r} cannot be set through {where} "
                f"(only {names}); keep its default {defaults.get(name)!r}"
            )


def strip_prefix(metrics: Mapping[str, Metric], prefix: str) -> dict[str, Metric]:
    """The metrics whose key starts with ``prefix``, under the key without it."""
    return {key[len(prefix) :]: value for key, value in metrics.items() if key.startswith(prefix)}


@dataclass(frozen=True)
class OwnLosses:
    """A framework's own implementations of built-in registry losses, the parity references
    of its backend with ``own=True``.

    Args:
        names: registry loss name -> the framework's name of its own implementation.
        label: the implementations in a parity target's label (e.g. "ppo/gspo").
        note: the parity target's note.
    """

    names: Mapping[str, str]
    label: str
    note: str

    def supports(self, loss_name: str) -> bool:
        """Whether the framework implements ``loss_name`` itself (a built-in, not a plugin's
        loss of the same name); the registry's error for an unknown name."""
        spec = get_loss(loss_name)
        return loss_name in self.names and spec.provider == "gmpo-plugins"

    def loss_type(self, loss_name: str, own: bool, prefix: str) -> str:
        """The framework's name of the loss: its own implementation (``own``), else the
        adapter's registration ``prefix + loss_name``."""
        return self.names[loss_name] if own else prefix + loss_name


def adapter_and_own_targets(
    framework: str, backend: Callable[[bool], LossBackend], adapter_note: str, own: OwnLosses
) -> Iterator[ParityTarget]:
    """The parity targets of a framework whose backend also runs its own implementations:
    ``backend(False)``, the adapter, and ``backend(True)``, a reference (built when reached)."""
    yield ParityTarget(f"{framework} adapter", "adapter", backend(False), note=adapter_note)
    yield ParityTarget(f"{framework} {own.label} (own)", "reference", backend(True), note=own.note)


@dataclass(frozen=True)
class FrameworkInfo:
    """A framework ``compare`` can run.

    name         the ``--frameworks`` value
    module       module with ``make_backend()``, imported only when the framework is used
    import_name  the framework's top-level package, to test whether it is installed here
                 (None: needs nothing beyond gmpo-plugins)
    """

    name: str
    module: str
    import_name: str | None


FRAMEWORKS: dict[str, FrameworkInfo] = {
    "core": FrameworkInfo("core", "gmpo_plugins.compare.backends.base", None),
    "verl": FrameworkInfo("verl", "gmpo_plugins.compare.backends.verl", "verl"),
    "openrlhf": FrameworkInfo("openrlhf", "gmpo_plugins.compare.backends.openrlhf", "openrlhf"),
    "trl": FrameworkInfo("trl", "gmpo_plugins.compare.backends.trl", "trl"),
    "skyrl": FrameworkInfo("skyrl", "gmpo_plugins.compare.backends.skyrl", "skyrl"),
}


def make_backend() -> LossBackend:
    """This module's backend factory (the ``core`` framework)."""
    return CoreBackend()


def framework_info(name: str) -> FrameworkInfo:
    """The registered framework ``name``; BackendError listing the valid names otherwise."""
    try:
        return FRAMEWORKS[name]
    except KeyError:
        raise BackendError(f"unknown framework {name!r}; valid: {', '.join(FRAMEWORKS)}") from None


def load_backend(name: str) -> LossBackend:
    """Import the framework's backend module and build its backend (in this process)."""
    info = framework_info(name)
    try:
        module = importlib.import_module(info.module)
    except ImportError as exc:
        raise BackendError(f"framework {name!r}: cannot import its backend module {info.module}: {exc}") from exc
    factory = getattr(module, "make_backend", None)
    if factory is None:
        raise BackendError(f"framework {name!r}: {info.module} defines no make_backend()")
    return factory()


@dataclass(frozen=True)
class Runner:
    """Where a framework runs: ``python`` None means this process."""

    framework: str
    python: str | None = None

    @property
    def in_process(self) -> bool:
        return self.python is None


def python_env_var(name: str) -> str:
    return PYTHON_ENV_PREFIX + name.upper()


def resolve_runner(name: str, cwd: Path | None = None) -> Runner:
    """Where framework ``name`` runs (rules in the module docstring); BackendError if nowhere."""
    info = framework_info(name)
    variable = python_env_var(name)
    configured = os.environ.get(variable)
    if configured:
        python = Path(cwd or Path.cwd(), configured)  # a relative path is the caller's, not the run folder's
        if not (python.is_file() and os.access(python, os.X_OK)):
            raise BackendError(f"{variable}={configured!r} is not an executable Python interpreter")
        return Runner(name, os.path.abspath(python))
    if info.import_name is None or importlib.util.find_spec(info.import_name) is not None:
        return Runner(name)
    nox_python = (cwd or Path.cwd()) / ".nox" / name / "bin" / "python"
    if nox_python.is_file():
        return Runner(name, str(nox_python))
    raise BackendError(
        f"framework {name!r} is not installed in this environment and .nox/{name} does not exist: "
        f"run `python3 -m nox -r -s {name}` first (it builds the {name} virtualenv; -r keeps it), "
        f"or set {variable} to a Python that has {name} and gmpo-plugins"
    )


class RunFailed(Exception):
    """A framework's subprocess run exited with an error."""


def _command(runner: Runner, *args: str) -> list[str]:
    if runner.python is None:
        raise BackendError(f"framework {runner.framework!r} runs in this process, not in a subprocess")
    return [str(runner.python), "-m", "gmpo_plugins.compare.experiment.run_one", "--framework", runner.framework, *args]


def check_in_subprocess(runner: Runner, losses: list[str], timeout: float = SUPPORT_CHECK_TIMEOUT_S) -> list[str]:
    """The losses of ``losses`` that the framework in ``runner.python`` does not support.

    Runs ``run_one --check-losses`` (it imports the framework and asks its backend, no
    model); BackendError with the child's last line when it fails or takes over ``timeout``.
    """
    command = _command(runner, "--check-losses", ",".join(losses))
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BackendError(f"framework {runner.framework!r}: the support check took over {timeout:.0f} s") from None
    except OSError as exc:
        raise BackendError(f"framework {runner.framework!r}: cannot run {runner.python}: {exc}") from None
    answers = [line for line in done.stdout.splitlines() if line.startswith(SUPPORT_PREFIX)]
    if done.returncode != 0 or not answers:
        last = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or ["no output"])[-1]
        raise BackendError(
            f"framework {runner.framework!r}: the support check in {runner.python} exited with status "
            f"{done.returncode}: {last}"
        )
    return list(json.loads(answers[-1][len(SUPPORT_PREFIX) :]))


def run_in_subprocess(
    runner: Runner,
    *,
    loss_name: str,
    task: str,
    model_dir: Path,
    config: Mapping[str, Any],
    device: str,
    log_path: Path,
) -> Generator[dict[str, Any], None, None]:
    """Run one (framework, loss) in ``runner.python``; yield its per-step records as they come.

    The child's stderr and any stdout line that is not a record go to ``log_path``;
    a non-zero exit raises RunFailed quoting the log's last lines. Closing the generator
    early (an error or Ctrl-C in the parent) terminates the child.
    """
    command = _command(
        runner,
        "--loss",
        loss_name,
        "--task",
        task,
        "--model",
        str(model_dir),
        "--device",
        device,
        "--config",
        json.dumps(dict(config)),
    )
    # Popen as a context manager closes the pipe and reaps the child; the child is terminated first
    # when the caller stops early (an error, Ctrl-C), else leaving the context would wait for it
    with log_path.open("w") as log, subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True) as process:
        try:
            assert process.stdout is not None
            for line in process.stdout:
                if line.startswith(RECORD_PREFIX):
                    yield json.loads(line[len(RECORD_PREFIX) :])
                else:
                    log.write(line)
            code = process.wait()
        finally:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
    if code != 0:
        tail = "".join(log_path.read_text().splitlines(keepends=True)[-15:])
        raise RunFailed(
            f"framework {runner.framework!r}, loss {loss_name!r}: `{' '.join(command[:3])} ...` exited with "
            f"status {code}; last lines of {log_path}:\n{tail}"
        )


@contextlib.contextmanager
def environ(name: str, value: str | None) -> Iterator[None]:
    """``os.environ[name] = value`` for the block (unchanged when value is None)."""
    if value is None:
        yield
        return
    previous = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous
