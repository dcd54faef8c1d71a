"""``python -m trl_cpu SCRIPT [ARGS]``: run a TRL training script with every GRPOTrainer given the
seeded ``rollout_func`` and, with ``TRL_CPU_FIRST_UPDATE=<file>`` in the environment, the
``FirstUpdateWeights`` callback, with ``GMPO_CPU_STEP_PARAMS=<dir>`` the ``StepWeights`` callback
(package docstring)."""

from __future__ import annotations

import functools
import os
import runpy
import sys

import optimiser_steps
from trl import GRPOTrainer

from trl_cpu.rollout import seeded_rollout
from trl_cpu.weights import FirstUpdateWeights, StepWeights

FIRST_UPDATE_ENV = "TRL_CPU_FIRST_UPDATE"


def install() -> None:
    """Wrap ``GRPOTrainer.__init__`` (subclasses such as RegistryGRPOTrainer call it)."""
    original = GRPOTrainer.__init__

    @functools.wraps(original)
    def __init__(self, *args, rollout_func=None, callbacks=None, **kwargs):
        if rollout_func is not None:
            raise ValueError("trl_cpu: the script passes its own rollout_func; the seeded rollout would replace it")
        callbacks = list(callbacks or [])
        if os.environ.get(FIRST_UPDATE_ENV):
            callbacks.append(FirstUpdateWeights(os.environ[FIRST_UPDATE_ENV]))
        if os.environ.get(optimiser_steps.DIR_ENV):
            callbacks.append(StepWeights())
        original(self, *args, rollout_func=seeded_rollout, callbacks=callbacks, **kwargs)

    GRPOTrainer.__init__ = __init__


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python -m trl_cpu SCRIPT [ARGS]")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is marked experimental
    install()
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
