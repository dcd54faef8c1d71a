"""One small run spec for the framework translation tests (tests/<framework>/test_frameworks_translation.py):
a model folder, one prompt and a reward function written under ``tmp_path``, the batch settings below
unless the test sets them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gmpo_plugins.frameworks.spec import RunSpec, spec_from_mapping

# 4 prompts x 4 rollouts = 16 samples a step, in mini-batches of 8 and micro-batches of 2
BATCHES = {
    "rollouts_per_prompt": 4,
    "prompts_per_step": 4,
    "mini_batch_size": 8,
    "micro_batch_size": 2,
    "epochs_per_batch": 2,
    "steps": 5,
    "seed": 7,
}


def spec_in(tmp_path: Path, batches: dict[str, int] = BATCHES, **values: Any) -> RunSpec:
    """The spec of ``batches`` and ``values`` (which win), with its files made in ``tmp_path``."""
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "say 1", "answer": "1"}\n')
    (tmp_path / "reward.py").write_text("def reward(response, answer):\n    return 0.0\n")
    raw = {"model": "model", "dataset": "prompts.jsonl", "reward": "reward.py:reward", **batches, **values}
    return spec_from_mapping(raw, tmp_path)
