"""Run a framework's launch with its own trainer, in its own virtualenv, as a subprocess.

Where a framework runs: the interpreter ``compare`` uses (``GMPO_PLUGINS_PYTHON_<NAME>``,
this interpreter when it has the framework, or ``.nox/<name>/bin/python``;
``compare.backends.base.resolve_runner``). In ``DIR/<framework>/`` the runner writes the
launch's files, runs its preparation and then its command with that interpreter (``python3``
in the launch is replaced by it), in a process group of its own, with the output in
``output.log``. A command that fails, or outlives ``timeout`` seconds, is ended with its whole
process group (Ray workers included) and the run is marked incomplete; Ctrl-C does the same,
then re-raises. Metrics are read back from what the trainer logged (``metrics``).

Runnable here: ``trl`` (TRL's GRPOTrainer runs on CPU as it is). The other frameworks need
their CPU stand-ins (``examples/verl_cpu``, ``examples/openrlhf_cpu``) or a GPU; for them
``RUNNABLE`` says so and the command refuses before anything starts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gmpo_plugins.frameworks.launch import Launch
from gmpo_plugins.frameworks.metrics import trl_records
from gmpo_plugins.frameworks.spec import RunSpec

RUNNABLE = ("trl",)
LOG_TAIL_CHARS = 4000


class RunnerError(Exception):
    """A framework that cannot be run here (no interpreter for it, or no runner yet)."""


@dataclass
class FrameworkRun:
    """What one framework's run left: ``complete`` or not, why not, its per-step records."""

    framework: str
    complete: bool
    seconds: float
    records: list[dict[str, float]] = field(default_factory=list)
    failure: str = ""


def framework_python(framework: str) -> str:
    """The interpreter that runs ``framework`` (module docstring); RunnerError otherwise."""
    from gmpo_plugins.compare.backends.base import BackendError, resolve_runner

    if framework not in RUNNABLE:
        raise RunnerError(
            f"{framework}: running its trainer is not available in this version (runnable: "
            f"{', '.join(RUNNABLE)}); use --dry-run for its launch"
        )
    try:
        runner = resolve_runner(framework)
    except BackendError as exc:
        raise RunnerError(f"{framework}: {exc}") from None
    return runner.python or sys.executable


def _argv(argv: Sequence[str], python: str) -> list[str]:
    return [python if arg == "python3" else arg for arg in argv]


def _end_group(process: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 10 s, to the process group of ``process``."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, None)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _run(argv: list[str], folder: Path, env: dict[str, str], timeout: float, log) -> tuple[int | None, str]:
    """(exit status or None after the timeout, reason) of one command, output appended to ``log``."""
    log.write(f"$ {' '.join(argv)}\n")
    log.flush()
    process = subprocess.Popen(argv, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        return process.wait(timeout=timeout), ""
    except subprocess.TimeoutExpired:
        _end_group(process)
        return None, f"stopped after {timeout:.0f} s"
    except KeyboardInterrupt:
        _end_group(process)
        raise
    finally:
        if process.poll() is None:
            _end_group(process)


def run_launch(spec: RunSpec, launch: Launch, folder: Path, python: str, timeout: float) -> FrameworkRun:
    """Write, prepare and run ``launch`` (already filled with ``folder``) in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in launch.files.items():
        (folder / name).write_text(text)
    root = str(Path(__file__).resolve().parents[2])  # gmpo-plugins itself, for a checkout that is not installed
    env = {
        **os.environ,
        **launch.env,
        "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
    }
    start = time.monotonic()
    with (folder / "output.log").open("w") as log:
        for argv in [*launch.prepare, launch.argv]:
            status, reason = _run(_argv(argv, python), folder, env, timeout, log)
            if status != 0:
                seconds = time.monotonic() - start
                log.flush()
                tail = (folder / "output.log").read_text()[-LOG_TAIL_CHARS:]
                why = reason or f"exit status {status}"
                return FrameworkRun(launch.framework, False, seconds, failure=f"{argv[0]} ... {why}\n{tail}")
    seconds = time.monotonic() - start
    return FrameworkRun(launch.framework, True, seconds, records=read_records(spec, launch.framework, folder))


def read_records(spec: RunSpec, framework: str, folder: Path) -> list[dict[str, float]]:
    """The per-RL-step records ``framework`` logged in ``folder`` (``metrics``)."""
    if framework == "trl":
        history = json.loads((folder / "log_history.json").read_text())
        per_rl_step = spec.responses_per_step // spec.mini_batch_size * spec.epochs_per_batch
        return trl_records(history, per_rl_step)
    raise RunnerError(f"{framework}: no metrics reader")
