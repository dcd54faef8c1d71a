"""Run a framework's launch with its own trainer, in its own virtualenv, as a subprocess.

Where a framework runs: the interpreter ``compare`` uses (``GMPO_PLUGINS_PYTHON_<NAME>``,
this interpreter when it has the framework, or ``.nox/<name>/bin/python``;
``compare.backends.base.resolve_runner``). In ``DIR/<framework>/`` the runner writes the
launch's files, runs its preparation and then its command with that interpreter (``python3``
in the launch is replaced by it), as the leader of a session of its own, with the output in
``output.log``. A command that fails, or outlives ``timeout`` seconds, is ended with its whole
process group and the run is marked incomplete; Ctrl-C does the same, then re-raises. Whatever
a command leaves in its session (Ray's GCS, raylet and workers, which Ray puts in process
groups of their own) is ended when it ends, and a run's Ray folder (``standins``) removed.
Metrics are read back from what the trainer logged (``metrics``; OpenRLHF's TensorBoard
events through ``scalars``, run with OpenRLHF's interpreter, which has tensorboard), and the
parameters after each optimiser step of the first RL step from where the stand-ins left them
(``standins``, ``first_update``).

Runnable here (``RUNNABLE``): ``trl`` (on CPU as it is; with the seeded rollout of
``examples/trl_cpu`` where its interpreter sees no GPU), ``verl``, ``openrlhf`` and ``skyrl`` (on
a GPU, or with the CPU stand-ins of ``examples/verl_cpu``, ``examples/openrlhf_cpu`` and
``examples/skyrl_cpu``): ``standins``.

``FrameworkRun.first_update`` names the torch file of the actor's parameters after the first
RL step (all its optimiser steps on the first rollout batch) where the stand-ins left one
(``LocalLaunch.first_update``): verl, OpenRLHF and SkyRL hand their weights to the rollout engine
once per RL step, TRL's callback saves them after the RL step's last optimiser step.
``FrameworkRun.step_params`` names the files of its parameters after each optimiser step k = 1..K
of the first RL step (``LocalLaunch.step_params``: hooks on the actor's optimiser step in every
stand-in), all K of them or none.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gmpo_plugins.frameworks.launch import Launch
from gmpo_plugins.frameworks.metrics import (
    openrlhf_records,
    skyrl_records,
    trl_records,
    verl_records,
)
from gmpo_plugins.frameworks.spec import RunSpec
from gmpo_plugins.frameworks.standins import (
    SKYRL_METRICS,
    LocalLaunch,
    StandinsError,
    local_launch,
)

RUNNABLE = ("verl", "openrlhf", "trl", "skyrl")
END_WAIT_S = 10.0
LOG_TAIL_CHARS = 4000
READER_TIMEOUT_S = 300.0
TENSORBOARD_FLAG = "--logger.tensorboard_dir"  # OpenRLHF's: the folder of its TensorBoard events


class RunnerError(Exception):
    """A framework that cannot be run here (no interpreter for it, or no runner yet)."""


@dataclass
class FrameworkRun:
    """What one framework's run left: ``complete`` or not, why not, its per-step records, the
    stand-ins it ran with ("" for none), the file with its parameters after the first RL step
    ("" for none) and the files of those after each of its optimiser steps (empty for none)."""

    framework: str
    complete: bool
    seconds: float
    records: list[dict[str, float]] = field(default_factory=list)
    failure: str = ""
    standins: str = ""
    first_update: str = ""
    step_params: tuple[str, ...] = ()


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


def plan_local(launch: Launch, python: str, folder: Path, optimiser_steps: int = 1) -> LocalLaunch:
    """``launch`` as it runs here, in ``folder``, saving the parameters after each of the first RL
    step's ``optimiser_steps`` optimiser steps on stand-ins (``standins.local_launch``);
    RunnerError otherwise."""
    try:
        return local_launch(launch, python, folder, optimiser_steps)
    except StandinsError as exc:
        raise RunnerError(str(exc)) from None


def _argv(argv: Sequence[str], python: str) -> list[str]:
    return [python if arg == "python3" else arg for arg in argv]


def _end_group(process: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after ``END_WAIT_S``, to the process group of ``process``."""
    for sig, wait in ((signal.SIGTERM, END_WAIT_S), (signal.SIGKILL, None)):
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
        end_session(process.pid)  # the command leads its session (start_new_session)


def session_members(session: int) -> list[int]:
    """Ids of the processes in session ``session`` (Linux /proc; empty elsewhere)."""
    members = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # state, ppid, pgrp, session, ...
        if int(fields[3]) == session and int(entry.name) != os.getpid():
            members.append(int(entry.name))
    return members


def end_session(session: int) -> None:
    """SIGTERM, then SIGKILL after ``END_WAIT_S``, to every process left in ``session``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = session_members(session)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                continue
        deadline = time.monotonic() + END_WAIT_S
        while pids and time.monotonic() < deadline:
            time.sleep(0.2)
            pids = session_members(session)
        if not pids:
            return


def inherited_pythonpath() -> list[str]:
    """This process's PYTHONPATH entries, each made absolute: a framework runs in its own folder,
    where a relative entry (``PYTHONPATH=tests/skyrl/shims``) would name nothing."""
    entries = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    return [str(Path(entry).resolve()) for entry in entries if entry]


def run_launch(spec: RunSpec, local: LocalLaunch, folder: Path, python: str, timeout: float) -> FrameworkRun:
    """Write, prepare and run ``local.launch`` (already filled with ``folder``) in ``folder``."""
    launch = local.launch
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in launch.files.items():
        (folder / name).write_text(text)
    root = str(Path(__file__).resolve().parents[2])  # gmpo-plugins itself, for a checkout that is not installed
    env = {
        **os.environ,
        **launch.env,
        "PYTHONPATH": os.pathsep.join(filter(None, [*local.pythonpath, root, *inherited_pythonpath()])),
    }
    start = time.monotonic()
    try:
        with (folder / "output.log").open("w") as log:
            for argv in [*launch.prepare, launch.argv]:
                status, reason = _run(_argv(argv, python), folder, env, timeout, log)
                if status != 0:
                    seconds = time.monotonic() - start
                    log.flush()
                    tail = (folder / "output.log").read_text()[-LOG_TAIL_CHARS:]
                    why = reason or f"exit status {status}"
                    failure = f"{argv[0]} ... {why}\n{tail}"
                    return FrameworkRun(launch.framework, False, seconds, failure=failure, standins=local.standins)
    finally:
        if local.ray_dir is not None:
            shutil.rmtree(local.ray_dir, ignore_errors=True)
    seconds = time.monotonic() - start
    try:
        records = read_records(spec, local, folder, python, env)
    except (OSError, ValueError, KeyError, subprocess.TimeoutExpired) as exc:
        failure = f"its logged metrics could not be read: {type(exc).__name__}: {exc}"
        return FrameworkRun(launch.framework, False, seconds, failure=failure, standins=local.standins)
    update, steps = first_update(local), step_params(local)
    return FrameworkRun(
        launch.framework, True, seconds, records, standins=local.standins, first_update=update, step_params=steps
    )


def read_records(
    spec: RunSpec, local: LocalLaunch, folder: Path, python: str, env: Mapping[str, str]
) -> list[dict[str, float]]:
    """The per-RL-step records ``local``'s framework logged in ``folder`` (``metrics``); ``python``
    and ``env`` are the run's, for a reader that needs the framework's interpreter."""
    framework = local.launch.framework
    if framework == "trl":
        history = json.loads((folder / "log_history.json").read_text())
        return trl_records(history, spec.optimiser_steps_per_rl_step)
    if framework == "verl":
        lines = Path(local.launch.env["VERL_FILE_LOGGER_PATH"]).read_text().splitlines()
        return verl_records(lines, memory=not local.standins)
    if framework == "skyrl":
        return skyrl_records(json.loads((folder / SKYRL_METRICS).read_text()))
    if framework == "openrlhf":
        logdir = local.launch.argv[local.launch.argv.index(TENSORBOARD_FLAG) + 1]
        scalars = tensorboard_scalars(python, logdir, env)
        steps = spec.optimiser_steps_per_rl_step
        return openrlhf_records(scalars, kl=spec.kl_coef > 0, optimiser_steps=steps)
    raise RunnerError(f"{framework}: no metrics reader")


def tensorboard_scalars(python: str, logdir: str, env: Mapping[str, str]) -> dict[str, list[list[float]]]:
    """Every scalar under ``logdir``, read by ``python -m gmpo_plugins.frameworks.scalars``; ValueError
    with the reader's last line when it fails."""
    argv = [python, "-m", "gmpo_plugins.frameworks.scalars", logdir]
    done = subprocess.run(argv, env=dict(env), capture_output=True, text=True, timeout=READER_TIMEOUT_S)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ValueError(f"{' '.join(argv)}: exit status {done.returncode}: {last}")
    return json.loads(done.stdout)


def first_update(local: LocalLaunch) -> str:
    """The file of the actor's parameters after the first RL step, or "" (module docstring)."""
    if not local.first_update:
        return ""
    return local.first_update if Path(local.first_update).is_file() else ""


def step_params(local: LocalLaunch) -> tuple[str, ...]:
    """The files of the parameters after each optimiser step of the first RL step, or () when one
    is missing (module docstring)."""
    files = local.step_params
    return files if files and all(Path(name).is_file() for name in files) else ()
