"""``FirstUpdateWeights``: save the model's parameters after the first optimiser step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback


class FirstUpdateWeights(TrainerCallback):
    """At the end of optimiser step 1, ``torch.save`` the model's parameters (Hugging Face names,
    float32 copies on the CPU) to ``path``."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if state.global_step != 1 or model is None or not state.is_world_process_zero:
            return
        weights = {
            name: tensor.detach().to("cpu", torch.float32, copy=True) for name, tensor in model.state_dict().items()
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(weights, self.path)
