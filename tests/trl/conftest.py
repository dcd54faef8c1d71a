"""Fixtures for the TRL adapter tests (real TRL on CPU, nothing downloaded)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("trl")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from datasets import Dataset  # noqa: E402

from .tiny import PROMPTS, build_model_dir, build_tokenizer  # noqa: E402

# Warnings TRL and transformers emit on their own (pyproject.toml makes the rest errors):
TRL_WARNINGS = (
    # transformers 5 renames gradient checkpointing to activation checkpointing; GRPOConfig and
    # GRPOTrainer still use the old field and methods (gradient_checkpointing, is_..., ..._disable)
    r"ignore:`\w*gradient_checkpointing\w*` is deprecated:FutureWarning",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.filterwarnings(*TRL_WARNINGS))


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory) -> str:
    return build_model_dir(tmp_path_factory.mktemp("tiny-qwen2"))


@pytest.fixture(scope="session")
def moe_model_dir(tmp_path_factory) -> str:
    return build_model_dir(tmp_path_factory.mktemp("tiny-qwen2-moe"), moe=True)


@pytest.fixture()
def tokenizer():
    return build_tokenizer()


@pytest.fixture()
def prompts() -> Dataset:
    return Dataset.from_dict({"prompt": PROMPTS * 2})
