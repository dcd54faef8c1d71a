"""``FirstUpdateWeights``: save the model's parameters after the first RL step's optimiser steps;
``StepWeights``: after each of them (``examples/optimiser_steps.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optimiser_steps
import torch
from transformers import TrainerCallback


def optimiser_steps_per_generation(args: Any) -> int:
    """GRPOTrainer's optimiser steps on one generation batch (one RL step), epochs included:
    ``steps_per_generation / gradient_accumulation_steps * num_iterations``."""
    return args.steps_per_generation // args.gradient_accumulation_steps * args.num_iterations


class FirstUpdateWeights(TrainerCallback):
    """At the end of the last optimiser step of the first RL step (optimiser step
    ``optimiser_steps_per_generation``), ``torch.save`` the model's parameters (Hugging Face
    names, float32 copies on the CPU) to ``path``: what verl and OpenRLHF hand to their rollout
    engines after RL step 1."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if state.global_step != optimiser_steps_per_generation(args) or model is None:
            return
        if not state.is_world_process_zero:
            return
        weights = {
            name: tensor.detach().to("cpu", torch.float32, copy=True) for name, tensor in model.state_dict().items()
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(weights, self.path)


class StepWeights(TrainerCallback):
    """At the end of each optimiser step (``on_step_end``: after ``optimizer.step()``, the
    scheduler's step and ``zero_grad``; ``state.global_step`` counts the optimiser steps from 1),
    the model's parameters (Hugging Face names, the state dict's tensors) through
    ``optimiser_steps.save``, which keeps those of RL step 1's optimiser steps."""

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if model is None or not optimiser_steps.wanted(state.global_step):
            return
        optimiser_steps.save(model.state_dict().items(), state.global_step, write=state.is_world_process_zero)
