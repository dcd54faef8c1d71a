"""A run spec in a temporary folder: a model directory (only its existence is checked before a
trainer starts), a jsonl dataset, a reward file; ``write_spec`` writes the TOML."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REWARD = """
def reward(response, answer):
    return float(answer in response.split())


def one_argument(response):
    return 0.0


def keyword_only(*, response, answer):
    return 0.0
"""

BASE = {
    "model": "model",
    "dataset": "prompts.jsonl",
    "reward": "reward.py:reward",
    "loss": "gmpo",
    "rollouts_per_prompt": 2,
    "prompts_per_step": 2,
    "mini_batch_size": 4,
    "micro_batch_size": 2,
    "steps": 3,
    "learning_rate": 1e-4,
}


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key} = {toml_value(v)}" for key, v in value.items()) + "}"
    return repr(value)


@pytest.fixture
def spec_dir(tmp_path: Path) -> Path:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    rows = [{"prompt": f"say {d}", "answer": str(d)} for d in range(4)]
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (tmp_path / "reward.py").write_text(REWARD)
    return tmp_path


@pytest.fixture
def write_spec(spec_dir: Path):
    """``write_spec(drop=(), **values)``: BASE updated with ``values`` (None removes a key) as TOML."""

    def write(drop: tuple[str, ...] = (), **values) -> Path:
        data = {**BASE, **values}
        lines = [f"{key} = {toml_value(value)}" for key, value in data.items() if value is not None and key not in drop]
        path = spec_dir / "run.toml"
        path.write_text("\n".join(lines) + "\n")
        return path

    return write
