"""The actor's parameters after each optimiser step of the first RL step, as every CPU stand-in saves
them (examples/verl_cpu, examples/openrlhf_cpu, examples/skyrl_cpu, examples/trl_cpu; an example, not
shipped; no framework is imported here).

A run's sync hands its rollout engine the weights once per RL step, after the step's last optimiser
step; the optimiser steps before it (several mini-batches, several epochs on one rollout batch) leave
no trace there. With ``GMPO_CPU_STEP_PARAMS=<dir>`` and ``GMPO_CPU_STEP_COUNT=K`` in the environment of
the process that steps the actor's optimiser, each stand-in calls ``save`` after optimiser step
``n`` of the run (counted from 1), which writes ``<dir>/step_<n>.pt`` for ``n <= K``: with K the
optimiser steps of one RL step, the parameters after each optimiser step of RL step 1. The file is a
state dict: every parameter under the name of the model's own ``*.safetensors``, a full float32 copy
on the CPU (small: the example's model is tiny). ``gmpo-plugins frameworks`` sets both
(``gmpo_plugins/frameworks/standins.py``, ``STEP_PARAMS_ENV`` and ``STEP_COUNT_ENV`` there).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import torch

DIR_ENV = "GMPO_CPU_STEP_PARAMS"
COUNT_ENV = "GMPO_CPU_STEP_COUNT"


def wanted(step: int) -> bool:
    """Whether optimiser step ``step`` of the run is one of RL step 1's to save (module docstring)."""
    return bool(os.environ.get(DIR_ENV)) and 1 <= step <= int(os.environ.get(COUNT_ENV, "0"))


def save(named: Iterable[tuple[str, torch.Tensor]], step: int, write: bool = True) -> None:
    """Where ``wanted(step)``: take the ``(name, tensor)`` pairs as float32 CPU copies and, with
    ``write`` (rank 0), ``torch.save`` them to ``<dir>/step_<step>.pt``. Every rank calls it alike:
    a generator that gathers shards collectively must run on each of them."""
    if not wanted(step):
        return
    state = {name: tensor.detach().to("cpu", torch.float32, copy=True) for name, tensor in named}
    if not write:
        return
    directory = os.environ[DIR_ENV]
    os.makedirs(directory, exist_ok=True)
    torch.save(state, os.path.join(directory, f"step_{step}.pt"))
